"""The payloads clawlet's gateway server sends and the ``connect`` params it reads, as TypedDicts.

They follow ``@openclaw/gateway-protocol``'s JSON Schema (the tests check every frame against it:
``tests/support/gateway_schema.py``) and are types only: at run time they are the plain dicts they
always were, built and encoded as before, with nothing validated per frame. The frames that carry
them are in :mod:`clawlet.gateway.protocol`; request params other than ``connect``'s are read
leniently, field by field (``param_str`` and the like in :mod:`clawlet.gateway.server`). clawlet's
gateway client reads the method results it gets into the same types
(:mod:`clawlet.gateway.answers`).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from clawlet.gateway.protocol import ChatMessage

# -- connect ---------------------------------------------------------------------------------------


class ConnectParams(TypedDict):
    """What the server reads of ``connect``'s params, once checked."""

    minProtocol: int
    maxProtocol: int
    client: dict[str, Any]
    """As the client sent it; its ``id`` and ``mode`` are in the schema's sets."""
    scopes: list[str]
    caps: list[str]
    auth: dict[str, Any] | None


class HelloServer(TypedDict):
    version: str
    connId: str


class HelloFeatures(TypedDict):
    methods: list[str]
    events: list[str]


class HelloAuth(TypedDict):
    role: str
    scopes: list[str]


class HelloPolicy(TypedDict):
    maxPayload: int
    maxBufferedBytes: int
    tickIntervalMs: int


class HelloOk(TypedDict):
    """``connect``'s answer."""

    type: Literal["hello-ok"]
    protocol: int
    server: HelloServer
    features: HelloFeatures
    snapshot: dict[str, Any]
    auth: HelloAuth
    policy: HelloPolicy


# -- run events ----------------------------------------------------------------------------------


class RunRef(TypedDict):
    """Which run an event or an answer is about."""

    runId: str
    sessionKey: str
    agentId: str


class ChatUsage(TypedDict):
    input: int
    output: int
    totalTokens: int


ChatStateName = Literal["delta", "final", "aborted", "error"]


class ChatState(TypedDict):
    """What a ``chat`` event says of its run (the event without :class:`RunRef` and ``seq``); the
    last one (``final``, ``aborted`` or ``error``) is kept as the run's outcome."""

    state: ChatStateName
    message: NotRequired[ChatMessage]
    deltaText: NotRequired[str]
    """New text (``delta``): what follows the text sent before, or all of it with ``replace``."""
    replace: NotRequired[bool]
    usage: NotRequired[ChatUsage]
    stopReason: NotRequired[str]
    errorMessage: NotRequired[str]
    errorKind: NotRequired[str]


class ChatEvent(RunRef, ChatState):
    """A ``chat`` event's payload (protocol 3 clients get it without ``deltaText`` and ``replace``)."""

    seq: int
    """Per run: 1, 2, ..."""


class ToolStartData(TypedDict):
    phase: Literal["start"]
    name: str
    toolCallId: str
    args: dict[str, Any]


class ToolResultContent(TypedDict):
    content: list[dict[str, str]]


class ToolResultData(TypedDict):
    phase: Literal["result"]
    name: str
    toolCallId: str
    result: ToolResultContent
    isError: bool


class AgentEvent(TypedDict):
    """An ``agent`` event's payload: a tool call's start or result (to ``tool-events`` clients)."""

    runId: str
    seq: int
    """Per run: 1, 2, ... (counted apart from the ``chat`` events')."""
    stream: Literal["tool"]
    ts: int
    data: ToolStartData | ToolResultData


# -- method results ------------------------------------------------------------------------------


ChatSendStatus = Literal["started", "in_flight", "ok"]
"""``started``: a new run; for an idempotency key already seen, ``in_flight`` while its run goes
on (OpenClaw) and ``ok`` once it is over."""


class ChatSendResult(TypedDict):
    runId: str
    status: ChatSendStatus


class ChatAbortResult(TypedDict):
    ok: Literal[True]
    aborted: bool
    runIds: list[str]


class ChatHistoryResult(TypedDict):
    sessionKey: str
    sessionId: str
    messages: list[ChatMessage]
    offset: NotRequired[int]
    totalMessages: NotRequired[int]
    hasMore: NotRequired[bool]
    nextOffset: NotRequired[int]


class SessionRow(TypedDict):
    """One ``sessions.list`` row."""

    key: str
    kind: Literal["direct"]
    sessionId: str
    agentId: str
    displayName: str
    updatedAt: int
    isMain: bool
    chatType: Literal["direct"]
    label: NotRequired[str]
    derivedTitle: NotRequired[str]
    status: NotRequired[Literal["running"]]


class SessionsListResult(TypedDict):
    ts: int
    count: int
    sessions: list[SessionRow]

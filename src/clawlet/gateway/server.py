"""clawlet as an OpenClaw gateway: OpenClaw operator clients drive clawlet's own agents.

:class:`GatewayServer` speaks the Gateway WebSocket protocol (v3 and v4, see
``shared/design/PROTOCOLS.md`` §1) over any :class:`Transport` (send text, receive text, close);
``clawlet.gateway.asgi`` adapts Starlette/FastAPI WebSockets to it. One connection:

1. the server sends ``connect.challenge``; the first client frame must be ``req connect``
   (≤ 64 KiB). The highest common protocol version in [3, 4] is chosen; the token is checked
   against ``settings.gateway_tokens`` (none configured: no token needed); the answer is
   ``hello-ok`` and then a ``tick`` event every ``gateway_tick_interval_ms``;
2. requests: ``chat.send``, ``chat.abort``, ``chat.history``, ``sessions.list``, ``agents.list``,
   ``models.list`` and ``health``; ``agent`` (answered twice: ``accepted``, then the run's result,
   see :mod:`clawlet.gateway.agent_method`) and ``agent.wait``; the operator reads of
   :mod:`clawlet.gateway.operator` (``status``, ``system-presence``, ``logs.tail``, ``usage.cost``,
   ``diagnostics.stability``, ``config.get``) and what the TUI asks at start
   (``sessions.subscribe``, ``sessions.describe``, ``commands.list``, ``question.list``,
   ``plugin.approval.list``); each guarded by its operator scope;
3. every run started with ``chat.send`` streams ``chat`` events (``delta`` with the cumulative
   assistant text, then ``final``, ``aborted`` or ``error``) to every connection holding
   ``operator.read``, and tool activity as ``agent`` events to those that asked for
   ``caps:["tool-events"]``;
4. approvals (issue 9, shapes in :mod:`clawlet.gateway.approval_frames`): a ``chat.send`` from a
   connection holding ``operator.approvals`` with ``caps:["approvals"]`` runs its turn with
   ``approval_mode="ask"`` (any other connection's turns ``"deny"``: ask-tools are refused and the
   agent plans around them). When such a turn pauses, each pending tool call is announced
   (``session.approval`` + ``exec.approval.requested`` / ``plugin.approval.requested``) to the
   connections that may answer it and decided with ``approval.resolve`` (or the classic
   ``exec.approval.resolve`` / ``plugin.approval.resolve``); the agent's questions go out as
   ``question.requested`` to ``operator.questions`` holders and are answered with
   ``question.resolve``. The continuation streams under the same ``runId`` and ends with its
   ``final``. Nobody able to answer connected (at the pause, or for ``approval_orphan_grace``
   seconds later) or no answer within ``approval_timeout``: the gateway denies the call itself, so
   a run never stays without its final event; ``chat.abort`` drops what a run waits for.

A session key ``agent:<agentId>:<rest>`` names an agent (``main`` is the main clawlet home; any
other agent that ``list_agents()`` knows is the named workspace of that id) and a transcript
(``rest`` itself when it is a valid session id, else a stable hash of it). Runs belong to
``SessionManager``, not to the connection: a client that disconnects never stops its run.
Outgoing frames go through one queue per connection, so a slow or closed peer never blocks or
breaks the run that broadcasts to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import json
import logging
import os
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from clawlet import __version__
from clawlet.config import Settings
from clawlet.engine import compression
from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import Decision, InvalidDecision
from clawlet.event_stream import EventStream
from clawlet.events import (
    ApprovalRequested,
    NewSegment,
    Pending,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunText,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.gateway import agent_method, operator, session_admin
from clawlet.gateway import approval_frames as wire
from clawlet.gateway.approval_frames import GatewayApproval
from clawlet.gateway.payloads import (
    AgentEvent,
    ChatAbortResult,
    ChatEvent,
    ChatHistoryResult,
    ChatSendResult,
    ChatState,
    ChatUsage,
    ConnectParams,
    HelloOk,
    RunRef,
    SessionRow,
    SessionsListResult,
    ToolResultData,
    ToolStartData,
)
from clawlet.gateway.protocol import (
    APPROVAL_NOT_FOUND,
    CAP_TOOL_EVENTS,
    CLIENT_IDS,
    CLIENT_MODES,
    DEFAULT_AGENT_ID,
    DETAIL_AUTH_TOKEN_MISMATCH,
    DETAIL_AUTH_TOKEN_MISSING,
    DETAIL_MISSING_SCOPE,
    DETAIL_PROTOCOL_MISMATCH,
    DETAIL_UNKNOWN_AGENT_ID,
    EVENT_AGENT,
    EVENT_CHALLENGE,
    EVENT_CHAT,
    EVENT_SHUTDOWN,
    EVENT_TICK,
    FORBIDDEN,
    INVALID_REQUEST,
    MAIN_SESSION_SUFFIX,
    MAX_FRAME_BYTES,
    MAX_PRECONNECT_FRAME_BYTES,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    SCOPE_ADMIN,
    SCOPE_APPROVALS,
    SCOPE_QUESTIONS,
    SCOPE_READ,
    SCOPE_WRITE,
    UNAVAILABLE,
    ChatMessage,
    EncodedEvent,
    Frame,
    FrameError,
    GatewayError,
    assistant_message,
    decode,
    encode,
    event_frame,
    frame_size,
    lone_surrogate_path,
    now_ms,
    parse_session_key,
    response_error,
    response_ok,
)
from clawlet.logs import LOG_RING, swallowed
from clawlet.runtime.base import RuntimeFailure
from clawlet.runtime.manager import ApprovalDecided, ApprovalNotFound, Run, SessionBusy
from clawlet.runtime.session_errors import SESSION_ERRORS, session_error
from clawlet.services import InvalidWorkspace, Services, Workspaces
from clawlet.sessions.store import (
    CompressionConflict,
    InvalidSessionId,
    SessionCorrupt,
    SessionNotFound,
    StoredMessage,
    TranscriptStore,
    validate_session_id,
)

log = logging.getLogger(__name__)

AgentInfo = dict[str, Any]
ModelEntry = dict[str, Any]
AgentLister = Callable[[], list[AgentInfo] | Awaitable[list[AgentInfo]]]
ModelLister = Callable[[], list[ModelEntry] | Awaitable[list[ModelEntry]]]

ROLE_OPERATOR = "operator"
KNOWN_SCOPES = (SCOPE_READ, SCOPE_WRITE, SCOPE_ADMIN, SCOPE_APPROVALS, SCOPE_QUESTIONS)
MAIN_SESSION_KEY = f"agent:{DEFAULT_AGENT_ID}:{MAIN_SESSION_SUFFIX}"
SESSION_SCOPE = "per-sender"

#: The scope each method needs (the values of the protocol schema's ``methods`` map).
METHOD_SCOPES: dict[str, str] = {
    "health": SCOPE_READ,
    "agent": SCOPE_WRITE,
    "agent.wait": SCOPE_WRITE,
    "status": SCOPE_READ,
    "system-presence": SCOPE_READ,
    "logs.tail": SCOPE_READ,
    "usage.cost": SCOPE_READ,
    "diagnostics.stability": SCOPE_READ,
    "config.get": SCOPE_READ,
    "sessions.subscribe": SCOPE_READ,
    "sessions.describe": SCOPE_READ,
    "sessions.resolve": SCOPE_READ,
    "sessions.create": SCOPE_WRITE,
    "sessions.patch": SCOPE_WRITE,
    "sessions.reset": SCOPE_ADMIN,
    "sessions.delete": SCOPE_ADMIN,
    "sessions.compact": SCOPE_ADMIN,
    "commands.list": SCOPE_READ,
    "question.list": SCOPE_QUESTIONS,
    "plugin.approval.list": SCOPE_APPROVALS,
    "chat.send": SCOPE_WRITE,
    "chat.abort": SCOPE_WRITE,
    "chat.history": SCOPE_READ,
    "sessions.list": SCOPE_READ,
    "agents.list": SCOPE_READ,
    "models.list": SCOPE_READ,
    "approval.resolve": SCOPE_APPROVALS,
    "approval.get": SCOPE_APPROVALS,
    "exec.approval.resolve": SCOPE_APPROVALS,
    "plugin.approval.resolve": SCOPE_APPROVALS,
    "question.resolve": SCOPE_QUESTIONS,
}
SERVER_EVENTS = (
    EVENT_CHALLENGE,
    EVENT_TICK,
    EVENT_CHAT,
    EVENT_AGENT,
    EVENT_SHUTDOWN,
    session_admin.EVENT_SESSIONS_CHANGED,
    *wire.APPROVAL_EVENTS,
)

MAX_BUFFERED_BYTES = 16 * 1024 * 1024
"""``policy.maxBufferedBytes``: a peer this far behind (UTF-8 bytes queued) is dropped as a slow
consumer."""
MAX_CHAT_MESSAGE_CHARS = 100_000
"""The longest ``chat.send`` message (the workbench's and the inbox's limit too)."""
MAX_REQUEST_ID_CHARS = 512
"""The longest request ``id`` answered under its own id (longer ones are refused as ``unknown``)."""
MAX_CLOSE_REASON_BYTES = 120
"""A close frame's reason fits in 123 bytes."""
HANDSHAKE_TIMEOUT_SECONDS = 10.0
DELTA_INTERVAL_SECONDS = 0.05
"""Text deltas are coalesced to at most one ``delta`` event per run in this interval."""
IDEMPOTENCY_MEMORY = 1024
"""How many ``chat.send`` idempotency keys are remembered."""
HISTORY_DEFAULT_LIMIT = 200
HISTORY_MAX_LIMIT = 1000
HISTORY_MAX_CHARS = 500_000
SESSIONS_DEFAULT_LIMIT = 200
CLOSE_GRACE_SECONDS = 2.0
APPROVAL_TIMEOUT_SECONDS = 30 * 60.0
"""An approval nobody answers is denied after this long (OpenClaw's default exec approval timeout)."""
APPROVAL_ORPHAN_GRACE_SECONDS = 30.0
"""An approval is denied when nobody able to answer it has been connected for this long."""
APPROVAL_POLL_SECONDS = 1.0
"""How often a paused run checks for expiry, orphaning and decisions made elsewhere."""
SETTLED_APPROVALS_MEMORY = 1024
"""How many settled approvals ``approval.resolve`` / ``approval.get`` still answer for."""

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_RESTART = 1012


class Transport(Protocol):
    """One WebSocket as the gateway sees it."""

    async def send_text(self, text: str) -> None:
        """Send one text frame; raise if the peer is gone."""

    async def receive_text(self) -> str | bytes | None:
        """The next frame (a text frame as str, a binary one as its bytes), or None once the peer
        disconnected."""

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close the socket (never raises when it is already closed)."""


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame's reason may hold (whole UTF-8 characters)."""
    return text.encode("utf-8", "replace")[:MAX_CLOSE_REASON_BYTES].decode("utf-8", "ignore")


def screen_request(frame: dict[str, Any], text: str | bytes) -> tuple[str, GatewayError | None]:
    """The id to answer a decoded frame under and what makes it unusable as a request, if anything:
    a string that is not valid Unicode (a lone surrogate) anywhere in it, a frame that is not
    ``req``, an id that is not a non-empty string of at most ``MAX_REQUEST_ID_CHARS``. Frames that
    pass reach the handlers; the rest are answered with the error (under ``unknown`` when the id
    itself is unusable)."""
    raw_id = frame.get("id")
    surrogate = lone_surrogate_path(frame, text)
    id_ok = isinstance(raw_id, str) and 0 < len(raw_id) <= MAX_REQUEST_ID_CHARS and surrogate != "id"
    request_id = raw_id if id_ok and isinstance(raw_id, str) else "unknown"
    if surrogate is not None:
        where = surrogate if len(surrogate) <= 80 else surrogate[:80] + "…"
        return request_id, _invalid(f"invalid request frame: {where} is not valid Unicode (a lone surrogate)")
    if frame["type"] != "req":
        return request_id, _invalid(f"unexpected {frame['type']} frame: send req frames")
    if not isinstance(raw_id, str) or not raw_id:
        return request_id, _invalid("invalid request frame: id must be a non-empty string")
    if len(raw_id) > MAX_REQUEST_ID_CHARS:
        limit = MAX_REQUEST_ID_CHARS
        return request_id, _invalid(f"invalid request frame: id must be at most {limit} characters")
    return request_id, None


def stable_session_id(rest: str) -> str:
    """A valid transcript id for a session key suffix that is not one already."""
    return "gw-" + hashlib.sha256(rest.encode("utf-8")).hexdigest()[:32]


def session_refused(exc: Exception, session_id: str) -> GatewayError:
    """The ``ok:false`` answer for a refusal of the session manager (the one mapping,
    :func:`~clawlet.runtime.session_errors.session_error`): ``INVALID_REQUEST`` for a bad request,
    else ``UNAVAILABLE``, retryable while the session is busy answering."""
    decide = "decide it (exec.approval.resolve) or chat.abort first"
    error = session_error(exc, session_id, decide=decide)
    return GatewayError(
        INVALID_REQUEST if error.status == 422 else UNAVAILABLE,
        error.message,
        error.details if isinstance(error.details, dict) else None,
        retryable=True if error.code == "session_busy" else None,
    )


def session_id_for(rest: str) -> str:
    try:
        return validate_session_id(rest)
    except InvalidSessionId:
        return stable_session_id(rest)


def model_name(settings: Settings) -> str:
    """The configured model's id (usage is counted per model), or ``unknown``."""
    info = session_admin.configured_model(settings)
    return info.name if info is not None else "unknown"


def default_model_lister(settings: Settings) -> ModelLister:
    def models() -> list[ModelEntry]:
        info = session_admin.configured_model(settings)
        return [] if info is None else [{"id": info.name, "name": info.label, "provider": info.provider}]

    return models


def default_agent_lister() -> list[AgentInfo]:
    return [{"id": DEFAULT_AGENT_ID, "name": DEFAULT_AGENT_ID}]


async def call_lister(lister: Callable[[], Any]) -> list[dict[str, Any]]:
    """Call a sync or async lister; anything but a list of objects counts as empty."""
    result = lister()
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, list):
        return []
    return [item for item in result if isinstance(item, dict)]


def _non_empty(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def agent_entry(raw: AgentInfo) -> AgentInfo | None:
    """One ``agents.list`` row with only the fields (and types) the schema allows."""
    agent_id = _non_empty(raw.get("id"))
    if agent_id is None:
        return None
    entry: AgentInfo = {"id": agent_id.strip().lower()}
    name = _non_empty(raw.get("name"))
    if name:
        entry["name"] = name
    workspace = _non_empty(raw.get("workspace"))
    if workspace:
        entry["workspace"] = workspace
    model = raw.get("model")
    if _non_empty(model):
        entry["model"] = {"primary": model}
    elif isinstance(model, dict) and _non_empty(model.get("primary")):
        shaped: dict[str, Any] = {"primary": model["primary"]}
        fallbacks = model.get("fallbacks")
        if isinstance(fallbacks, list) and all(_non_empty(item) for item in fallbacks):
            shaped["fallbacks"] = list(fallbacks)
        entry["model"] = shaped
    return entry


def model_entry(raw: ModelEntry) -> ModelEntry | None:
    """One ``models.list`` row with only the fields (and types) the schema allows."""
    model_id = _non_empty(raw.get("id"))
    if model_id is None:
        return None
    entry: ModelEntry = {
        "id": model_id,
        "name": _non_empty(raw.get("name")) or model_id,
        "provider": _non_empty(raw.get("provider")) or "clawlet",
    }
    alias = _non_empty(raw.get("alias"))
    if alias:
        entry["alias"] = alias
    window = raw.get("contextWindow")
    if isinstance(window, int) and not isinstance(window, bool) and window >= 1:
        entry["contextWindow"] = window
    for flag in ("reasoning", "available", "supportsTools"):
        if isinstance(raw.get(flag), bool):
            entry[flag] = raw[flag]
    return entry


# -- params --------------------------------------------------------------------------------------


def _invalid(message: str, details: dict[str, Any] | None = None) -> GatewayError:
    return GatewayError(INVALID_REQUEST, message, details)


def param_str(
    params: dict[str, Any], name: str, *, required: bool = True, max_length: int | None = None
) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise _invalid(f"invalid params: {name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise _invalid(f"invalid params: {name} must be a non-empty string")
    if max_length is not None and len(value) > max_length:
        raise _invalid(f"invalid params: {name} must be at most {max_length} characters")
    return value


def param_int(params: dict[str, Any], name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _invalid(f"invalid params: {name} must be an integer ≥ {minimum}")
    if maximum is not None and value > maximum:
        raise _invalid(f"invalid params: {name} must be at most {maximum}")
    return value


def param_message(params: dict[str, Any], method: str) -> str:
    """The non-empty ``message`` of a ``chat.send`` or ``agent`` request, at most
    ``MAX_CHAT_MESSAGE_CHARS`` long."""
    message = params.get("message")
    if not isinstance(message, str):
        raise _invalid(f"invalid {method} params: message must be a string")
    if not message.strip():
        raise _invalid(f"invalid {method} params: message must not be empty")
    if len(message) > MAX_CHAT_MESSAGE_CHARS:
        raise _invalid(
            f"invalid {method} params: message must be at most {MAX_CHAT_MESSAGE_CHARS} characters "
            f"(it has {len(message)})",
            {"maxChars": MAX_CHAT_MESSAGE_CHARS, "chars": len(message)},
        )
    return message


def param_strings(params: dict[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _invalid(f"invalid params: {name} must be an array of strings")
    return list(value)


def connect_params(params: dict[str, Any] | None) -> ConnectParams:
    """``connect``'s params, checked (protocol versions are negotiated and the token checked after)."""
    if params is None:
        raise _invalid("invalid connect params: params must be an object")
    low = param_int(params, "minProtocol", minimum=1)
    high = param_int(params, "maxProtocol", minimum=1)
    if low is None or high is None:
        raise _invalid("invalid connect params: minProtocol and maxProtocol are required")
    client = params.get("client")
    if not isinstance(client, dict):
        raise _invalid("invalid connect params: client must be an object")
    if client.get("id") not in CLIENT_IDS:
        raise _invalid(f"invalid connect params: unknown client.id {client.get('id')!r}")
    if client.get("mode") not in CLIENT_MODES:
        raise _invalid(f"invalid connect params: unknown client.mode {client.get('mode')!r}")
    role = params.get("role", ROLE_OPERATOR)
    if role != ROLE_OPERATOR:
        raise _invalid(f"invalid role {role!r}: this gateway accepts operator clients only")
    scopes = param_strings(params, "scopes")
    caps = param_strings(params, "caps")
    auth = params.get("auth")
    if auth is not None and not isinstance(auth, dict):
        raise _invalid("invalid connect params: auth must be an object")
    return {
        "minProtocol": low,
        "maxProtocol": high,
        "client": client,
        "scopes": scopes,
        "caps": caps,
        "auth": auth,
    }


@dataclass(frozen=True)
class Deferred:
    """A request answered twice under its id, as OpenClaw's ``agent`` is: ``accepted`` at once,
    then ``final``'s result (a payload, or a :class:`GatewayError` it raises)."""

    accepted: dict[str, Any]
    final: Coroutine[Any, Any, dict[str, Any]]


Payload = Mapping[str, Any] | list[dict[str, Any]]
Handler = Callable[["Connection", dict[str, Any]], Awaitable["Payload | Deferred"]]


# -- connections ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


class Connection:
    """One client: its negotiated protocol, scopes and caps, and its outgoing queue."""

    def __init__(
        self, transport: Transport, remote: str, max_buffered: int, stability: operator.StabilityLog
    ) -> None:
        self.transport = transport
        self.remote = remote
        self.stability = stability
        self.conn_id = uuid.uuid4().hex
        self.since_ms = now_ms()
        self.protocol = 0
        self.scopes: frozenset[str] = frozenset()
        self.caps: frozenset[str] = frozenset()
        self.client: dict[str, Any] = {}
        self.connected = False
        self.closing = False
        self.session_events = False
        """Whether ``sessions.subscribe`` asked for ``sessions.changed`` events."""
        self.max_buffered = max_buffered
        self._seq = 0
        self._buffered = 0
        self._queue: asyncio.Queue[tuple[str, int] | _Close] = asyncio.Queue()
        """Frames to send, each with its size in UTF-8 bytes (counted in ``_buffered`` until sent)."""
        self._sender: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

    def can(self, scope: str) -> bool:
        return SCOPE_ADMIN in self.scopes or scope in self.scopes

    def receives(self, kind: wire.Kind) -> bool:
        """Whether this connection is shown (and may answer) pending items of this kind."""
        return self.connected and not self.closing and wire.receives(self.scopes, self.caps, kind)

    def start(self) -> None:
        self._sender = asyncio.create_task(self._send_loop(), name=f"gateway-send-{self.conn_id}")

    def start_ticks(self, interval_ms: int) -> None:
        self._ticker = asyncio.create_task(
            self._tick_loop(interval_ms / 1000), name=f"gateway-tick-{self.conn_id}"
        )

    def send(self, frame: Frame) -> bool:
        """Queue one frame; False (never an exception) when the connection is closing."""
        if self.closing:
            return False
        try:
            text = encode(frame)
        except (TypeError, ValueError):
            log.exception("gateway frame could not be encoded")
            return False
        return self._queue_frame(text, frame_size(text))

    def _queue_frame(self, text: str, size: int) -> bool:
        self._buffered += size
        if self._buffered > self.max_buffered:
            log.warning("gateway client %s is too slow; closing it", self.remote)
            self.stability.record(
                "gateway.slow_consumer",
                reason="slow consumer",
                queued=self._buffered,
                limitBytes=self.max_buffered,
            )
            self.abort(CLOSE_POLICY, "slow consumer")
            return False
        self._queue.put_nowait((text, size))
        return True

    def send_event(self, event: str, payload: Any) -> bool:
        """Queue an event with the next per-connection ``seq`` (1, 2, ... after the challenge)."""
        if self.closing:
            return False
        try:
            encoded = EncodedEvent.of(event, payload)
        except (TypeError, ValueError):
            log.exception("gateway frame could not be encoded")
            return False
        return self.send_encoded(encoded)

    def send_encoded(self, encoded: EncodedEvent) -> bool:
        """Queue an event encoded once for every connection it goes to, with this one's next ``seq``."""
        if self.closing:
            return False
        self._seq += 1
        return self._queue_frame(*encoded.with_seq(self._seq))

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close after every frame queued so far has been sent."""
        if self.closing:
            return
        self.closing = True
        self._queue.put_nowait(_Close(code, close_reason(reason)))

    def abort(self, code: int, reason: str) -> None:
        """Close now, dropping whatever is still queued."""
        self.closing = True
        if self._sender is not None:
            self._sender.cancel()
        if self._closer is None:
            self._closer = asyncio.create_task(self._close_transport(code, reason))

    async def _close_transport(self, code: int, reason: str) -> None:
        with swallowed(log, "gateway: closing the connection failed (%s)", reason):
            await self.transport.close(code, close_reason(reason))

    async def _send_loop(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, _Close):
                await self._close_transport(item.code, item.reason)
                return
            text, size = item
            try:
                await self.transport.send_text(text)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.debug("gateway: sending failed; the connection is closing", exc_info=True)
                self.closing = True  # the peer is gone; nothing more can be sent
                return
            self._buffered -= size  # counted until the transport took it

    async def _tick_loop(self, interval: float) -> None:
        while not self.closing:
            await asyncio.sleep(interval)
            self.send_event(EVENT_TICK, {"ts": now_ms()})

    async def finish(self) -> None:
        """Stop ticking, flush and close, and make sure no task of this connection outlives it."""
        if self._ticker is not None:
            self._ticker.cancel()
        self.close(CLOSE_NORMAL, "")
        waiting = {task for task in (self._sender, self._closer) if task is not None and not task.done()}
        if waiting:
            await asyncio.wait(waiting, timeout=CLOSE_GRACE_SECONDS)
        for task in (self._ticker, self._sender, self._closer):
            if task is not None and not task.done():
                task.cancel()
                with (
                    contextlib.suppress(asyncio.CancelledError),
                    swallowed(log, "gateway: a connection task failed"),
                ):
                    await task


# -- runs ----------------------------------------------------------------------------------------


@dataclass
class Target:
    """What a session key resolves to."""

    key: str
    agent_id: str
    session_id: str
    services: Services


@dataclass
class GatewayRun:
    """A run started through ``chat.send`` and the state of its ``chat`` event stream."""

    run_id: str
    target: Target
    run: Run
    started_ms: int = field(default_factory=now_ms)
    chat_seq: int = 0
    agent_seq: int = 0
    answer: RunText = field(default_factory=RunText)
    """The reply so far, across the continuations of a paused run."""
    sent_text: str = ""
    usage: ChatUsage | None = None
    task: asyncio.Task[None] | None = None
    pending: dict[str, GatewayApproval] = field(default_factory=dict)
    """What the run waits for (while paused), oldest first."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    aborted: bool = False
    finished: bool = False
    resumed: bool = False
    """True once the run paused and a continuation streams on (the text so far spans both)."""
    terminal: ChatState | None = None
    """The last ``chat`` event's payload (``final``, ``aborted`` or ``error``) once it was sent."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the run's event stream is over (terminal event sent, or the gateway stopped it)."""
    ended_ms: int | None = None

    @property
    def text(self) -> str:
        return self.answer.text

    def base(self) -> RunRef:
        return {"runId": self.run_id, "sessionKey": self.target.key, "agentId": self.target.agent_id}


def tool_args(rendered: str) -> dict[str, Any]:
    """clawlet renders a tool's input as text: JSON objects come back as objects."""
    try:
        parsed = json.loads(rendered)
    except ValueError:
        return {"input": rendered}
    return parsed if isinstance(parsed, dict) else {"input": rendered}


# -- the server ----------------------------------------------------------------------------------


class GatewayServer:
    """The OpenClaw Gateway protocol over clawlet's workspaces; transport-neutral."""

    def __init__(
        self,
        settings: Settings,
        workspaces: Workspaces,
        *,
        list_agents: AgentLister | None = None,
        list_models: ModelLister | None = None,
        delta_interval: float = DELTA_INTERVAL_SECONDS,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        approval_timeout: float = APPROVAL_TIMEOUT_SECONDS,
        approval_orphan_grace: float = APPROVAL_ORPHAN_GRACE_SECONDS,
        approval_poll_interval: float = APPROVAL_POLL_SECONDS,
    ) -> None:
        self.settings = settings
        self.workspaces = workspaces
        self.list_agents: AgentLister = list_agents or default_agent_lister
        self.list_models: ModelLister = list_models or default_model_lister(settings)
        self.delta_interval = delta_interval
        self.handshake_timeout = handshake_timeout
        self.max_buffered_bytes = max_buffered_bytes
        self.approval_timeout = approval_timeout
        self.approval_orphan_grace = approval_orphan_grace
        self.approval_poll_interval = approval_poll_interval
        self.approvals: OrderedDict[str, GatewayApproval] = OrderedDict()
        """Every approval and question announced (pending ones and the last settled ones), by id."""
        self.started = time.monotonic()
        self.connections: set[Connection] = set()
        self.runs: dict[str, GatewayRun] = {}
        self._idempotency: OrderedDict[str, str] = OrderedDict()
        self._pumps: set[asyncio.Task[None]] = set()
        self._ended_runs: OrderedDict[str, GatewayRun] = OrderedDict()
        """The last runs that ended (``agent.wait`` and a resent ``agent`` still answer for them)."""
        self._finals: set[asyncio.Task[None]] = set()
        self.stability = operator.StabilityLog()
        self.usage = operator.UsageLedger()
        self.model_name = model_name(settings)
        LOG_RING.install()
        self._handlers: dict[str, Handler] = {
            "health": self._health,
            "agent": self._agent,
            "agent.wait": self._agent_wait,
            "status": self._status,
            "system-presence": self._system_presence,
            "logs.tail": self._logs_tail,
            "usage.cost": self._usage_cost,
            "diagnostics.stability": self._diagnostics_stability,
            "config.get": self._config_get,
            "sessions.subscribe": self._sessions_subscribe,
            "sessions.describe": self._sessions_describe,
            "sessions.resolve": self._sessions_resolve,
            "sessions.create": self._sessions_create,
            "sessions.patch": self._sessions_patch,
            "sessions.reset": self._sessions_reset,
            "sessions.delete": self._sessions_delete,
            "sessions.compact": self._sessions_compact,
            "commands.list": self._commands_list,
            "question.list": self._question_list,
            "plugin.approval.list": self._plugin_approval_list,
            "chat.send": self._chat_send,
            "chat.abort": self._chat_abort,
            "chat.history": self._chat_history,
            "sessions.list": self._sessions_list,
            "agents.list": self._agents_list,
            "models.list": self._models_list,
            "approval.resolve": self._approval_resolve,
            "approval.get": self._approval_get,
            "exec.approval.resolve": self._classic_resolve,
            "plugin.approval.resolve": self._classic_resolve,
            "question.resolve": self._question_resolve,
        }

    @property
    def methods(self) -> list[str]:
        return list(self._handlers)

    # -- connection lifecycle ---------------------------------------------------------------------

    async def handle(self, transport: Transport, *, remote: str = "?") -> None:
        """Serve one accepted connection until it closes; never raises."""
        conn = Connection(transport, remote, self.max_buffered_bytes, self.stability)
        self.connections.add(conn)
        conn.start()
        try:
            if await self._handshake(conn):
                conn.start_ticks(self.settings.gateway_tick_interval_ms)
                await self._serve(conn)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("gateway connection from %s failed", remote)
            conn.close(CLOSE_INTERNAL_ERROR, "internal error")
        finally:
            self.connections.discard(conn)
            await conn.finish()
            log.debug("gateway connection %s from %s closed", conn.conn_id, remote)

    async def close(self, reason: str = "gateway stopping") -> None:
        """Say ``shutdown`` to every client and close them; wait briefly for runs' event streams."""
        for conn in list(self.connections):
            if conn.connected:
                conn.send_event(EVENT_SHUTDOWN, {"reason": reason})
            conn.close(CLOSE_RESTART, reason)
        for gateway_run in list(self.runs.values()):
            if gateway_run.pending and gateway_run.task is not None:
                gateway_run.task.cancel()  # paused: its state stays on disk, nothing to wait for
        if self._pumps:
            _, pending = await asyncio.wait(set(self._pumps), timeout=CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()

    async def _receive(self, conn: Connection, timeout: float | None = None) -> str | bytes | None:
        try:
            if timeout is None:
                return await conn.transport.receive_text()
            return await asyncio.wait_for(conn.transport.receive_text(), timeout)
        except TimeoutError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("gateway: receiving failed; the connection is over", exc_info=True)
            return None

    def _fail(self, conn: Connection, request_id: str, error: GatewayError, code: int = CLOSE_POLICY) -> bool:
        if code == CLOSE_TOO_BIG:
            self.stability.record(
                "payload.large", surface="gateway.ws", outcome="rejected", reason=error.message
            )
        conn.send(response_error(request_id, error))
        conn.close(code, error.message)
        return False

    async def _handshake(self, conn: Connection) -> bool:
        conn.send(event_frame(EVENT_CHALLENGE, {"nonce": str(uuid.uuid4()), "ts": now_ms()}))
        try:
            text = await self._receive(conn, self.handshake_timeout)
        except TimeoutError:
            conn.close(CLOSE_POLICY, "connect timeout")
            return False
        if text is None:
            return False
        if frame_size(text) > MAX_PRECONNECT_FRAME_BYTES:
            error = _invalid(f"frame before connect exceeds {MAX_PRECONNECT_FRAME_BYTES} bytes")
            return self._fail(conn, "unknown", error, CLOSE_TOO_BIG)
        try:
            frame = decode(text)
        except FrameError as exc:
            return self._fail(conn, "unknown", _invalid(str(exc)))
        request_id, problem = screen_request(frame, text)
        if frame["type"] != "req" or frame.get("method") != "connect":
            problem = _invalid("invalid handshake: first request must be connect")
        if problem is not None:
            return self._fail(conn, request_id, problem)
        params = frame.get("params")
        try:
            hello = self._connect(conn, params if isinstance(params, dict) else None)
        except GatewayError as error:
            if error.details and str(error.details.get("code", "")).startswith("AUTH_"):
                log.warning(
                    "gateway auth failure from %s: %s",
                    conn.remote,
                    error.details["code"],
                    extra={"event": "gateway_auth_failure"},
                )
            mismatch = (error.details or {}).get("code") == DETAIL_PROTOCOL_MISMATCH
            return self._fail(conn, request_id, error, CLOSE_PROTOCOL_ERROR if mismatch else CLOSE_POLICY)
        conn.connected = True
        conn.send(response_ok(request_id, hello))
        log.info(
            "gateway client connected: %s/%s v%s from %s",
            conn.client.get("id"),
            conn.client.get("mode"),
            conn.protocol,
            conn.remote,
            extra={"event": "gateway_connect"},
        )
        return True

    def _connect(self, conn: Connection, params: dict[str, Any] | None) -> HelloOk:
        """Check ``connect`` params, negotiate, authenticate; the ``hello-ok`` payload."""
        checked = connect_params(params)
        low, high, client = checked["minProtocol"], checked["maxProtocol"], checked["client"]
        scopes, caps, auth = checked["scopes"], checked["caps"], checked["auth"]
        version = min(high, PROTOCOL_VERSION)
        if low > high or version < max(low, MIN_PROTOCOL_VERSION):
            raise _invalid(
                "protocol mismatch",
                {
                    "code": DETAIL_PROTOCOL_MISMATCH,
                    "clientMinProtocol": low,
                    "clientMaxProtocol": high,
                    "expectedProtocol": PROTOCOL_VERSION,
                },
            )
        self._authenticate((auth or {}).get("token"))

        conn.protocol = version
        conn.client = {key: client[key] for key in ("id", "mode", "version", "platform") if key in client}
        conn.scopes = frozenset(scope for scope in scopes if scope in KNOWN_SCOPES)
        conn.caps = frozenset(caps)
        granted = [scope for scope in dict.fromkeys(scopes) if scope in KNOWN_SCOPES]
        now = now_ms()
        return {
            "type": "hello-ok",
            "protocol": version,
            "server": {"version": __version__, "connId": conn.conn_id},
            "features": {"methods": self.methods, "events": list(SERVER_EVENTS)},
            "snapshot": {
                "presence": [],
                "health": {"ok": True, "ts": now, "durationMs": 0, "defaultAgentId": DEFAULT_AGENT_ID},
                "stateVersion": {"presence": 0, "health": 0},
                "uptimeMs": int((time.monotonic() - self.started) * 1000),
                "sessionDefaults": {
                    "defaultAgentId": DEFAULT_AGENT_ID,
                    "mainKey": MAIN_SESSION_SUFFIX,
                    "mainSessionKey": MAIN_SESSION_KEY,
                    "scope": SESSION_SCOPE,
                },
                "authMode": "token" if self.settings.gateway_tokens else "none",
            },
            "auth": {"role": ROLE_OPERATOR, "scopes": granted},
            "policy": {
                "maxPayload": MAX_FRAME_BYTES,
                "maxBufferedBytes": self.max_buffered_bytes,
                "tickIntervalMs": self.settings.gateway_tick_interval_ms,
            },
        }

    def _authenticate(self, token: Any) -> None:
        accepted = self.settings.gateway_tokens
        if not accepted:
            return
        if not isinstance(token, str) or not token:
            raise _invalid("unauthorized: gateway token missing", {"code": DETAIL_AUTH_TOKEN_MISSING})
        supplied = token.encode("utf-8", "replace")
        matched = False
        for expected in accepted:  # compare with every token: timing tells nothing
            matched |= hmac.compare_digest(supplied, expected.encode("utf-8"))
        if not matched:
            raise _invalid("unauthorized: gateway token mismatch", {"code": DETAIL_AUTH_TOKEN_MISMATCH})

    async def _serve(self, conn: Connection) -> None:
        while not conn.closing:
            text = await self._receive(conn)
            if text is None:
                return
            if frame_size(text) > MAX_FRAME_BYTES:
                self._fail(conn, "unknown", _invalid(f"frame exceeds {MAX_FRAME_BYTES} bytes"), CLOSE_TOO_BIG)
                return
            try:
                await self._handle_frame(conn, text)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("gateway frame handling failed")
                conn.send(response_error("unknown", GatewayError(UNAVAILABLE, "internal error")))

    async def _handle_frame(self, conn: Connection, text: str | bytes) -> None:
        try:
            frame = decode(text)
        except FrameError as exc:
            conn.send(response_error("unknown", _invalid(str(exc))))
            return
        request_id, problem = screen_request(frame, text)
        if problem is not None:
            conn.send(response_error(request_id, problem))
            return
        method = frame.get("method")
        params = frame.get("params")
        try:
            if not isinstance(method, str) or not method:
                raise _invalid("invalid request frame: method must be a non-empty string")
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise _invalid(f"invalid {method} params: params must be an object")
            payload = await self._dispatch(conn, method, params)
        except GatewayError as error:
            conn.send(response_error(request_id, error))
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("gateway method %s failed", method)
            conn.send(
                response_error(request_id, GatewayError(UNAVAILABLE, f"{method} failed: internal error"))
            )
            return
        if isinstance(payload, Deferred):
            conn.send(response_ok(request_id, payload.accepted))
            task = asyncio.create_task(self._answer_later(conn, request_id, method, payload.final))
            self._finals.add(task)
            task.add_done_callback(self._finals.discard)
            return
        conn.send(response_ok(request_id, payload))

    async def _answer_later(
        self, conn: Connection, request_id: str, method: str, final: Awaitable[dict[str, Any]]
    ) -> None:
        """The second response of a :class:`Deferred` request (nothing when the client left)."""
        try:
            conn.send(response_ok(request_id, await final))
        except GatewayError as error:
            conn.send(response_error(request_id, error))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("gateway method %s failed", method)
            conn.send(
                response_error(request_id, GatewayError(UNAVAILABLE, f"{method} failed: internal error"))
            )

    async def _dispatch(self, conn: Connection, method: str, params: dict[str, Any]) -> Payload | Deferred:
        if method == "connect":
            raise _invalid("invalid request: already connected")
        handler = self._handlers.get(method)
        if handler is None:
            raise _invalid(f"unknown method: {method}")
        scope = METHOD_SCOPES[method]
        if not conn.can(scope):
            raise GatewayError(
                FORBIDDEN,
                f"missing scope: {scope}",
                {"code": DETAIL_MISSING_SCOPE, "missingScope": scope, "requiredScopes": [scope]},
            )
        return await handler(conn, params)

    # -- session keys -----------------------------------------------------------------------------

    async def _agents(self) -> list[AgentInfo]:
        """The configured agents (``main`` first and always present), schema-shaped."""
        try:
            raw = await call_lister(self.list_agents)
        except Exception:
            log.exception("listing agents failed; only main is served")
            raw = []
        agents: dict[str, AgentInfo] = {}
        for item in raw:
            entry = agent_entry(item)
            if entry is not None and entry["id"] not in agents:
                agents[entry["id"]] = entry
        main = agents.pop(DEFAULT_AGENT_ID, {"id": DEFAULT_AGENT_ID, "name": DEFAULT_AGENT_ID})
        return [main, *agents.values()]

    async def _services_for(self, agent_id: str) -> Services:
        if agent_id == DEFAULT_AGENT_ID:
            return self.workspaces.get(None)
        known = {agent["id"] for agent in await self._agents()}
        if agent_id not in known:
            raise _invalid(
                f"unknown agent id: {agent_id}", {"code": DETAIL_UNKNOWN_AGENT_ID, "agentId": agent_id}
            )
        try:
            return await asyncio.to_thread(self.workspaces.get, agent_id)
        except InvalidWorkspace as exc:
            raise _invalid(f"agent {agent_id!r} has no usable workspace: {exc}") from exc

    async def resolve(self, key: str) -> Target:
        """Session key → agent, its services and the transcript id."""
        agent_id, rest = parse_session_key(key)
        services = await self._services_for(agent_id)
        session_id = session_id_for(rest)
        if not _stored_as_named(services.transcripts, session_id):  # else a search of the directory
            if _small_directory(services.transcripts.directory):
                # read on the loop (~0.2 ms per 500 names): on a worker thread, each new key of a
                # burst waited for the busy loop to take the answer back, one frame after another
                session_id = _existing_case(services.transcripts, session_id)
            else:
                session_id = await asyncio.to_thread(_existing_case, services.transcripts, session_id)
        return Target(f"agent:{agent_id}:{rest}", agent_id, session_id, services)

    # -- methods ----------------------------------------------------------------------------------

    async def _chat_send(self, conn: Connection, params: dict[str, Any]) -> ChatSendResult:
        key = param_str(params, "sessionKey", max_length=512)
        idempotency_key = param_str(params, "idempotencyKey")
        message = param_message(params, "chat.send")
        assert key is not None and idempotency_key is not None
        if idempotency_key in self._idempotency:
            self._idempotency.move_to_end(idempotency_key)
            return {"runId": idempotency_key, "status": "ok"}
        await self._start_run(conn, await self.resolve(key), message, idempotency_key)
        return {"runId": idempotency_key, "status": "started"}

    async def _agent(self, conn: Connection, params: dict[str, Any]) -> Deferred | dict[str, Any]:
        """``agent {message, idempotencyKey, sessionKey? | agentId? sessionId?}`` (``openclaw agent``):
        ``{status:"accepted"}`` at once, then the run's result under the same request id."""
        idempotency_key = param_str(params, "idempotencyKey")
        message = param_message(params, "agent")
        timeout = param_int(params, "timeout", minimum=0)
        assert idempotency_key is not None
        key = agent_method.session_key_of(params)
        known = self.runs.get(idempotency_key) or self._ended_runs.get(idempotency_key)
        if known is None and idempotency_key in self._idempotency:
            return {"runId": idempotency_key, "status": "in_flight", "summary": "already started"}
        if known is None:
            known = await self._start_run(conn, await self.resolve(key), message, idempotency_key)
        return Deferred(agent_method.accepted(known), self._agent_outcome(known, timeout))

    async def _agent_outcome(self, gateway_run: GatewayRun, timeout: int | None) -> dict[str, Any]:
        """The ``agent`` request's final response; a run past ``timeout`` seconds (when > 0) is
        aborted and reported as ``timeout``."""
        try:
            await asyncio.wait_for(asyncio.shield(gateway_run.ended.wait()), timeout or None)
        except TimeoutError:
            gateway_run.aborted = True
            gateway_run.wake.set()
            await gateway_run.target.services.sessions.cancel(gateway_run.target.session_id)
            await gateway_run.ended.wait()
        return agent_method.outcome(gateway_run)

    async def _agent_wait(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``agent.wait {runId, timeoutMs?}`` → ``{runId, status: ok|error|timeout, ...}``."""
        run_id = param_str(params, "runId")
        timeout_ms = param_int(params, "timeoutMs", minimum=0)
        assert run_id is not None
        gateway_run = self.runs.get(run_id) or self._ended_runs.get(run_id)
        if gateway_run is None:
            raise _invalid("agent run was not found")
        with contextlib.suppress(TimeoutError):
            limit = (timeout_ms if timeout_ms is not None else agent_method.WAIT_DEFAULT_MS) / 1000
            await asyncio.wait_for(asyncio.shield(gateway_run.ended.wait()), limit)
        return agent_method.wait_result(gateway_run)

    async def _start_run(
        self, conn: Connection, target: Target, message: str, idempotency_key: str
    ) -> GatewayRun:
        """Start a turn in the target session and stream its events to every reader."""
        # Reserved before the first await that starts the run, so a concurrent resend is deduplicated.
        self._remember(idempotency_key, target.key)
        # turns of connections that can answer approvals may pause for them
        context = RunContext.for_edge(can_ask=wire.asks(conn.scopes, conn.caps))
        try:
            run = await target.services.sessions.start_turn(
                target.session_id, message, title=False, context=context
            )
        except BaseException as exc:
            self._idempotency.pop(idempotency_key, None)
            if isinstance(exc, SESSION_ERRORS):
                raise session_refused(exc, target.session_id) from exc
            raise
        gateway_run = GatewayRun(idempotency_key, target, run)
        self.runs[idempotency_key] = gateway_run
        # The pump starts on the next loop iteration, after this ack has been queued: a client
        # always sees the ack before the run's first event.
        task = asyncio.create_task(self._pump(gateway_run), name=f"gateway-run-{idempotency_key}")
        gateway_run.task = task
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        return gateway_run

    def _remember(self, idempotency_key: str, key: str) -> None:
        self._idempotency[idempotency_key] = key
        while len(self._idempotency) > IDEMPOTENCY_MEMORY:
            self._idempotency.popitem(last=False)

    async def _chat_abort(self, conn: Connection, params: dict[str, Any]) -> ChatAbortResult:
        key = param_str(params, "sessionKey")
        run_id = param_str(params, "runId", required=False)
        assert key is not None
        target = await self.resolve(key)
        sessions = target.services.sessions
        active = self._runs_in(target)
        if run_id is not None:
            active = [each for each in active if each.run_id == run_id]
            ids = [run_id] if active else []
        else:
            # A turn started elsewhere (the workbench, /v1) is stopped too and named by its own id.
            running = sessions.runs.get(target.session_id)
            ids = [each.run_id for each in active] or (
                [running.run_id] if running and not running.closed else []
            )
        if not ids:
            if run_id is None and await asyncio.to_thread(sessions.is_waiting, target.session_id):
                # paused by no run of this gateway (e.g. before a restart): drop what it waits for
                return {"ok": True, "aborted": await sessions.cancel(target.session_id), "runIds": []}
            return {"ok": True, "aborted": False, "runIds": []}
        paused = self._abort_runs(active)
        aborted = await sessions.cancel(target.session_id) or paused
        return {"ok": True, "aborted": aborted, "runIds": ids if aborted else []}

    def _runs_in(self, target: Target) -> list[GatewayRun]:
        """This gateway's runs in the target session."""
        return [
            each
            for each in self.runs.values()
            if each.target.services is target.services and each.target.session_id == target.session_id
        ]

    @staticmethod
    def _abort_runs(runs: list[GatewayRun]) -> bool:
        """Mark the runs aborted and wake the paused ones (they end as aborted, their pending
        approvals cancelled); whether any was paused."""
        paused = any(each.pending for each in runs)
        for each in runs:
            each.aborted = True
            each.wake.set()
        return paused

    async def _chat_history(self, conn: Connection, params: dict[str, Any]) -> ChatHistoryResult:
        """``chat.history {sessionKey, limit?, offset?, maxChars?}``: the last ``limit`` messages
        before the newest ``offset`` ones (with ``offset``: ``totalMessages``, ``hasMore`` and
        ``nextOffset`` to page further back); each text cut to ``maxChars``. Transcript messages
        have no ids or cursors: ``cursor`` and ``messageId`` are refused."""
        for unsupported in ("cursor", "messageId"):
            if params.get(unsupported) is not None:
                raise _invalid(f"chat.history: clawlet pages by offset; {unsupported} is not supported")
        limit = param_int(params, "limit", minimum=1, maximum=HISTORY_MAX_LIMIT) or HISTORY_DEFAULT_LIMIT
        offset = param_int(params, "offset", minimum=0)
        max_chars = param_int(params, "maxChars", minimum=1, maximum=HISTORY_MAX_CHARS)
        target = await self._scoped(params, "sessionKey")
        self._expect_session(target, params, "sessionId")
        messages = await asyncio.to_thread(_history, target.services.transcripts, target.session_id)
        end = len(messages) - (offset or 0)
        page = messages[max(0, end - limit) : max(0, end)]
        if max_chars is not None:
            for message in page:
                for part in message["content"]:
                    part["text"] = part["text"][:max_chars]
        result: ChatHistoryResult = {
            "sessionKey": target.key,
            "sessionId": target.session_id,
            "messages": page,
        }
        if offset is not None:
            more = end - limit > 0
            result |= {"offset": offset, "totalMessages": len(messages), "hasMore": more}
            if more:
                result["nextOffset"] = offset + len(page)
        return result

    async def _sessions_list(self, conn: Connection, params: dict[str, Any]) -> SessionsListResult:
        limit = param_int(params, "limit", minimum=1) or SESSIONS_DEFAULT_LIMIT
        offset = param_int(params, "offset", minimum=0) or 0
        only_agent = param_str(params, "agentId", required=False)
        search = params.get("search")
        search = search.strip().lower() if isinstance(search, str) else ""
        rows: list[SessionRow] = []
        for agent in await self._agents():
            agent_id = agent["id"]
            if only_agent is not None and agent_id != only_agent.strip().lower():
                continue
            services = await self._existing_services(agent_id)
            if services is None:
                continue
            for item in await asyncio.to_thread(services.transcripts.list_sessions):
                row = self._session_row(agent_id, services, item)
                haystack = f"{row['key']} {item['title']}".lower()
                if not search or search in haystack:
                    rows.append(row)
        rows.sort(key=lambda row: row["updatedAt"] or 0, reverse=True)
        return {"ts": now_ms(), "count": len(rows), "sessions": rows[offset : offset + limit]}

    async def _existing_services(self, agent_id: str) -> Services | None:
        """The agent's services if its workspace exists (listing never creates workspaces)."""
        if agent_id == DEFAULT_AGENT_ID:
            return self.workspaces.get(None)
        root = self.workspaces.default.settings.workspaces_root / agent_id
        if not root.is_dir():
            return None
        try:
            return await asyncio.to_thread(self.workspaces.get, agent_id)
        except InvalidWorkspace:
            return None

    def _session_row(self, agent_id: str, services: Services, item: dict[str, Any]) -> SessionRow:
        session_id = str(item["id"])
        title = str(item.get("title") or "")
        row: SessionRow = {
            "key": f"agent:{agent_id}:{session_id}".lower(),
            "kind": "direct",
            "sessionId": session_id,
            "agentId": agent_id,
            "displayName": title or session_id,
            "updatedAt": int(float(item["updated_at"]) * 1000),
            "isMain": session_id.lower() == MAIN_SESSION_SUFFIX,
            "chatType": "direct",
        }
        if title:
            row["label"] = title
            row["derivedTitle"] = title
        if services.sessions.is_running(session_id):
            row["status"] = "running"
        return row

    async def _agents_list(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "defaultId": DEFAULT_AGENT_ID,
            "mainKey": MAIN_SESSION_SUFFIX,
            "scope": SESSION_SCOPE,
            "agents": await self._agents(),
        }

    async def _models_list(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        try:
            raw = await call_lister(self.list_models)
        except Exception:
            log.exception("listing models failed")
            raw = []
        models = [entry for entry in (model_entry(item) for item in raw) if entry is not None]
        return {"models": models}

    async def _health(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        began = time.monotonic()
        services = self.workspaces.get(None)
        sessions = await asyncio.to_thread(services.transcripts.list_sessions)
        now = now_ms()
        recent = []
        for item in sessions[:5]:
            updated = int(float(item["updated_at"]) * 1000)
            recent.append(
                {
                    "key": f"agent:{DEFAULT_AGENT_ID}:{item['id']}".lower(),
                    "updatedAt": updated,
                    "age": max(0, now - updated),
                }
            )
        return {
            "ok": True,
            "ts": now,
            "durationMs": int((time.monotonic() - began) * 1000),
            "defaultAgentId": DEFAULT_AGENT_ID,
            "sessions": {
                "path": str(services.transcripts.directory),
                "count": len(sessions),
                "recent": recent,
            },
        }

    async def _status(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``status``: the health checks of ``/health``, the sessions and this gateway's state."""
        from clawlet.runtime.health_checks import (
            check_llm,
            check_mcp,
            check_sandbox,
            check_workspace,
            overall_status,
        )
        from clawlet.tools.sandbox import sandbox_status

        settings = self.workspaces.default.settings
        root = settings.paths.root
        llm, workspace, mcp, sandbox = await asyncio.gather(
            check_llm(settings),
            asyncio.to_thread(check_workspace, root),
            asyncio.to_thread(check_mcp, root),
            asyncio.to_thread(sandbox_status, settings.sandbox),
        )
        checks = {"llm": llm, "workspace": workspace, "mcp": mcp, "sandbox": check_sandbox(sandbox)}
        health = await self._health(conn, {})
        return {
            "ts": now_ms(),
            "status": overall_status(checks),
            "version": __version__,
            "uptimeMs": operator.uptime_ms(self.started),
            "checks": checks,
            "sessions": health["sessions"],
            "connections": len([each for each in self.connections if each.connected]),
            "activeRuns": len(self.runs),
            "defaultAgentId": DEFAULT_AGENT_ID,
            "model": self.model_name,
        }

    async def _system_presence(self, conn: Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
        """``system-presence``: one entry per connected client."""
        return [
            operator.presence_entry(each.client, each.scopes, each.remote, each.since_ms, each.conn_id)
            for each in list(self.connections)
            if each.connected
        ]

    async def _logs_tail(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``logs.tail {cursor?, limit?, maxBytes?}``: the server's log kept in memory."""
        cursor = param_int(params, "cursor", minimum=0)
        limit = param_int(params, "limit", minimum=1, maximum=operator.LOGS_MAX_LIMIT)
        max_bytes = param_int(params, "maxBytes", minimum=1, maximum=operator.LOGS_MAX_BYTES)
        page = LOG_RING.page(
            cursor, limit or operator.LOGS_DEFAULT_LIMIT, max_bytes or operator.LOGS_DEFAULT_BYTES
        )
        result: dict[str, Any] = {
            "file": f"clawlet log (in memory, last {LOG_RING.capacity} lines)",
            "cursor": page.cursor,
            "size": page.size,
            "lines": page.lines,
            "truncated": page.truncated,
            "reset": page.reset,
        }
        if page.skipped_bytes:
            result["skippedBytes"] = page.skipped_bytes
        return result

    async def _usage_cost(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        return self.usage.cost(params)

    async def _diagnostics_stability(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        return self.stability.snapshot(params)

    async def _config_get(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        return operator.config_view(self.workspaces.default.settings)

    async def _sessions_subscribe(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.subscribe``: ``sessions.changed`` events from now on (every reader already
        receives every run's ``chat`` events)."""
        conn.session_events = True
        return {"subscribed": True}

    async def _scoped(self, params: dict[str, Any], name: str = "key") -> Target:
        """The target of a session method's ``key`` (with ``agentId`` for a key that names none)."""
        key = param_str(params, name, max_length=512)
        agent_id = param_str(params, "agentId", required=False, max_length=128)
        assert key is not None
        if agent_id is not None and not key.strip().lower().startswith("agent:"):
            key = f"agent:{agent_id.strip().lower()}:{key}"
        return await self.resolve(key)

    async def _entry(self, target: Target, *, create: bool = False, title: str = "") -> SessionRow | None:
        """The session's ``sessions.list`` row; None without a transcript (unless ``create``,
        which makes an empty one titled ``title``)."""
        store = target.services.transcripts
        try:
            if create:
                _, data = await asyncio.to_thread(store.create, target.session_id, title)
            else:
                data = await asyncio.to_thread(store.load, target.session_id)
        except SessionNotFound:
            return None
        except SessionCorrupt as exc:
            raise session_refused(exc, target.session_id) from exc
        item = {"id": target.session_id, "title": data["title"], "updated_at": data["updated_at"]}
        return self._session_row(target.agent_id, target.services, item)

    def _mutated(self, target: Target, entry: SessionRow | None, reason: str) -> dict[str, Any]:
        """A mutation's result (``{ok, key, entry, resolved}``), announced as ``sessions.changed``."""
        changed = session_admin.changed_event(target.key, target.agent_id, reason, target.session_id)
        listeners = [conn for conn in self._readers() if conn.session_events]
        self._fan_out(listeners, session_admin.EVENT_SESSIONS_CHANGED, changed)
        result: dict[str, Any] = {"ok": True, "key": target.key}
        if entry is not None:
            result["entry"] = entry
            result["resolved"] = session_admin.resolved(self.settings)
        return result

    async def _sessions_describe(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.describe {key}`` → ``{session}``: its ``sessions.list`` row, or null when the
        session has no transcript yet."""
        return {"session": await self._entry(await self._scoped(params))}

    async def _sessions_resolve(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.resolve {key | sessionId | label}`` → ``{ok, key, agentId, displayName}``, or
        ``{ok: false, candidates}`` when a label names several sessions."""
        session_admin.refuse_unsupported("sessions.resolve", params, session_admin.RESOLVE_FIELDS)
        named = [name for name in ("key", "sessionId", "label") if params.get(name) is not None]
        if len(named) != 1:
            raise _invalid("invalid sessions.resolve params: give exactly one of key, sessionId, label")
        if named == ["key"]:
            target = await self._scoped(params)
            entry = await self._entry(target)
            if entry is None and params.get("allowMissing") is not True:
                raise _invalid(f"No session found: {target.key}")
            rows: list[Mapping[str, Any]] = [
                entry or {"key": target.key, "agentId": target.agent_id, "displayName": target.session_id}
            ]
        else:
            wanted = str(params[named[0]]).strip().lower()
            field_name = "sessionId" if named == ["sessionId"] else "label"
            listed = await self._sessions_list(conn, {"agentId": params.get("agentId"), "limit": sys.maxsize})
            rows = [row for row in listed["sessions"] if str(row.get(field_name, "")).lower() == wanted]
            if not rows:
                raise _invalid(f"No session found with {field_name}: {params[named[0]]}")
        found = [
            {"key": row["key"], "agentId": row["agentId"], "displayName": row["displayName"]} for row in rows
        ]
        if len(found) > 1:
            return {"ok": False, "candidates": found[:10]}
        return {"ok": True, **found[0]}

    async def _sessions_create(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.create {key?, agentId?, label?, message?}``: a new empty transcript (an existing
        one is adopted as it is); with ``message`` its first turn starts at once."""
        session_admin.refuse_unsupported("sessions.create", params, session_admin.CREATE_FIELDS)
        session_admin.check_model("sessions.create", self.settings, params.get("model"))
        title = session_admin.title_param("sessions.create", params, "label") or (
            session_admin.title_param("sessions.create", params, "displayName") or ""
        )
        message = param_message(params, "sessions.create") if "message" in params else None
        run_id = param_str(params, "idempotencyKey", required=False) or uuid.uuid4().hex
        target = await self._scoped({"agentId": DEFAULT_AGENT_ID, "key": f"s-{uuid.uuid4().hex}", **params})
        entry = await self._entry(target, create=True, title=title)
        result = {
            "sessionId": target.session_id,
            **self._mutated(target, entry, "create"),
            "runStarted": False,
        }
        if message is not None:
            await self._start_run(conn, target, message, run_id)
            result |= {"runStarted": True, "runId": run_id}
        return result

    async def _sessions_patch(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.patch {key, label?, model?}``: the label is the session's title (null clears
        it); the model can only be the server's own."""
        session_admin.refuse_unsupported("sessions.patch", params, session_admin.PATCH_FIELDS)
        session_admin.check_model("sessions.patch", self.settings, params.get("model"))
        label = session_admin.title_param("sessions.patch", params, "label")
        target = await self._scoped(params)
        self._expect_session(target, params)
        store = target.services.transcripts
        await self._entry(target, create=True)
        if label is not None:
            await asyncio.to_thread(store.rename, target.session_id, label)
        return self._mutated(target, await self._entry(target), "patch")

    def _expect_session(
        self, target: Target, params: dict[str, Any], name: str = "expectedSessionId"
    ) -> None:
        """A request naming the session id it expects is refused when the key maps elsewhere."""
        expected = param_str(params, name, required=False)
        if expected is not None and expected != target.session_id:
            raise _invalid(f"session {target.key} changed: it is {target.session_id}, not {expected}")

    async def _sessions_reset(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.reset {key, reason?}``: its turn stopped, then an empty transcript under the
        same key and title (the model sees none of what was said before)."""
        reason = params.get("reason", "reset")
        if reason not in ("new", "reset"):
            raise _invalid('invalid sessions.reset params: reason must be "new" or "reset"')
        target = await self._scoped(params)
        try:
            entry = await self._entry(target)
            title = "" if entry is None else entry.get("label", "")
        except GatewayError:  # a corrupt transcript: replaced by an empty one
            title = ""
        await self._drop_session(target)
        return self._mutated(target, await self._entry(target, create=True, title=title), reason)

    async def _drop_session(self, target: Target) -> bool:
        """Stop the session's turn, drop its runtime and transcript; False if it had none."""
        self._abort_runs(self._runs_in(target))
        try:
            await target.services.sessions.delete(target.session_id)
        except SessionNotFound:
            return False
        except SessionBusy as exc:
            raise GatewayError(
                UNAVAILABLE, f"session {target.key} is busy (compressing or starting); retry", retryable=True
            ) from exc
        return True

    async def _sessions_delete(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.delete {key}``: its turn stopped, its transcript deleted (clawlet keeps no
        archive: ``deleteTranscript: false`` is refused)."""
        session_admin.refuse_unsupported("sessions.delete", params, session_admin.DELETE_FIELDS)
        if params.get("deleteTranscript") is False:
            raise _invalid(
                "sessions.delete: clawlet keeps no archived transcripts; deleteTranscript must be true"
            )
        target = await self._scoped(params)
        self._expect_session(target, params)
        deleted = await self._drop_session(target)
        return {**self._mutated(target, None, "delete"), "deleted": deleted, "archived": []}

    async def _sessions_compact(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``sessions.compact {key}``: the workbench's compression (the first half summarised by
        the model and archived) → ``{ok, key, compacted, reason?}``; clawlet has no line trim
        (``maxLines`` is refused)."""
        if params.get("maxLines") is not None:
            raise _invalid("sessions.compact: clawlet summarises the first half; maxLines is not supported")
        target = await self._scoped(params)
        services = target.services
        try:
            done = await compression.compress_session(
                services.settings, services.transcripts, services.sessions, target.session_id
            )
        except SessionNotFound:
            return {"ok": True, "key": target.key, "compacted": False, "reason": "no transcript"}
        except compression.NotEnoughMessages as exc:
            return {"ok": True, "key": target.key, "compacted": False, "reason": str(exc)}
        except (SessionBusy, CompressionConflict) as exc:
            raise GatewayError(
                UNAVAILABLE, f"session {target.key} is answering or changed; compact it later", retryable=True
            ) from exc
        except compression.SummaryFailed as exc:
            raise GatewayError(UNAVAILABLE, str(exc)) from exc
        except SessionCorrupt as exc:
            raise session_refused(exc, target.session_id) from exc
        return self._mutated(target, None, "compact") | {
            "compacted": True,
            "archivedCount": done.archived_count,
            "remainingCount": done.remaining_count,
        }

    async def _commands_list(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``commands.list``: clawlet offers no slash commands to gateway clients."""
        return {"commands": []}

    async def _question_list(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``question.list``: the agent's questions still waiting for an answer."""
        pending = [
            each for each in self.approvals.values() if each.kind == wire.KIND_QUESTION and not each.settled
        ]
        return {"questions": [each.question_record() for each in pending]}

    async def _plugin_approval_list(self, conn: Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
        """``plugin.approval.list``: pending tool approvals as ``plugin.approval.requested`` has them."""
        pending = [
            each for each in self.approvals.values() if each.kind == wire.KIND_PLUGIN and not each.settled
        ]
        return [
            payload
            for each in pending
            for event, payload in each.requested_events()
            if event == wire.EVENT_PLUGIN_REQUESTED
        ]

    # -- run events -------------------------------------------------------------------------------

    def _readers(self) -> list[Connection]:
        return [conn for conn in list(self.connections) if conn.connected and conn.can(SCOPE_READ)]

    def _fan_out(self, conns: list[Connection], event: str, payload: Mapping[str, Any]) -> None:
        """Queue one event for ``conns``, encoded once (each connection adds its own ``seq``)."""
        if not conns:
            return
        try:
            encoded = EncodedEvent.of(event, payload)
        except (TypeError, ValueError):
            log.exception("gateway %s event could not be encoded", event)
            return
        for conn in conns:
            try:
                conn.send_encoded(encoded)
            except Exception:
                log.exception("gateway %s event could not be queued", event)

    def _broadcast_chat(self, gateway_run: GatewayRun, payload: ChatState) -> None:
        gateway_run.chat_seq += 1
        full: ChatEvent = {**gateway_run.base(), "seq": gateway_run.chat_seq, **payload}
        legacy = {name: value for name, value in full.items() if name not in ("deltaText", "replace")}
        readers = self._readers()
        self._fan_out([conn for conn in readers if conn.protocol >= 4], EVENT_CHAT, full)
        self._fan_out([conn for conn in readers if conn.protocol < 4], EVENT_CHAT, legacy)

    def _broadcast_tool(self, gateway_run: GatewayRun, data: ToolStartData | ToolResultData) -> None:
        gateway_run.agent_seq += 1
        payload: AgentEvent = {
            "runId": gateway_run.run_id,
            "seq": gateway_run.agent_seq,
            "stream": "tool",
            "ts": now_ms(),
            "data": data,
        }
        tool_readers = [conn for conn in self._readers() if CAP_TOOL_EVENTS in conn.caps]
        self._fan_out(tool_readers, EVENT_AGENT, payload)

    def _flush_delta(self, gateway_run: GatewayRun) -> None:
        text = gateway_run.text
        sent = gateway_run.sent_text
        if text == sent:
            return
        payload: ChatState = {
            "state": "delta",
            "message": assistant_message(text, gateway_run.started_ms),
        }
        if text.startswith(sent):
            payload["deltaText"] = text[len(sent) :]
        else:
            payload["deltaText"] = text
            payload["replace"] = True
        gateway_run.sent_text = text
        self._broadcast_chat(gateway_run, payload)

    async def _pump(self, gateway_run: GatewayRun) -> None:
        """Translate a run's clawlet events into ``chat`` and ``agent`` events. A run that pauses
        for approvals waits for the decisions and its continuation streams on, same ``runId``."""
        try:
            while True:
                waiting = await self._stream(gateway_run)
                if waiting is None:
                    break
                continuation = await self._await_decisions(gateway_run, waiting)
                if continuation is None:
                    break
                gateway_run.run = continuation
                gateway_run.resumed = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("gateway run %s: streaming its events failed", gateway_run.run_id)
            if not gateway_run.finished:
                self._broadcast_terminal(
                    gateway_run,
                    {
                        "state": "error",
                        "errorMessage": f"{type(exc).__name__}: {exc}",
                        "errorKind": "unknown",
                    },
                )
        finally:
            for approval_id in list(gateway_run.pending):
                self._drop_pending(gateway_run, approval_id)
            if self.runs.get(gateway_run.run_id) is gateway_run:
                del self.runs[gateway_run.run_id]
            self._ended_runs[gateway_run.run_id] = gateway_run
            while len(self._ended_runs) > IDEMPOTENCY_MEMORY:
                self._ended_runs.popitem(last=False)
            gateway_run.ended.set()

    async def _stream(self, gateway_run: GatewayRun) -> RunWaiting | None:
        """Stream one clawlet run; its ``RunWaiting`` if it paused, else None (terminal event sent)."""
        stream = GatewayStream(self, gateway_run)
        # the chat events carry the reply so far (RunText), not each chunk: piled-up chunks come as one
        await stream.consume(gateway_run.run.events(keepalive=self.delta_interval, merge_text=True))
        return stream.end if isinstance(stream.end, RunWaiting) else None

    def _broadcast_terminal(self, gateway_run: GatewayRun, payload: ChatState) -> None:
        """The run's last ``chat`` event; what it still waited for is cancelled first."""
        for approval in list(gateway_run.pending.values()):
            self._settle(approval, wire.CANCELLED)
        gateway_run.finished = True
        gateway_run.terminal = payload
        gateway_run.ended_ms = now_ms()
        if gateway_run.usage:
            self.usage.add(self.model_name, gateway_run.usage["input"], gateway_run.usage["output"])
        self._broadcast_chat(gateway_run, payload)

    # -- approvals --------------------------------------------------------------------------------

    async def _await_decisions(self, gateway_run: GatewayRun, waiting: RunWaiting) -> Run | None:
        """Announce what the paused run waits for and wait until one item is decided; the
        continuation run, or None once the gateway run is over (its terminal event sent)."""
        await gateway_run.run.wait()  # the paused run is over: the session can be resumed now
        target = gateway_run.target
        sessions = target.services.sessions
        current = {item.approval_id for item in waiting.pending}
        for approval_id in [known for known in gateway_run.pending if known not in current]:
            await self._settle_elsewhere(gateway_run, gateway_run.pending[approval_id])
        for item in waiting.pending:
            if item.approval_id not in gateway_run.pending:
                self._announce(gateway_run, item)
        while True:
            gateway_run.wake.clear()
            if gateway_run.aborted:
                if await asyncio.to_thread(sessions.is_waiting, target.session_id):
                    await sessions.cancel(target.session_id)
                self._broadcast_terminal(
                    gateway_run,
                    {
                        "state": "aborted",
                        "stopReason": "rpc",
                        "message": assistant_message(gateway_run.text, gateway_run.started_ms),
                    },
                )
                return None
            self._settle_unanswerable(gateway_run)
            decided = next((each for each in gateway_run.pending.values() if each.decision is not None), None)
            if decided is not None and decided.decision is not None:
                try:
                    run = await sessions.resume(target.session_id, decided.id, decided.decision)
                except SessionBusy:
                    pass  # continued from elsewhere (the workbench): followed below
                except (ApprovalDecided, ApprovalNotFound):
                    self._drop_pending(gateway_run, decided.id)  # decided elsewhere meanwhile
                    continue
                except (InvalidDecision, RuntimeFailure) as exc:
                    log.warning("gateway run %s cannot continue: %s", gateway_run.run_id, exc)
                    with swallowed(log, "gateway run %s: cancelling it failed", gateway_run.run_id):
                        await sessions.cancel(target.session_id)  # told it is over: it waits no more
                    self._broadcast_terminal(
                        gateway_run,
                        {
                            "state": "error",
                            "errorMessage": f"the run cannot continue: {exc}",
                            "errorKind": "unknown",
                        },
                    )
                    return None
                else:
                    self._drop_pending(gateway_run, decided.id)
                    return run
            other = sessions.runs.get(target.session_id)
            if other is not None and other is not gateway_run.run and not other.closed:
                return other  # someone decided in the workbench: stream that continuation here
            if sessions.is_busy(target.session_id):
                pass  # a continuation is starting elsewhere: follow it once it runs (polled below)
            elif not await asyncio.to_thread(sessions.is_waiting, target.session_id):
                # decided or cancelled elsewhere and already over: end with what this run knows
                for approval in list(gateway_run.pending.values()):
                    await self._settle_elsewhere(gateway_run, approval)
                self._broadcast_terminal(
                    gateway_run,
                    {
                        "state": "final",
                        "message": assistant_message(gateway_run.text, gateway_run.started_ms),
                        "stopReason": "stop",
                    },
                )
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gateway_run.wake.wait(), self.approval_poll_interval)

    def _announce(self, gateway_run: GatewayRun, item: Pending) -> None:
        now = now_ms()
        approval = GatewayApproval(
            item,
            gateway_run.target.key,
            gateway_run.target.agent_id,
            gateway_run.run_id,
            created_ms=now,
            expires_ms=now + int(self.approval_timeout * 1000),
        )
        gateway_run.pending[approval.id] = approval
        self.approvals[approval.id] = approval
        self.approvals.move_to_end(approval.id)
        if not self._answerers(approval.kind):
            log.info(
                "gateway run %s: nobody connected can answer %s approval %s; denied",
                gateway_run.run_id,
                approval.kind,
                approval.id,
            )
            self._settle(approval, wire.NO_ROUTE)
            return
        for event, payload in approval.requested_events():
            self._broadcast_approval(approval.kind, event, payload)

    def _settle_unanswerable(self, gateway_run: GatewayRun) -> None:
        """Deny what nobody answered in time or nobody connected can answer any more."""
        now = time.monotonic()
        for approval in list(gateway_run.pending.values()):
            if approval.settled:
                continue
            if now_ms() >= approval.expires_ms:
                self._settle(approval, wire.EXPIRED)
            elif self._answerers(approval.kind):
                approval.lonely_since = None
            elif approval.lonely_since is None:
                approval.lonely_since = now
            elif now - approval.lonely_since >= self.approval_orphan_grace:
                self._settle(approval, wire.NO_ROUTE)

    def _settle(
        self,
        approval: GatewayApproval,
        outcome: tuple[str, str],
        decision: Decision | None = None,
        answers: dict[str, Any] | None = None,
    ) -> None:
        """Record an item's outcome, tell the clients, and wake its run to apply the decision."""
        if approval.settled:
            return
        approval.outcome = outcome
        approval.decision = decision or wire.settle_decision(approval, outcome)
        approval.answers = answers
        approval.resolved_ms = now_ms()
        for event, payload in approval.resolved_events():
            self._broadcast_approval(approval.kind, event, payload)
        gateway_run = self.runs.get(approval.run_id)
        if gateway_run is not None:
            gateway_run.wake.set()

    async def _settle_elsewhere(self, gateway_run: GatewayRun, approval: GatewayApproval) -> None:
        """An item decided (or cancelled) outside this gateway: tell the clients how it ended."""
        if not approval.settled:
            sessions = gateway_run.target.services.sessions
            record = await asyncio.to_thread(sessions.approvals.load, gateway_run.target.session_id)
            decided = {str(item.get("approval_id")): str(item.get("decision")) for item in record.decided}
            outcome = {
                "approve": wire.ALLOWED,
                "edit": wire.ALLOWED,
                "answer": wire.ANSWERED,
                "reject": wire.DENIED,
            }.get(decided.get(approval.id, ""), wire.CANCELLED)
            self._settle(approval, outcome)
        self._drop_pending(gateway_run, approval.id)

    def _drop_pending(self, gateway_run: GatewayRun, approval_id: str) -> None:
        """The run waits for this item no more; a settled one is still answered for a while."""
        approval = gateway_run.pending.pop(approval_id, None)
        if approval is not None and not approval.settled:
            self.approvals.pop(approval_id, None)
        settled = [key for key, each in self.approvals.items() if each.settled]
        for key in settled[: max(0, len(settled) - SETTLED_APPROVALS_MEMORY)]:
            del self.approvals[key]

    def _answerers(self, kind: wire.Kind) -> list[Connection]:
        return [conn for conn in list(self.connections) if conn.receives(kind)]

    def _broadcast_approval(self, kind: wire.Kind, event: str, payload: dict[str, Any]) -> None:
        self._fan_out(self._answerers(kind), event, payload)

    def _pending_approval(self, approval_id: str, kind: wire.Kind | None = None) -> GatewayApproval:
        approval = self.approvals.get(approval_id)
        if approval is None or (kind is not None and approval.kind != kind):
            raise GatewayError(APPROVAL_NOT_FOUND, f"unknown or expired approval id: {approval_id}")
        return approval

    async def _approval_resolve(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``approval.resolve {id, kind, decision}`` → ``{applied, approval}`` (the first answer wins;
        later ones get ``applied:false`` and the recorded outcome)."""
        approval_id = param_str(params, "id")
        kind = param_str(params, "kind")
        value = param_str(params, "decision")
        assert approval_id is not None and kind is not None and value is not None
        if kind not in (wire.KIND_EXEC, wire.KIND_PLUGIN):
            raise _invalid(f"invalid approval.resolve params: kind {kind!r} is not one clawlet asks")
        decision = self._decision(value)
        approval = self._pending_approval(
            approval_id, wire.KIND_EXEC if kind == wire.KIND_EXEC else wire.KIND_PLUGIN
        )
        applied = not approval.settled
        self._settle(approval, wire.ALLOWED if decision.type == "approve" else wire.DENIED, decision)
        return {"applied": applied, "approval": approval.snapshot()}

    async def _approval_get(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        approval_id = param_str(params, "id")
        assert approval_id is not None
        approval = self._pending_approval(approval_id)
        if approval.kind == wire.KIND_QUESTION:
            raise GatewayError(APPROVAL_NOT_FOUND, f"{approval_id} is a question, not an approval")
        return {"approval": approval.snapshot()}

    async def _classic_resolve(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``exec.approval.resolve`` / ``plugin.approval.resolve {id, decision}`` → ``{ok: true}``."""
        approval_id = param_str(params, "id")
        value = param_str(params, "decision")
        assert approval_id is not None and value is not None
        decision = self._decision(value)
        approval = self._pending_approval(approval_id)
        if approval.kind == wire.KIND_QUESTION or approval.settled:
            raise GatewayError(APPROVAL_NOT_FOUND, f"unknown or resolved approval id: {approval_id}")
        self._settle(approval, wire.ALLOWED if decision.type == "approve" else wire.DENIED, decision)
        return {"ok": True}

    @staticmethod
    def _decision(value: str) -> Decision:
        try:
            return wire.approval_decision(value)
        except ValueError as exc:
            raise _invalid(f"invalid params: {exc}") from exc

    async def _question_resolve(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """``question.resolve {id, answers}`` (or ``{id, cancel:true}``) → ``QuestionResolveResult``."""
        approval_id = param_str(params, "id")
        assert approval_id is not None
        approval = self._pending_approval(approval_id, wire.KIND_QUESTION)
        if params.get("cancel") is True:
            self._settle(approval, wire.DENIED, Decision("reject"))
        else:
            answers = params.get("answers")
            text = wire.answer_text(answers)
            if text is None:
                raise _invalid("invalid question.resolve params: answers must hold a non-empty answer")
            assert isinstance(answers, dict)
            self._settle(approval, wire.ANSWERED, Decision("answer", message=text), answers)
        return approval.question_result()

    def _terminal_payload(
        self, gateway_run: GatewayRun, event: RunFinished | RunCancelled | RunFailed
    ) -> ChatState:
        # a continuation's own content is only what it added: the gateway run's text spans both
        content = gateway_run.text if gateway_run.resumed else None
        if isinstance(event, RunFinished):
            payload: ChatState = {
                "state": "final",
                "message": assistant_message(
                    content or event.content or gateway_run.text, gateway_run.started_ms
                ),
                "stopReason": "stop",
            }
            if gateway_run.usage:
                payload["usage"] = gateway_run.usage.copy()
            return payload
        if isinstance(event, RunCancelled):
            return {
                "state": "aborted",
                "stopReason": "rpc",
                "message": assistant_message(
                    content or event.content or gateway_run.text, gateway_run.started_ms
                ),
            }
        payload = {"state": "error", "errorMessage": event.error, "errorKind": "unknown"}
        if gateway_run.text:
            payload["message"] = assistant_message(gateway_run.text, gateway_run.started_ms)
        return payload


# -- transcripts -----------------------------------------------------------------------------------


def _stored_as_named(store: TranscriptStore, session_id: str) -> bool:
    """Whether the transcript is stored under exactly this id (one ``stat``, on the event loop): a
    key of an existing session needs no search for another spelling."""
    try:
        return store.exists(session_id)
    except (OSError, InvalidSessionId):
        return False


SMALL_DIRECTORY_BYTES = 32 * 1024
"""A sessions directory up to this size (ext4: ~1,000 transcripts' names) is searched on the event
loop, a larger one on a worker thread."""


def _small_directory(directory: Path) -> bool:
    """Whether ``directory``'s listing is small enough to read on the event loop (one ``stat``)."""
    try:
        return os.stat(directory).st_size <= SMALL_DIRECTORY_BYTES
    except OSError:
        return True  # none yet: nothing to read


def _existing_case(store: TranscriptStore, session_id: str) -> str:
    """Session keys are lower-cased; find a transcript stored with capitals (``MyChat``) anyway.
    A new key's search reads the names of the directory's entries, no more (no ``Path`` per
    entry: a home with thousands of sessions would pay a millisecond per thousand on every new
    ``chat.send``)."""
    try:
        if store.exists(session_id):
            return session_id
        wanted = session_id.lower()
        with os.scandir(store.directory) as entries:
            for entry in entries:
                stem, dot_json, rest = entry.name.rpartition(".json")
                if dot_json and not rest and stem.lower() == wanted:
                    return stem
    except (OSError, InvalidSessionId):
        pass
    return session_id


def _history(store: TranscriptStore, session_id: str) -> list[ChatMessage]:
    """The visible conversation: user and assistant text, consecutive assistant segments joined
    with a blank line as the ``final`` event joined them. Transcripts keep no time per message, so
    timestamps run from the session's creation to its last update."""
    try:
        data = store.load(session_id)
    except SessionNotFound:
        return []
    except SessionCorrupt as exc:
        raise session_refused(exc, session_id) from exc
    merged: list[StoredMessage] = []
    for message in data["messages"]:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        content = str(message.get("content") or "")
        if merged and role == "assistant" and merged[-1]["role"] == "assistant":
            merged[-1]["content"] = "\n\n".join(part for part in (merged[-1]["content"], content) if part)
        else:
            merged.append({"role": str(role), "content": content})
    created = int(data["created_at"] * 1000)
    updated = max(created, int(data["updated_at"] * 1000))
    return [
        {
            "role": message["role"],
            "content": [{"type": "text", "text": message["content"]}],
            "timestamp": min(created + index, updated) if index < len(merged) - 1 else updated,
        }
        for index, message in enumerate(merged)
        if message["content"] or message["role"] == "user"
    ]


class GatewayStream(EventStream[None]):
    """One clawlet run as the gateway's ``chat`` events (the reply's text, flushed at most every
    ``delta_interval`` and whenever the run is silent that long) and ``agent`` tool events; the run's
    end is the terminal ``chat`` event, or (``RunWaiting``) left to the approvals that follow."""

    stop_at_end = True

    def __init__(self, server: GatewayServer, gateway_run: GatewayRun) -> None:
        super().__init__(gateway_run.answer)
        self.server = server
        self.gateway_run = gateway_run
        self.last_flush = 0.0

    def _flush(self) -> tuple[()]:
        self.server._flush_delta(self.gateway_run)
        return ()

    def _end(self, event: RunFinished | RunCancelled | RunFailed) -> tuple[()]:
        self._flush()
        self.server._broadcast_terminal(
            self.gateway_run, self.server._terminal_payload(self.gateway_run, event)
        )
        return ()

    def on_keepalive(self) -> Iterable[None]:
        return self._flush()

    def on_text(self, event: TextDelta) -> Iterable[None]:
        if time.monotonic() - self.last_flush >= self.server.delta_interval:
            self._flush()
            self.last_flush = time.monotonic()
        return ()

    def on_new_segment(self, event: NewSegment) -> Iterable[None]:
        return self._flush()

    def on_tool_start(self, event: ToolStart) -> Iterable[None]:
        self._flush()
        data: ToolStartData = {
            "phase": "start",
            "name": event.tool,
            "toolCallId": event.call_id,
            "args": tool_args(event.input),
        }
        self.server._broadcast_tool(self.gateway_run, data)
        return ()

    def on_tool_end(self, event: ToolEnd) -> Iterable[None]:
        data: ToolResultData = {
            "phase": "result",
            "name": event.tool,
            "toolCallId": event.call_id,
            # OpenClaw's shape for a tool result
            "result": {"content": [{"type": "text", "text": event.output}]},
            "isError": event.is_error,
        }
        self.server._broadcast_tool(self.gateway_run, data)
        return ()

    def on_usage(self, event: Usage) -> Iterable[None]:
        usage = self.gateway_run.usage or {"input": 0, "output": 0, "totalTokens": 0}
        usage["input"] += event.input_tokens
        usage["output"] += event.output_tokens
        usage["totalTokens"] = usage["input"] + usage["output"]
        self.gateway_run.usage = usage
        return ()

    def on_waiting(self, event: RunWaiting) -> Iterable[None]:
        return self._flush()

    def on_finished(self, event: RunFinished) -> Iterable[None]:
        return self._end(event)

    def on_cancelled(self, event: RunCancelled) -> Iterable[None]:
        return self._end(event)

    def on_failed(self, event: RunFailed) -> Iterable[None]:
        return self._end(event)

    def on_run_started(self, event: RunStarted) -> Iterable[None]:
        return ()

    def on_retrieval(self, event: Retrieval) -> Iterable[None]:
        return ()

    def on_thinking(self, event: Thinking) -> Iterable[None]:
        return ()

    def on_approval(self, event: ApprovalRequested) -> Iterable[None]:
        return ()

    def on_question(self, event: QuestionAsked) -> Iterable[None]:
        return ()

    def on_title(self, event: Title) -> Iterable[None]:
        return ()

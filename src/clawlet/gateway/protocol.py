"""The OpenClaw Gateway WebSocket protocol: constants, frames, errors and session keys.

Shared by clawlet's gateway client (``gateway.client``, driving a real OpenClaw gateway) and
clawlet's gateway server (``gateway.server``, letting OpenClaw clients drive clawlet's agents).

Three JSON text frame types (see ``shared/design/PROTOCOLS.md`` §1)::

    req   {type:"req",   id, method, params?}
    res   {type:"res",   id, ok, payload?, error?: {code, message, details?, retryable?, retryAfterMs?}}
    event {type:"event", event, payload?, seq?}

What we send is built strictly (it validates against ``@openclaw/gateway-protocol``'s JSON Schema);
what we receive is parsed leniently, because real servers add fields.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

PROTOCOL_VERSION = 4
"""The newest protocol version clawlet speaks (current OpenClaw's)."""
MIN_PROTOCOL_VERSION = 3
"""The oldest version clawlet speaks (the inbox seed's)."""

MAX_PRECONNECT_FRAME_BYTES = 64 * 1024
"""Frames before a successful ``connect`` are refused past this size."""
MAX_FRAME_BYTES = 8 * 1024 * 1024
"""``policy.maxPayload`` clawlet's server announces and enforces after ``connect``."""

DEFAULT_TICK_INTERVAL_MS = 30_000

SCOPE_READ = "operator.read"
SCOPE_WRITE = "operator.write"
SCOPE_ADMIN = "operator.admin"
SCOPE_APPROVALS = "operator.approvals"
SCOPE_QUESTIONS = "operator.questions"
OPERATOR_SCOPES = (SCOPE_READ, SCOPE_WRITE)

CAP_TOOL_EVENTS = "tool-events"
#: ``GATEWAY_CLIENT_CAPS`` of ``@openclaw/gateway-protocol/client-info``: a client able to show and
#: answer approvals (every kind, or only exec / plugin ones).
CAP_APPROVALS = "approvals"
CAP_EXEC_APPROVALS = "exec-approvals"
CAP_PLUGIN_APPROVALS = "plugin-approvals"

#: ``client.id`` and ``client.mode`` are closed sets in the protocol schema.
CLIENT_IDS = frozenset(
    {
        "webchat-ui",
        "openclaw-control-ui",
        "openclaw-browser-copilot",
        "openclaw-tui",
        "webchat",
        "cli",
        "gateway-client",
        "openclaw-macos",
        "openclaw-linux",
        "openclaw-ios",
        "openclaw-watchos",
        "openclaw-android",
        "node-host",
        "openclaw-worker",
        "test",
        "fingerprint",
        "openclaw-probe",
    }
)
CLIENT_MODES = frozenset({"webchat", "cli", "ui", "backend", "node", "worker", "probe", "test"})

# -- error codes (``error.code``) and detail codes (``error.details.code``) ---------------------
INVALID_REQUEST = "INVALID_REQUEST"
FORBIDDEN = "FORBIDDEN"
UNAVAILABLE = "UNAVAILABLE"
APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
DETAIL_PROTOCOL_MISMATCH = "PROTOCOL_MISMATCH"
DETAIL_AUTH_TOKEN_MISMATCH = "AUTH_TOKEN_MISMATCH"  # noqa: S105 (an error code)
DETAIL_AUTH_TOKEN_MISSING = "AUTH_TOKEN_MISSING"  # noqa: S105 (an error code)
DETAIL_MISSING_SCOPE = "MISSING_SCOPE"
DETAIL_UNKNOWN_AGENT_ID = "UNKNOWN_AGENT_ID"

EVENT_CHALLENGE = "connect.challenge"
EVENT_TICK = "tick"
EVENT_CHAT = "chat"
EVENT_AGENT = "agent"
EVENT_SHUTDOWN = "shutdown"

MAIN_SESSION_SUFFIX = "main"
DEFAULT_AGENT_ID = "main"


# -- frames (what clawlet sends; received frames are parsed leniently: ``decode``) ------------


class ErrorShape(TypedDict):
    """A ``res`` frame's ``error``."""

    code: str
    message: str
    details: NotRequired[dict[str, Any]]
    retryable: NotRequired[bool]
    retryAfterMs: NotRequired[int]


class RequestFrame(TypedDict):
    type: Literal["req"]
    id: str
    method: str
    params: NotRequired[Any]


class ResponseFrame(TypedDict):
    type: Literal["res"]
    id: str
    ok: bool
    payload: NotRequired[Any]
    error: NotRequired[ErrorShape]


class EventFrame(TypedDict):
    type: Literal["event"]
    event: str
    payload: NotRequired[Any]
    seq: NotRequired[int]
    """Per connection: 1, 2, ... (the ``connect.challenge`` before the handshake has none)."""


Frame = RequestFrame | ResponseFrame | EventFrame


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ChatMessage(TypedDict):
    """A chat message as the gateway sends it (``chat`` events, ``chat.history``)."""

    role: str
    content: list[TextPart]
    timestamp: int


class FrameError(ValueError):
    """A frame that is not valid JSON or not one of the three frame types."""


@dataclass
class GatewayError(Exception):
    """An ``ok:false`` response (or a local failure shaped like one)."""

    code: str
    message: str
    details: dict[str, Any] | None = None
    retryable: bool | None = None
    retry_after_ms: int | None = None

    def __str__(self) -> str:
        detail = (self.details or {}).get("code")
        return f"{self.code}{f'/{detail}' if detail else ''}: {self.message}"

    @classmethod
    def from_error_shape(cls, shape: Any) -> GatewayError:
        if not isinstance(shape, dict):
            return cls(UNAVAILABLE, "the gateway answered ok:false without an error")
        details = shape.get("details")
        retryable = shape.get("retryable")
        retry_after = shape.get("retryAfterMs")
        return cls(
            str(shape.get("code") or UNAVAILABLE),
            str(shape.get("message") or "gateway request failed"),
            details if isinstance(details, dict) else None,
            retryable if isinstance(retryable, bool) else None,
            retry_after if isinstance(retry_after, int) and retry_after >= 0 else None,
        )

    def shape(self) -> ErrorShape:
        error: ErrorShape = {"code": self.code, "message": self.message or self.code}
        if self.details is not None:
            error["details"] = self.details
        if self.retryable is not None:
            error["retryable"] = self.retryable
        if self.retry_after_ms is not None:
            error["retryAfterMs"] = self.retry_after_ms
        return error


def now_ms() -> int:
    return int(time.time() * 1000)


# -- frames --------------------------------------------------------------------------------------


def request_frame(request_id: str, method: str, params: dict[str, Any] | None = None) -> RequestFrame:
    frame: RequestFrame = {"type": "req", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def response_ok(request_id: str, payload: Any = None) -> ResponseFrame:
    frame: ResponseFrame = {"type": "res", "id": request_id, "ok": True}
    if payload is not None:
        frame["payload"] = payload
    return frame


def response_error(request_id: str, error: GatewayError) -> ResponseFrame:
    return {"type": "res", "id": request_id or "unknown", "ok": False, "error": error.shape()}


def event_frame(event: str, payload: Any = None, seq: int | None = None) -> EventFrame:
    frame: EventFrame = {"type": "event", "event": event}
    if payload is not None:
        frame["payload"] = payload
    if seq is not None:
        frame["seq"] = seq
    return frame


def encode(frame: Frame) -> str:
    """The frame as compact JSON text. Non-ASCII characters stay as they are, except when a string
    holds a lone surrogate (``"\\ud800"`` in a peer's JSON parses to one): such text cannot be sent
    as UTF-8, so that frame is escaped to ASCII instead (the same JSON value, sendable)."""
    text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(frame, separators=(",", ":"))
    return text


def frame_size(frame: str | bytes) -> int:
    """A frame's size in UTF-8 bytes, as it travels."""
    if isinstance(frame, bytes) or frame.isascii():
        return len(frame)
    return len(frame.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class EncodedEvent:
    """An event frame encoded once for every connection it goes to: each adds its own ``seq``
    (:meth:`with_seq` is ``encode(event_frame(event, payload, seq))``, the same text)."""

    head: str
    """The frame's text without ``seq`` and without its closing brace."""
    head_size: int
    """:attr:`head`'s size in UTF-8 bytes."""

    @classmethod
    def of(cls, event: str, payload: Any = None) -> EncodedEvent:
        head = encode(event_frame(event, payload))[:-1]
        return cls(head, frame_size(head))

    def with_seq(self, seq: int) -> tuple[str, int]:
        """The frame with ``seq``, and its size in UTF-8 bytes."""
        tail = f',"seq":{seq}}}'
        return self.head + tail, self.head_size + len(tail)


def decode(text: str | bytes) -> dict[str, Any]:
    """Parse one frame leniently: any JSON object whose ``type`` is req, res or event. A binary
    frame (bytes) must be UTF-8 JSON; nesting past Python's recursion limit is refused."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary frame is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc
    try:
        frame = json.loads(text)
    except ValueError as exc:
        raise FrameError(f"frame is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise FrameError("frame is not valid JSON: nested too deeply") from exc
    if not isinstance(frame, dict):
        raise FrameError("frame must be a JSON object")
    kind = frame.get("type")
    if kind not in ("req", "res", "event"):
        raise FrameError(f"unknown frame type {kind!r} (expected req, res or event)")
    return frame


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``–``\\uDFFF`` escape: only JSON text holding one can parse to a lone surrogate."""
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_path(frame: dict[str, Any], text: str | bytes) -> str | None:
    """Where (``id``, ``params.message``, ...) the parsed ``frame`` holds a string or key with a lone
    surrogate, or None. Such strings are not Unicode text: they cannot be written as UTF-8 (logs,
    transcripts, the model's request) and are refused. ``text`` is the frame as received; frames
    without a surrogate escape (nearly all) are not walked."""
    found = (
        _SURROGATE_ESCAPE_BYTES.search(text) if isinstance(text, bytes) else _SURROGATE_ESCAPE.search(text)
    )
    if found is None:
        return None
    stack: list[tuple[str, Any]] = [("", frame)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if not _is_unicode(value):
                return path or "frame"
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if not _is_unicode(key):
                    return path or "frame"
                stack.append((child, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- session keys --------------------------------------------------------------------------------


def session_key(agent_id: str, name: str = MAIN_SESSION_SUFFIX) -> str:
    """``agent:<agentId>:<name>``, lower-cased: the gateway lower-cases keys, so build them so."""
    return f"agent:{agent_id}:{name}".lower()


def parse_session_key(key: str) -> tuple[str, str]:
    """``agent:<agentId>:<rest>`` → ``(agentId, rest)``; any other key belongs to the default agent."""
    key = key.strip().lower()
    parts = key.split(":", 2)
    if len(parts) == 3 and parts[0] == "agent" and parts[1] and parts[2]:
        return parts[1], parts[2]
    return DEFAULT_AGENT_ID, key or MAIN_SESSION_SUFFIX


# -- chat messages -------------------------------------------------------------------------------


def message_text(message: Any) -> str:
    """The text of a chat message in any shape servers send: a string, ``{content: str}``,
    ``{content: [{type:"text", text}]}`` or ``{text}``."""
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        return "".join(message_text(part) for part in message)
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, str):
                    parts.append(part)
                elif isinstance(part, dict) and part.get("type", "text") in ("text", "output_text"):
                    text = part.get("text")
                    if isinstance(text, str):
                        parts.append(text)
            return "".join(parts)
        text = message.get("text")
        if isinstance(text, str):
            return text
    return ""


def assistant_message(text: str, timestamp: int | None = None) -> ChatMessage:
    """The cumulative assistant snapshot a ``chat`` event carries."""
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "timestamp": timestamp if timestamp is not None else now_ms(),
    }

"""The control plane ↔ execution plane WebSocket protocol (seed 001 §3.1, §5, §10).

One WebSocket per user machine ("VM"), opened by the execution plane (``clawlet exec-plane``) to the
control plane's ``/ws/vm`` endpoint. Every message is one JSON text frame with a ``type``::

    exec → control   auth            {type, token}                                 first frame, always
    control → exec   init            {type, data: {user_id, org_id?, api_keys, …}}  after a good auth
    control → exec   start_session   {type, session_id, data: {session_id, agent_config, …}}
    control → exec   stop_session    {type, session_id, data: {session_id, …}}
    exec → control   request         {type, id, session_id, method, params}
    control → exec   response        {type, id, result}  or  {type, id, error: {code, message}}
    exec → control   fire_and_forget {type, id, session_id, method, params, ts}
    exec → control   sse_event       {type, session_id, data, seq, stream}
    control → exec   user_message    {type, session_id, data}
    control → exec   cancel          {type, session_id, data?}
    exec → control   heartbeat       {type, ts}                                     every 10 s
    exec → control   resume          {type, pending_ids: [id, …]}                   after a reconnect
    control → exec   resume_response {type, results: {id: {status:"completed", data} | {status:"lost"}}}
    control → exec   error           {type, error: {code, message}, id?}            refusals
    control → exec   http_request    {type, id, method, path, query, headers, body}  (the tunnel, below)
    exec → control   http_response   {type, id, status, headers}
    exec → control   http_body       {type, id, n, body, more}
    control → exec   http_cancel     {type, id}
    control → exec   http_resume     {type, id, after}

Connecting (the control plane must follow this):

* URL ``<CONTROL_PLANE_WS>?user_id=<id>&ticket=<ticket>`` the first time; ``?user_id=<id>`` on every
  reconnect (tickets are single use, valid :data:`TICKET_TTL_SECONDS`). The JWT is never in the URL.
* The first client frame is ``auth`` with the JWT. The control plane verifies the JWT (its ``sub``
  must equal ``user_id``) and, when the URL has one, redeems the ticket for that user; then it sends
  ``init``. A connection without a ticket is a reconnect and is authenticated by the JWT alone.
* A refusal is an ``error`` frame (``code`` one of :data:`REFUSAL_CODES`) followed by a close with
  code :data:`CLOSE_UNAUTHORIZED`. Refusals are final: the client does not retry them.

Fields this module adds to the seed's shapes (the seed leaves them open):

* ``fire_and_forget.id``: a random record id, the same on every (re)send of the record. The client
  delivers fire-and-forget records at least once: it writes each to a disk queue first and removes it
  only after a WebSocket ping sent after it was answered, so a drop, a crash or a restart makes it
  send the record again; **the control plane must de-duplicate by ``id``** (e.g. a unique key on
  usage rows). ``ts`` is when the record was made (ISO 8601, UTC), not when it was delivered: usage
  queued offline keeps its real time.
* ``sse_event.seq``: per session, 1, 2, 3, … in the order the agent produced the events, and
  ``sse_event.stream``: an id of the client process that numbered them (a restarted daemon starts a
  new stream at ``seq`` 1). After a reconnect the client replays, in order, the events it sent that no
  ping had confirmed yet, then those produced while disconnected, so events may arrive twice. **The
  control plane drops an event whose ``seq`` is not above the last one it saw for the same
  ``(stream, session_id)``**; a jump in ``seq`` means the client's bounded buffer dropped events.
* ``sse_event.data``: one clawlet event of the session's run in its JSON encoding (``{kind, …}``,
  :func:`clawlet.events.event_to_json`; :mod:`clawlet.controlplane.seed_events`), not one of the seed's SSE
  events: the control plane gives events the seed's names only at its
  ``/api/cluster/sessions/{id}/events`` edge. ``init``'s ``event_encoding`` names the encoding's
  version (:data:`INIT_EVENT_ENCODING`).
* ``init``'s ``frames_per_line`` (:data:`INIT_FRAMES_PER_LINE`): the control plane reads several
  frames in one WebSocket message, one per line; the execution plane then sends the frames that pile
  up within one turn of its event loop that way.
* The control plane must answer WebSocket pings promptly (every WebSocket library does by default):
  the client confirms delivery with them.
* ``resume_response`` results may also be ``{status:"completed", error:{code, message}}`` (the request
  finished with an error) and ``{status:"pending"}`` (still running: its ``response`` will follow on the
  new connection). An id missing from ``results``, or any other status, counts as ``lost``.

**The HTTP tunnel** (a clawlet extension; :mod:`clawlet.execplane.tunnel`): every request a user makes
to the control plane's API is run by the execution plane's own local-mode app. ``http_request`` carries
it (``headers`` a list of ``[name, value]`` pairs, ``body`` base64, ``id`` chosen by the control
plane); the answer is one ``http_response`` (status, headers) and ``http_body`` frames numbered ``n``
= 1, 2, … (``body`` base64; the last has ``more: false``). ``http_cancel`` says the client went away;
``http_resume {after}`` asks the execution plane to send again the frames after ``n = after``
(``http_response`` counts as ``n = 0``, so ``after: -1`` resends everything) — after a reconnect, or
when another control-plane instance took the connection over. Frames of a request may arrive twice:
the control plane drops an ``http_body`` whose ``n`` it has.

Parsing is lenient the usual way: unknown fields are ignored and missing optional fields get
defaults; a frame that is not JSON, not an object, of an unknown ``type``, or whose required field
is missing or of the wrong type raises :class:`FrameError` naming the problem.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

# -- message types -------------------------------------------------------------------------------

AUTH: Final = "auth"
INIT: Final = "init"
START_SESSION: Final = "start_session"
STOP_SESSION: Final = "stop_session"
REQUEST: Final = "request"
RESPONSE: Final = "response"
FIRE_AND_FORGET: Final = "fire_and_forget"
SSE_EVENT: Final = "sse_event"
USER_MESSAGE: Final = "user_message"
CANCEL: Final = "cancel"
HEARTBEAT: Final = "heartbeat"
RESUME: Final = "resume"
RESUME_RESPONSE: Final = "resume_response"
ERROR: Final = "error"
HTTP_REQUEST: Final = "http_request"
HTTP_RESPONSE: Final = "http_response"
HTTP_BODY: Final = "http_body"
HTTP_CANCEL: Final = "http_cancel"
HTTP_RESUME: Final = "http_resume"

MESSAGE_TYPES: Final[frozenset[str]] = frozenset(
    {
        AUTH,
        INIT,
        START_SESSION,
        STOP_SESSION,
        REQUEST,
        RESPONSE,
        FIRE_AND_FORGET,
        SSE_EVENT,
        USER_MESSAGE,
        CANCEL,
        HEARTBEAT,
        RESUME,
        RESUME_RESPONSE,
        ERROR,
        HTTP_REQUEST,
        HTTP_RESPONSE,
        HTTP_BODY,
        HTTP_CANCEL,
        HTTP_RESUME,
    }
)

# -- request and fire-and-forget methods ---------------------------------------------------------

METHOD_GET_SKILL_PACKAGE: Final = "get_skill_package"
"""``{skill_id, version}`` → the skill package (not cached locally)."""
METHOD_MEMORY_SEARCH: Final = "memory_search"
"""``{query, top_k}`` → a list of long-term memory hits."""
METHOD_MCP_CALL: Final = "mcp_call"
"""``{server, tool, arguments}`` → the remote MCP tool's result."""

FF_USAGE_REPORT: Final = "usage_report"
"""``{model, tokens_in, tokens_out, …}``"""
FF_AUDIT_LOG: Final = "audit_log"
"""``{event, details}``"""
FF_EVOLUTION_SUBMIT: Final = "evolution_submit"
"""The skill data an agent proposes."""
FF_SNAPSHOT_SYNC: Final = "snapshot_sync"
"""A session snapshot (seed §5); skipped while offline (the next one replaces it)."""
FF_TRANSCRIPT_SYNC: Final = "transcript_sync"
"""``{session_id, workspace, title, messages}``: a session's transcript after each turn (the
execution plane keeps it; the control plane's read-only copy while the machine is offline)."""
MAX_SEQ: Final = 2**63 - 1
"""The largest ``seq`` of an ``sse_event`` (the control plane's event log keeps it as a BIGINT)."""

# -- timing and limits ---------------------------------------------------------------------------

RECONNECT_BACKOFF: Final[tuple[float, ...]] = (1, 2, 4, 8, 16, 30, 30, 30)
"""Seconds to wait before each reconnect attempt (seed §3.1)."""
HEARTBEAT_INTERVAL: Final = 10.0
INIT_HEARTBEAT_ACK: Final = "heartbeat_ack"
"""In ``init``'s data, ``true`` when the control plane answers a ``heartbeat`` that has an ``id``
with ``heartbeat {id}`` once it has handled (stored, published) every frame sent before it — an
application-level acknowledgement. A WebSocket pong only says that the frames arrived, so the
execution plane forgets queued usage records and buffered SSE events on this answer when the
control plane offers it (a clawlet extension of the seed's protocol; without it, on a pong)."""
INIT_EVENT_ENCODING: Final = "event_encoding"
"""In ``init``'s data: the encoding the control plane reads ``sse_event`` data in — clawlet's typed
events as JSON (:func:`clawlet.events.event_to_json`), version :data:`EVENT_ENCODING`. An execution
plane refuses (for good, with a message saying so) a control plane that names another or none: the
two sides must run the same clawlet version (a clawlet extension of the seed's protocol)."""
EVENT_ENCODING: Final = "clawlet-events/1"
"""The current version of the ``sse_event`` data encoding (:data:`INIT_EVENT_ENCODING`)."""
INIT_FRAMES_PER_LINE: Final = "frames_per_line"
"""In ``init``'s data, ``true`` when the control plane reads several frames in one WebSocket text
message, one per line (a frame's compact JSON holds no raw newline): the execution plane then sends
the frames that pile up within one turn of its event loop as one message (:func:`split_lines`;
a clawlet extension of the seed's protocol)."""
ERR_PROTOCOL_MISMATCH: Final = "protocol_mismatch"
"""An execution plane's reason for refusing a control plane of another version."""
"""The execution plane sends ``heartbeat`` this often (seconds)."""
REQUEST_TIMEOUT: Final = 60.0
"""A request without a response after this long fails (and its pending entry is removed)."""
TICKET_TTL_SECONDS: Final = 30.0
"""A connect ticket is valid this long after it was issued, and only once."""
AUTH_TIMEOUT: Final = 10.0
"""The control plane closes a connection whose ``auth`` frame does not come within this long."""
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
"""The largest frame either side accepts (skill packages can be large)."""

WS_PATH: Final = "/ws/vm"
"""The control plane's endpoint for execution planes."""
QUERY_USER_ID: Final = "user_id"
QUERY_TICKET: Final = "ticket"

# -- error codes (``error.code``) ----------------------------------------------------------------

ERR_AUTH_REQUIRED: Final = "auth_required"
"""The first frame was not ``auth`` (or did not come in time)."""
ERR_TOKEN_INVALID: Final = "token_invalid"  # noqa: S105 (an error code)
"""The JWT is invalid, expired, for another audience, or its ``sub`` is not the URL's ``user_id``."""
ERR_TICKET_REJECTED: Final = "ticket_rejected"
"""The ticket is unknown, expired, already used, or was issued for another user."""
ERR_FORBIDDEN: Final = "forbidden"
"""Authenticated, but not allowed (e.g. the user is disabled)."""
ERR_BAD_FRAME: Final = "bad_frame"
ERR_UNKNOWN_METHOD: Final = "unknown_method"
ERR_INTERNAL: Final = "internal_error"
ERR_UNAVAILABLE: Final = "unavailable"
"""Temporarily unable to serve; a client may retry."""
REFUSAL_CODES: Final[frozenset[str]] = frozenset(
    {ERR_AUTH_REQUIRED, ERR_TOKEN_INVALID, ERR_TICKET_REJECTED, ERR_FORBIDDEN}
)
"""Codes of final connection refusals: retrying with the same credentials cannot succeed."""

CLOSE_UNAUTHORIZED: Final = 4401
"""Close code after a refusal (an ``error`` frame with one of :data:`REFUSAL_CODES`)."""
CLOSE_PROTOCOL_ERROR: Final = 4400
"""Close code for a peer that breaks the protocol."""

REDACTED: Final = "***"

# -- frames --------------------------------------------------------------------------------------


class ErrorShape(TypedDict):
    code: str
    message: str


class AuthFrame(TypedDict):
    type: Literal["auth"]
    token: str


class InitFrame(TypedDict):
    type: Literal["init"]
    data: dict[str, Any]
    """``user_id``, ``org_id``, ``api_keys`` ({provider: key}), and whatever else the VM needs."""


class StartSessionFrame(TypedDict):
    type: Literal["start_session"]
    session_id: str
    data: dict[str, Any]
    """``session_id``, ``agent_config``, ``runtime_type``, ``skill_index``, ``mcp_servers``,
    ``sub_agents``, ``session_config`` (seed §5)."""


class StopSessionFrame(TypedDict):
    type: Literal["stop_session"]
    session_id: str
    data: dict[str, Any]


class RequestFrame(TypedDict):
    type: Literal["request"]
    id: str
    session_id: str
    method: str
    params: dict[str, Any]


class ResponseFrame(TypedDict):
    type: Literal["response"]
    id: str
    result: Any
    error: NotRequired[ErrorShape]


class FireAndForgetFrame(TypedDict):
    type: Literal["fire_and_forget"]
    session_id: str
    method: str
    params: dict[str, Any]
    id: NotRequired[str]
    """The record id the control plane de-duplicates by (always sent by clawlet)."""
    ts: NotRequired[str]
    """When the record was made (ISO 8601, UTC)."""


class SseEventFrame(TypedDict):
    type: Literal["sse_event"]
    session_id: str
    data: Any
    seq: NotRequired[int]
    """1, 2, 3, … per ``(stream, session_id)``; always sent by clawlet."""
    stream: NotRequired[str]
    """The id of the client process that numbered the events; always sent by clawlet."""


class UserMessageFrame(TypedDict):
    type: Literal["user_message"]
    session_id: str
    data: dict[str, Any]


class CancelFrame(TypedDict):
    type: Literal["cancel"]
    session_id: str
    data: dict[str, Any]


class HeartbeatFrame(TypedDict):
    type: Literal["heartbeat"]
    ts: NotRequired[float]
    id: NotRequired[str]
    """Asks for an acknowledgement (see :data:`INIT_HEARTBEAT_ACK`); the answer carries the same id."""


class ResumeFrame(TypedDict):
    type: Literal["resume"]
    pending_ids: list[str]


ResumeStatus = Literal["completed", "lost", "pending"]


class ResumeResult(TypedDict):
    status: ResumeStatus
    data: NotRequired[Any]
    error: NotRequired[ErrorShape]


class ResumeResponseFrame(TypedDict):
    type: Literal["resume_response"]
    results: dict[str, ResumeResult]


class ErrorFrame(TypedDict):
    type: Literal["error"]
    error: ErrorShape
    id: NotRequired[str]
    """Set when the error is about one request."""


Header = tuple[str, str]


class HttpRequestFrame(TypedDict):
    type: Literal["http_request"]
    id: str
    method: str
    path: str
    query: str
    headers: list[Header]
    body: str
    """Base64."""


class HttpResponseFrame(TypedDict):
    type: Literal["http_response"]
    id: str
    status: int
    headers: list[Header]


class HttpBodyFrame(TypedDict):
    type: Literal["http_body"]
    id: str
    n: int
    body: str
    """Base64."""
    more: bool
    lost: NotRequired[bool]
    """On the last frame: the execution plane no longer has the frames a resume asked for (it
    restarted, or the response outgrew what it keeps), so the response is cut here."""


class HttpCancelFrame(TypedDict):
    type: Literal["http_cancel"]
    id: str


class HttpResumeFrame(TypedDict):
    type: Literal["http_resume"]
    id: str
    after: int


HttpFrame = HttpResponseFrame | HttpBodyFrame
"""What the execution plane answers an ``http_request`` with."""

Frame = (
    AuthFrame
    | InitFrame
    | StartSessionFrame
    | StopSessionFrame
    | RequestFrame
    | ResponseFrame
    | FireAndForgetFrame
    | SseEventFrame
    | UserMessageFrame
    | CancelFrame
    | HeartbeatFrame
    | ResumeFrame
    | ResumeResponseFrame
    | ErrorFrame
    | HttpRequestFrame
    | HttpResponseFrame
    | HttpBodyFrame
    | HttpCancelFrame
    | HttpResumeFrame
)


class FrameError(ValueError):
    """A frame that is not valid JSON, not an object, of an unknown type, or missing a required
    field (or carrying one of the wrong type)."""


# -- building frames (what we send is always complete) --------------------------------------------


def now_iso() -> str:
    """The current time as ISO 8601 UTC with a ``Z`` (the ``ts`` of fire-and-forget records)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def auth_frame(token: str) -> AuthFrame:
    return {"type": "auth", "token": token}


def init_frame(data: Mapping[str, Any]) -> InitFrame:
    return {"type": "init", "data": dict(data)}


def start_session_frame(data: Mapping[str, Any]) -> StartSessionFrame:
    session_id = data.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("start_session data needs a session_id")
    return {"type": "start_session", "session_id": session_id, "data": dict(data)}


def stop_session_frame(session_id: str, data: Mapping[str, Any] | None = None) -> StopSessionFrame:
    body = dict(data or {})
    body["session_id"] = session_id
    return {"type": "stop_session", "session_id": session_id, "data": body}


def request_frame(
    request_id: str, session_id: str, method: str, params: Mapping[str, Any] | None = None
) -> RequestFrame:
    return {
        "type": "request",
        "id": request_id,
        "session_id": session_id,
        "method": method,
        "params": dict(params or {}),
    }


def response_frame(request_id: str, result: Any = None) -> ResponseFrame:
    return {"type": "response", "id": request_id, "result": result}


def error_response_frame(request_id: str, code: str, message: str) -> ResponseFrame:
    return {"type": "response", "id": request_id, "result": None, "error": {"code": code, "message": message}}


def fire_and_forget_frame(
    record_id: str,
    session_id: str,
    method: str,
    params: Mapping[str, Any] | None = None,
    ts: str | None = None,
) -> FireAndForgetFrame:
    return {
        "type": "fire_and_forget",
        "id": record_id,
        "session_id": session_id,
        "method": method,
        "params": dict(params or {}),
        "ts": ts or now_iso(),
    }


def sse_event_frame(session_id: str, data: Any, seq: int, stream: str) -> SseEventFrame:
    return {"type": "sse_event", "session_id": session_id, "data": data, "seq": seq, "stream": stream}


def user_message_frame(session_id: str, data: Mapping[str, Any]) -> UserMessageFrame:
    return {"type": "user_message", "session_id": session_id, "data": dict(data)}


def cancel_frame(session_id: str, data: Mapping[str, Any] | None = None) -> CancelFrame:
    return {"type": "cancel", "session_id": session_id, "data": dict(data or {})}


def heartbeat_frame(ts: float | None = None, ack_id: str | None = None) -> HeartbeatFrame:
    frame: HeartbeatFrame = {"type": "heartbeat"}
    if ts is not None:
        frame["ts"] = ts
    if ack_id is not None:
        frame["id"] = ack_id
    return frame


def resume_frame(pending_ids: list[str]) -> ResumeFrame:
    return {"type": "resume", "pending_ids": list(pending_ids)}


def completed(data: Any = None) -> ResumeResult:
    """A ``resume_response`` result: the request finished with ``data``."""
    return {"status": "completed", "data": data}


def completed_with_error(code: str, message: str) -> ResumeResult:
    """A ``resume_response`` result: the request finished with an error."""
    return {"status": "completed", "error": {"code": code, "message": message}}


def lost() -> ResumeResult:
    """A ``resume_response`` result: the control plane has no result for the request."""
    return {"status": "lost"}


def still_pending() -> ResumeResult:
    """A ``resume_response`` result: still running; a ``response`` follows on this connection."""
    return {"status": "pending"}


def resume_response_frame(results: Mapping[str, ResumeResult]) -> ResumeResponseFrame:
    return {"type": "resume_response", "results": dict(results)}


def error_frame(code: str, message: str, request_id: str | None = None) -> ErrorFrame:
    frame: ErrorFrame = {"type": "error", "error": {"code": code, "message": message}}
    if request_id is not None:
        frame["id"] = request_id
    return frame


def http_request_frame(
    request_id: str, method: str, path: str, query: str, headers: list[Header], body: bytes
) -> HttpRequestFrame:
    return {
        "type": "http_request",
        "id": request_id,
        "method": method,
        "path": path,
        "query": query,
        "headers": headers,
        "body": base64.b64encode(body).decode("ascii"),
    }


def http_response_frame(request_id: str, status: int, headers: list[Header]) -> HttpResponseFrame:
    return {"type": "http_response", "id": request_id, "status": status, "headers": headers}


def http_body_frame(request_id: str, n: int, body: bytes, more: bool) -> HttpBodyFrame:
    return {
        "type": "http_body",
        "id": request_id,
        "n": n,
        "body": base64.b64encode(body).decode("ascii"),
        "more": more,
    }


def http_lost_frame(request_id: str, n: int) -> HttpBodyFrame:
    """The last frame of a response the execution plane can no longer resume."""
    return {"type": "http_body", "id": request_id, "n": n, "body": "", "more": False, "lost": True}


def http_cancel_frame(request_id: str) -> HttpCancelFrame:
    return {"type": "http_cancel", "id": request_id}


def http_resume_frame(request_id: str, after: int) -> HttpResumeFrame:
    return {"type": "http_resume", "id": request_id, "after": after}


def frame_body(frame: HttpRequestFrame | HttpBodyFrame) -> bytes:
    """The decoded ``body`` of a tunnel frame (already checked to be base64 by the parser)."""
    return base64.b64decode(frame["body"])


def encode(frame: Mapping[str, Any]) -> str:
    """One frame as compact JSON text (non-ASCII kept as is)."""
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def redact_frame(frame: Mapping[str, Any]) -> dict[str, Any]:
    """A copy fit for logs and observers: the ``auth`` token and ``init`` API keys are replaced by
    ``***`` (the keys' names stay, so a log still shows which providers are configured)."""
    clean = dict(frame)
    if clean.get("type") == AUTH and "token" in clean:
        clean["token"] = REDACTED
    elif clean.get("type") == INIT and isinstance(clean.get("data"), Mapping):
        data = dict(clean["data"])
        keys = data.get("api_keys")
        if isinstance(keys, Mapping):
            data["api_keys"] = {name: REDACTED for name in keys}
        elif "api_keys" in data:
            data["api_keys"] = REDACTED
        clean["data"] = data
    return clean


# -- parsing frames (lenient about extras, strict about what is required) ------------------------


def split_lines(raw: str) -> list[str]:
    """The frames of one WebSocket message (:data:`INIT_FRAMES_PER_LINE`): one per line."""
    return raw.split("\n") if "\n" in raw else [raw]


def decode(raw: str | bytes) -> Frame:
    """Parse and check one frame; see the module docstring for what is lenient and what raises."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"frame is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise FrameError(f"frame must be a JSON object, not {type(obj).__name__}")
    return parse_frame(obj)


def parse_frame(obj: Mapping[str, Any]) -> Frame:
    """Check an already-parsed JSON object as a frame (see :func:`decode`)."""
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise FrameError("frame has no 'type'")
    parser = _PARSERS.get(kind)
    if parser is None:
        raise FrameError(f"unknown frame type {kind!r}")
    return parser(obj)


def _text(obj: Mapping[str, Any], key: str, kind: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise FrameError(f"{kind} frame needs a non-empty string {key!r} (got {type(value).__name__})")
    return value


def _object(obj: Mapping[str, Any], key: str, kind: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrameError(f"{kind} frame: {key!r} must be an object (got {type(value).__name__})")
    return value


def _error_shape(value: Any, default_code: str = ERR_INTERNAL) -> ErrorShape:
    if isinstance(value, dict):
        code = value.get("code")
        message = value.get("message")
        return {
            "code": code if isinstance(code, str) and code else default_code,
            "message": message if isinstance(message, str) and message else "no message",
        }
    if isinstance(value, str) and value:
        return {"code": default_code, "message": value}
    return {"code": default_code, "message": "no message"}


def _session_scoped(obj: Mapping[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    """``(session_id, data)`` of a frame whose session id may be top-level or inside ``data``."""
    data = _object(obj, "data", kind)
    session_id = obj.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        session_id = data.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise FrameError(f"{kind} frame needs a non-empty string 'session_id'")
    return session_id, data


def _parse_auth(obj: Mapping[str, Any]) -> AuthFrame:
    return {"type": "auth", "token": _text(obj, "token", AUTH)}


def _parse_init(obj: Mapping[str, Any]) -> InitFrame:
    return {"type": "init", "data": _object(obj, "data", INIT)}


def _parse_start_session(obj: Mapping[str, Any]) -> StartSessionFrame:
    session_id, data = _session_scoped(obj, START_SESSION)
    return {"type": "start_session", "session_id": session_id, "data": data}


def _parse_stop_session(obj: Mapping[str, Any]) -> StopSessionFrame:
    session_id, data = _session_scoped(obj, STOP_SESSION)
    return {"type": "stop_session", "session_id": session_id, "data": data}


def _parse_request(obj: Mapping[str, Any]) -> RequestFrame:
    return {
        "type": "request",
        "id": _text(obj, "id", REQUEST),
        "session_id": _text(obj, "session_id", REQUEST),
        "method": _text(obj, "method", REQUEST),
        "params": _object(obj, "params", REQUEST),
    }


def _parse_response(obj: Mapping[str, Any]) -> ResponseFrame:
    frame: ResponseFrame = {"type": "response", "id": _text(obj, "id", RESPONSE), "result": obj.get("result")}
    if obj.get("error") is not None:
        frame["error"] = _error_shape(obj["error"])
    return frame


def _parse_fire_and_forget(obj: Mapping[str, Any]) -> FireAndForgetFrame:
    frame: FireAndForgetFrame = {
        "type": "fire_and_forget",
        "session_id": _text(obj, "session_id", FIRE_AND_FORGET),
        "method": _text(obj, "method", FIRE_AND_FORGET),
        "params": _object(obj, "params", FIRE_AND_FORGET),
    }
    if obj.get("id") is not None:
        frame["id"] = _text(obj, "id", FIRE_AND_FORGET)
    if obj.get("ts") is not None:
        frame["ts"] = _text(obj, "ts", FIRE_AND_FORGET)
    return frame


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_sse_event(obj: Mapping[str, Any]) -> SseEventFrame:
    frame: SseEventFrame = {
        "type": "sse_event",
        "session_id": _text(obj, "session_id", SSE_EVENT),
        "data": obj.get("data"),
    }
    seq = obj.get("seq")
    if seq is not None:
        if not _int(seq) or not 1 <= seq <= MAX_SEQ:
            raise FrameError(f"sse_event frame: 'seq' must be a positive 64-bit integer (got {seq!r})")
        frame["seq"] = seq
    if obj.get("stream") is not None:
        frame["stream"] = _text(obj, "stream", SSE_EVENT)
    return frame


def _parse_user_message(obj: Mapping[str, Any]) -> UserMessageFrame:
    session_id, data = _session_scoped(obj, USER_MESSAGE)
    return {"type": "user_message", "session_id": session_id, "data": data}


def _parse_cancel(obj: Mapping[str, Any]) -> CancelFrame:
    session_id, data = _session_scoped(obj, CANCEL)
    return {"type": "cancel", "session_id": session_id, "data": data}


def _parse_heartbeat(obj: Mapping[str, Any]) -> HeartbeatFrame:
    frame: HeartbeatFrame = {"type": "heartbeat"}
    ts = obj.get("ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        frame["ts"] = float(ts)
    ack_id = obj.get("id")
    if isinstance(ack_id, str) and ack_id:
        frame["id"] = ack_id
    return frame


def _parse_resume(obj: Mapping[str, Any]) -> ResumeFrame:
    ids = obj.get("pending_ids")
    if ids is None:
        return {"type": "resume", "pending_ids": []}
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise FrameError("resume frame: 'pending_ids' must be a list of non-empty strings")
    return {"type": "resume", "pending_ids": cast(list[str], ids)}


def _resume_result(value: Any) -> ResumeResult:
    if not isinstance(value, dict):
        return {"status": "lost"}
    status = value.get("status")
    if status == "completed":
        result: ResumeResult = {"status": "completed", "data": value.get("data")}
        if value.get("error") is not None:
            result["error"] = _error_shape(value["error"])
        return result
    if status == "pending":
        return {"status": "pending"}
    return {"status": "lost"}


def _parse_resume_response(obj: Mapping[str, Any]) -> ResumeResponseFrame:
    results = _object(obj, "results", RESUME_RESPONSE)
    return {
        "type": "resume_response",
        "results": {str(key): _resume_result(value) for key, value in results.items()},
    }


def _parse_error(obj: Mapping[str, Any]) -> ErrorFrame:
    shape = obj.get("error")
    if shape is None and ("code" in obj or "message" in obj):
        shape = {"code": obj.get("code"), "message": obj.get("message")}
    frame: ErrorFrame = {"type": "error", "error": _error_shape(shape)}
    request_id = obj.get("id")
    if isinstance(request_id, str) and request_id:
        frame["id"] = request_id
    return frame


def _base64(obj: Mapping[str, Any], key: str, kind: str) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise FrameError(f"{kind} frame: {key!r} must be a base64 string")
    try:
        base64.b64decode(value, validate=True)
    except ValueError:
        raise FrameError(f"{kind} frame: {key!r} is not valid base64") from None
    return value


def _headers(obj: Mapping[str, Any], kind: str) -> list[Header]:
    value = obj.get("headers") or []
    if not isinstance(value, list) or not all(
        isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
        for pair in value
    ):
        raise FrameError(f"{kind} frame: 'headers' must be a list of [name, value] strings")
    return [(name, header) for name, header in value]


def _count(obj: Mapping[str, Any], key: str, kind: str, minimum: int) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise FrameError(f"{kind} frame: {key!r} must be an integer >= {minimum} (got {value!r})")
    return value


def _parse_http_request(obj: Mapping[str, Any]) -> HttpRequestFrame:
    query = obj.get("query", "")
    if not isinstance(query, str):
        raise FrameError("http_request frame: 'query' must be a string")
    path = _text(obj, "path", HTTP_REQUEST)
    if not path.startswith("/"):
        raise FrameError("http_request frame: 'path' must start with /")
    return {
        "type": "http_request",
        "id": _text(obj, "id", HTTP_REQUEST),
        "method": _text(obj, "method", HTTP_REQUEST).upper(),
        "path": path,
        "query": query,
        "headers": _headers(obj, HTTP_REQUEST),
        "body": _base64(obj, "body", HTTP_REQUEST),
    }


def _parse_http_response(obj: Mapping[str, Any]) -> HttpResponseFrame:
    status = _count(obj, "status", HTTP_RESPONSE, 100)
    if status > 599:
        raise FrameError(f"http_response frame: status {status} is not an HTTP status")
    return {
        "type": "http_response",
        "id": _text(obj, "id", HTTP_RESPONSE),
        "status": status,
        "headers": _headers(obj, HTTP_RESPONSE),
    }


def _parse_http_body(obj: Mapping[str, Any]) -> HttpBodyFrame:
    more = obj.get("more", False)
    if not isinstance(more, bool):
        raise FrameError("http_body frame: 'more' must be true or false")
    frame: HttpBodyFrame = {
        "type": "http_body",
        "id": _text(obj, "id", HTTP_BODY),
        "n": _count(obj, "n", HTTP_BODY, 1),
        "body": _base64(obj, "body", HTTP_BODY),
        "more": more,
    }
    if obj.get("lost") is True:
        frame["lost"] = True
    return frame


def _parse_http_cancel(obj: Mapping[str, Any]) -> HttpCancelFrame:
    return {"type": "http_cancel", "id": _text(obj, "id", HTTP_CANCEL)}


def _parse_http_resume(obj: Mapping[str, Any]) -> HttpResumeFrame:
    return {
        "type": "http_resume",
        "id": _text(obj, "id", HTTP_RESUME),
        "after": _count(obj, "after", HTTP_RESUME, -1),
    }


_PARSERS: dict[str, Callable[[Mapping[str, Any]], Frame]] = {
    AUTH: _parse_auth,
    INIT: _parse_init,
    START_SESSION: _parse_start_session,
    STOP_SESSION: _parse_stop_session,
    REQUEST: _parse_request,
    RESPONSE: _parse_response,
    FIRE_AND_FORGET: _parse_fire_and_forget,
    SSE_EVENT: _parse_sse_event,
    USER_MESSAGE: _parse_user_message,
    CANCEL: _parse_cancel,
    HEARTBEAT: _parse_heartbeat,
    RESUME: _parse_resume,
    RESUME_RESPONSE: _parse_resume_response,
    ERROR: _parse_error,
    HTTP_REQUEST: _parse_http_request,
    HTTP_RESPONSE: _parse_http_response,
    HTTP_BODY: _parse_http_body,
    HTTP_CANCEL: _parse_http_cancel,
    HTTP_RESUME: _parse_http_resume,
}

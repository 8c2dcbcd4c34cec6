"""The execution plane's one WebSocket to the control plane (seed 001 §3.1, §5, §10).

:class:`ControlPlaneClient` speaks :mod:`clawlet.cluster.protocol`. One client per user machine; the
sessions on the machine share it, multiplexed by ``session_id``.

Connection lifecycle:

* :meth:`ControlPlaneClient.connect` makes **one** attempt: it opens
  ``<url>?user_id=<id>&ticket=<ticket>``, sends ``{type:"auth", token}`` as the first frame and
  returns ``init``'s ``data`` (user id, API keys, …). A refusal (an ``error`` frame, HTTP 401/403, a
  close before ``init``, or an ``init`` naming another event encoding than this side's:
  :func:`check_event_encoding`) raises :class:`ControlPlaneRefused`; an unreachable control plane raises
  :class:`ControlPlaneUnavailable`. Nothing keeps running after a failed ``connect()``.
* The ticket is single use: once a server has seen it, it is forgotten and every later connection
  uses ``<url>?user_id=<id>``. The JWT is never in a URL, never logged and never handed to
  ``on_frame`` (which sees ``auth`` and ``init`` through :func:`~clawlet.cluster.protocol.redact_frame`).
  The API keys of ``init`` stay in memory (:attr:`ControlPlaneClient.api_keys`), never on disk.
* Connected, the client sends ``heartbeat`` every ``heartbeat_interval`` seconds. When the connection
  drops it reconnects: attempt *k* waits ``backoff[k]`` seconds first (``1, 2, 4, 8, 16, 30, 30, 30``),
  then ``auth`` → ``init`` → ``resume`` with the ids of the requests still waiting. ``completed``
  results resolve them, ``lost`` (or no result) fails them with :class:`RequestLost`, ``pending``
  leaves them waiting for their ``response``.
* When every attempt of the schedule failed, every waiting request fails with
  ``ControlPlaneUnavailable("control plane unreachable …")`` and the client is **offline**: requests
  fail fast, and the client keeps trying to reconnect every ``backoff[-1]`` seconds (a daemon must
  come back by itself when the control plane does), flushing what it kept once it is back. A refusal
  while reconnecting (the JWT expired or was revoked) is final: everything waiting fails with
  :class:`ControlPlaneRefused`, the client stops, and :meth:`ControlPlaneClient.wait_closed` raises it.

Requests (``request``/``call``) time out after ``request_timeout`` seconds (60) with
:class:`RequestTimeout` and leave nothing behind. An answer with ``error`` raises
:class:`ControlPlaneError`.

Nothing reported is lost to a dropped connection (seed §10, details in :mod:`clawlet.execplane.offline`):

* fire-and-forget records (``report_usage``, ``log_audit``, …) are always
  appended to ``<state_dir>/usage_queue.jsonl`` first (fsynced) and sent from there in order by a pump
  that removes them only after the control plane acknowledged them (a heartbeat answered once every
  frame before it is stored, when ``init`` offers ``heartbeat_ack``; else a ping/pong showing they
  arrived). While disconnected they simply stay
  there; they are flushed after the next connect, also by a new client instance after a restart.
  Delivery is at least once; each record has an ``id`` and the control plane de-duplicates by it.
  ``snapshot_sync`` is never queued: it is sent if connected and skipped otherwise (the next snapshot
  replaces it).
* ``send_sse_event`` sends directly while connected; events sent since the last acknowledged
  heartbeat (or ping) and events produced while disconnected are kept in memory (bounded, oldest dropped
  first) and replayed in order after the reconnect, before new events. Each carries a per-session
  ``seq`` (and the process's ``stream`` id) so the control plane drops the replays it already has.
* while disconnected, ``memory_search`` returns ``[]``; ``mcp_call`` and ``get_skill_package`` raise
  :class:`ControlPlaneUnavailable` with a message an agent can plan around.

The transport (opening the socket, the reader, the reconnect loop, waiting requests, closing) is
:class:`clawlet.ws_client.ReconnectingSocket`; this module is the protocol over it. Incoming frames are
dispatched by type through ``ControlPlaneClient._frame_handlers`` (one method per type).

Incoming ``start_session``/``stop_session`` go to ``on_start_session``/``on_stop_session``;
``user_message``/``cancel`` to the handlers given to :meth:`ControlPlaneClient.register_session`.
Each handler call runs as its own task in arrival order (a handler that must not overlap with the
next one serialises itself); one that raises is logged and never stops the reader. Messages for an
unregistered session are logged and dropped, so register a session before awaiting its slow start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus

from clawlet.cluster.protocol import (
    CLOSE_UNAUTHORIZED,
    ERR_PROTOCOL_MISMATCH,
    EVENT_ENCODING,
    FF_AUDIT_LOG,
    FF_SNAPSHOT_SYNC,
    FF_USAGE_REPORT,
    FIRE_AND_FORGET,
    HEARTBEAT_INTERVAL,
    INIT_EVENT_ENCODING,
    INIT_FRAMES_PER_LINE,
    INIT_HEARTBEAT_ACK,
    MAX_FRAME_BYTES,
    METHOD_GET_SKILL_PACKAGE,
    METHOD_MCP_CALL,
    METHOD_MEMORY_SEARCH,
    QUERY_TICKET,
    QUERY_USER_ID,
    RECONNECT_BACKOFF,
    REFUSAL_CODES,
    REQUEST_TIMEOUT,
    CancelFrame,
    ErrorFrame,
    ErrorShape,
    FrameError,
    HeartbeatFrame,
    InitFrame,
    ResponseFrame,
    ResumeResponseFrame,
    SseEventFrame,
    StartSessionFrame,
    StopSessionFrame,
    UserMessageFrame,
    auth_frame,
    decode,
    encode,
    fire_and_forget_frame,
    heartbeat_frame,
    parse_frame,
    redact_frame,
    request_frame,
    resume_frame,
    sse_event_frame,
)
from clawlet.events import Event, Title, Usage, event_to_json
from clawlet.execplane.offline import (
    DEFAULT_SSE_BUFFER_LIMIT,
    USAGE_QUEUE_FILE,
    DiskQueue,
    QueueBatch,
    ReplayBuffer,
)
from clawlet.ws_client import (
    Connection,
    FrameObserver,
    Limits,
    ReconnectingSocket,
    SocketClient,
    Wire,
    close_description,
    safe_url,
)

if TYPE_CHECKING:
    from clawlet.config import Settings

log = logging.getLogger(__name__)

ClientState = Literal["idle", "connected", "reconnecting", "offline", "closed"]
Handler = Callable[[dict[str, Any]], Awaitable[Any] | None]
"""A message handler: called with the frame's ``data``; may be a coroutine function."""

CONNECT_TIMEOUT: Final = 10.0
CLOSE_TIMEOUT: Final = 2.0
FLUSH_BATCH: Final = 500
"""Queued records sent between two compactions of the queue file."""
SKIPPED_OFFLINE: Final[frozenset[str]] = frozenset({FF_SNAPSHOT_SYNC})
"""Fire-and-forget methods dropped (not queued) while disconnected."""

#: The environment of ``clawlet exec-plane`` (seed §5).
ENV_USER_ID: Final = "USER_ID"
ENV_VM_TOKEN: Final = "VM_TOKEN"  # noqa: S105 (a variable name)
ENV_VM_TICKET: Final = "VM_TICKET"
ENV_CONTROL_PLANE_WS: Final = "CONTROL_PLANE_WS"

__all__ = ["FrameObserver", "safe_url"]  # re-exported: the exec plane imports them from here


def missing_vm_settings(settings: Settings) -> list[str]:
    """The variables ``clawlet exec-plane`` needs that ``settings`` lacks (``VM_TICKET`` is optional)."""
    required = {
        ENV_USER_ID: settings.vm_user_id,
        ENV_VM_TOKEN: settings.vm_token,
        ENV_CONTROL_PLANE_WS: settings.control_plane_ws,
    }
    return [name for name, value in required.items() if not (value or "").strip()]


class ControlPlaneUnavailable(ConnectionError):
    """No usable connection to the control plane: never connected, lost, unreachable after every
    reconnect attempt, or the client was closed."""


class ControlPlaneRefused(ControlPlaneUnavailable):
    """The control plane refused the connection (``code`` from its ``error`` frame, or
    ``http_<status>``/``closed``). ``final`` refusals are not retried."""

    def __init__(self, code: str, message: str, *, final: bool) -> None:
        self.code = code
        self.message = message
        self.final = final
        super().__init__(f"the control plane refused the connection: {code}: {message}")


def check_event_encoding(init: Mapping[str, Any]) -> None:
    """Refuse, for good, a control plane whose ``init`` names another ``sse_event`` encoding than
    this side's (:data:`~clawlet.cluster.protocol.INIT_EVENT_ENCODING`): it could not read the events."""
    theirs = init.get(INIT_EVENT_ENCODING)
    if theirs != EVENT_ENCODING:
        described = repr(theirs) if theirs else "none (an older clawlet)"
        raise ControlPlaneRefused(
            ERR_PROTOCOL_MISMATCH,
            f"the control plane reads events in encoding {described} and this execution plane sends "
            f"{EVENT_ENCODING!r}: run the same clawlet version on both",
            final=True,
        )


class RequestLost(ControlPlaneUnavailable):
    """The connection dropped and, after the reconnect, the control plane had no result for the
    request (``resume`` answered ``lost``). It may or may not have been carried out."""


class RequestTimeout(TimeoutError):
    """No response within the request timeout (the pending entry is gone)."""


class ControlPlaneError(Exception):
    """The control plane answered a request with ``error: {code, message}``."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")

    @classmethod
    def from_shape(cls, shape: ErrorShape) -> ControlPlaneError:
        return cls(shape["code"], shape["message"])


@dataclass(eq=False)
class _SessionHandlers:
    on_user_message: Handler
    on_cancel: Handler | None


@dataclass(eq=False)
class _Link:
    """What one connection to the control plane adds to the socket's: ``init`` and acknowledgements."""

    init: dict[str, Any]
    acks: bool
    """The control plane acknowledges heartbeats (``init``'s ``heartbeat_ack``)."""
    ack_waiters: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    resume_waiter: asyncio.Future[ResumeResponseFrame] | None = None


_Conn = Connection[_Link]


def connect_url(url: str, user_id: str, ticket: str | None = None) -> str:
    """``url`` with ``user_id`` (and ``ticket``) added to its query."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in (QUERY_USER_ID, QUERY_TICKET)]
    query.append((QUERY_USER_ID, user_id))
    if ticket:
        query.append((QUERY_TICKET, ticket))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


class ControlPlaneClient(SocketClient):
    """The execution plane's control-plane connection (see the module docstring). ``on_frame`` also
    sees ``("connect", {url})`` before each attempt; frames it sees are redacted (:func:`redact_frame`)."""

    def __init__(
        self,
        url: str,
        user_id: str,
        token: str,
        ticket: str | None = None,
        *,
        state_dir: Path | str,
        request_timeout: float = REQUEST_TIMEOUT,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        backoff: tuple[float, ...] | list[float] = RECONNECT_BACKOFF,
        on_frame: FrameObserver | None = None,
        on_start_session: Handler | None = None,
        on_stop_session: Handler | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        sse_buffer_limit: int = DEFAULT_SSE_BUFFER_LIMIT,
    ) -> None:
        if urlsplit(url).scheme not in ("ws", "wss"):
            raise ValueError(f"the control plane URL must be ws:// or wss:// (got {safe_url(url)!r})")
        if not user_id:
            raise ValueError("user_id is required")
        if not token:
            raise ValueError("the VM token is required")
        if not backoff or any(delay < 0 for delay in backoff):
            raise ValueError("backoff must be a non-empty list of non-negative delays")
        self.url = url
        self.user_id = user_id
        self._token = token
        self._ticket = ticket or None
        self.state_dir = Path(state_dir)
        self.request_timeout = request_timeout
        self.heartbeat_interval = heartbeat_interval
        self.backoff: tuple[float, ...] = tuple(backoff)
        self.connect_timeout = connect_timeout
        self.on_start_session = on_start_session
        self.on_stop_session = on_stop_session
        self.on_http: Callable[[Mapping[str, Any]], None] | None = None
        """Called in order, from the reader, with each ``http_request`` / ``http_cancel`` /
        ``http_resume`` frame (the tunnel: :class:`clawlet.execplane.tunnel.TunnelServer`)."""
        self.stream_id = uuid.uuid4().hex[:16]
        """Numbers this process's SSE events (``sse_event.stream``)."""
        self._socket = ReconnectingSocket[_Link](
            self._next_url,
            noun="control plane",
            handshake=self._handshake,
            on_frame=self._dispatch,
            decode=decode,
            encode=encode,
            unavailable=ControlPlaneUnavailable,
            errors=(ControlPlaneUnavailable,),
            schedule=lambda: self.backoff,
            retry_every=self.backoff[-1],
            # uncompressed: most frames are small events, and deflating each cost both planes
            # more CPU than the bytes it saved on loopback and LAN links
            limits=Limits(
                open_timeout=connect_timeout,
                close_timeout=CLOSE_TIMEOUT,
                max_size=MAX_FRAME_BYTES,
                compression=None,
            ),
            is_final=lambda exc: isinstance(exc, ControlPlaneRefused) and exc.final,
            refine=self._refusal,
            on_open=self._opened,
            on_lost=self._lost,
            redact=redact_frame,
            redact_observed=True,
            task_prefix="control-plane",
        )
        self._socket.observer = on_frame
        self._init_data: dict[str, Any] = {}
        self._close_called = False
        self._sessions: dict[str, _SessionHandlers] = {}
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        #: How each incoming frame type is handled (the reader calls one per frame; add types here).
        self._frame_handlers: dict[str, Callable[[_Conn, Any], None]] = {
            "response": self._on_response,
            "resume_response": self._on_resume_response,
            "user_message": self._on_session_message,
            "cancel": self._on_session_message,
            "start_session": self._on_machine_message,
            "stop_session": self._on_machine_message,
            "init": self._on_init,
            "error": self._on_error,
            "heartbeat": self._on_heartbeat,
            "http_request": self._on_http,
            "http_cancel": self._on_http,
            "http_resume": self._on_http,
        }
        self._queue = DiskQueue(self.state_dir / USAGE_QUEUE_FILE)
        self._ff_wakeup = asyncio.Event()
        self._pump_lock = asyncio.Lock()
        self._sse_lock = asyncio.Lock()
        self._sse_live = False
        self._sse_buffer: ReplayBuffer[SseEventFrame] = ReplayBuffer(sse_buffer_limit)
        self._sse_unconfirmed: deque[tuple[int, SseEventFrame]] = deque(maxlen=sse_buffer_limit)
        self._sse_sent = 0
        self._sse_seq: dict[str, int] = {}
        self._sse_drop_warned = False

    @classmethod
    def from_settings(
        cls, settings: Settings, *, state_dir: Path | str, **options: Any
    ) -> ControlPlaneClient:
        """A client configured by ``USER_ID``, ``VM_TOKEN``, ``VM_TICKET`` (optional: a restarted
        daemon has none left) and ``CONTROL_PLANE_WS`` (read into ``settings``); raises ``ValueError``
        naming what is missing."""
        missing = missing_vm_settings(settings)
        if missing:
            raise ValueError(f"missing environment variables: {', '.join(missing)}")
        return cls(
            (settings.control_plane_ws or "").strip(),
            (settings.vm_user_id or "").strip(),
            (settings.vm_token or "").strip(),
            (settings.vm_ticket or "").strip() or None,
            state_dir=state_dir,
            **options,
        )

    def __repr__(self) -> str:
        return (
            f"ControlPlaneClient(url={safe_url(self.url)!r}, user_id={self.user_id!r}, state={self.state!r})"
        )

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        return self._socket.state

    @property
    def _is_closed(self) -> bool:
        return self.state == "closed"

    @property
    def init_data(self) -> dict[str, Any]:
        """``init``'s ``data`` of the current (or last) connection (in memory only)."""
        return self._init_data

    @property
    def api_keys(self) -> dict[str, str]:
        """The provider API keys ``init`` sent (in memory only; never logged or written)."""
        keys = self._init_data.get("api_keys")
        return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict) else {}

    @property
    def pending_count(self) -> int:
        """Requests waiting for a response."""
        return len(self._socket.pending)

    @property
    def buffered_sse_events(self) -> int:
        return len(self._sse_buffer)

    @property
    def dropped_sse_events(self) -> int:
        return self._sse_buffer.dropped

    @property
    def queue_path(self) -> Path:
        return self._queue.path

    # -- lifecycle -----------------------------------------------------------------------------

    async def connect(self) -> dict[str, Any]:
        """Connect (one attempt) and return ``init``'s ``data``; see the module docstring."""
        if self._is_closed:
            raise ControlPlaneUnavailable("the control plane client is closed")
        if self._socket.started:
            raise RuntimeError("connect() was already called; the client reconnects by itself")
        await self._socket.connect()
        return self._init_data

    async def close(self) -> None:
        """Disconnect for good: stop reconnecting, fail waiting requests, stop handler tasks.

        The fire-and-forget queue file stays for the next client; buffered SSE events are dropped."""
        if self._close_called:
            return
        self._close_called = True
        await self._socket.close()
        handler_tasks = list(self._handler_tasks)
        for task in handler_tasks:
            task.cancel()
        await asyncio.gather(*handler_tasks, return_exceptions=True)
        dropped = self._sse_buffer.clear()
        if dropped:
            log.warning("discarding %d SSE events the client was closed before it could send", dropped)

    async def wait_closed(self) -> None:
        """Wait until the client stops for good (:meth:`close`, or a final refusal, which is raised)."""
        await self._socket.wait_closed()

    async def __aenter__(self) -> ControlPlaneClient:
        await self.connect()
        return self

    # -- sessions ------------------------------------------------------------------------------

    def register_session(
        self, session_id: str, on_user_message: Handler, on_cancel: Handler | None = None
    ) -> None:
        """Route ``user_message`` (and ``cancel``) frames of ``session_id`` to these handlers."""
        self._sessions[session_id] = _SessionHandlers(on_user_message, on_cancel)

    def unregister_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    @property
    def sessions(self) -> frozenset[str]:
        return frozenset(self._sessions)

    # -- requests ------------------------------------------------------------------------------

    async def request(self, session_id: str, method: str, /, **params: Any) -> Any:
        """Send ``request`` and return the response's ``result`` (see :meth:`call`)."""
        return await self.call(session_id, method, params)

    async def call(
        self,
        session_id: str,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send ``request`` and return the response's ``result``.

        Raises :class:`ControlPlaneUnavailable` at once when not connected (and later if the
        reconnect cycle gives up), :class:`RequestLost` when a reconnect lost it,
        :class:`ControlPlaneError` for an ``error`` answer and :class:`RequestTimeout` after
        ``timeout`` (default ``request_timeout``) seconds. A request in flight when the connection
        drops keeps waiting: the reconnect's ``resume`` settles it.
        """
        conn = self._socket.current
        if conn is None:
            raise ControlPlaneUnavailable(f"cannot send {method}: {self._unavailable_reason()}")
        limit = self.request_timeout if timeout is None else timeout
        request_id = str(uuid.uuid4())

        async def send() -> None:
            try:
                await conn.send(request_frame(request_id, session_id, method, params))
            except ConnectionClosed:
                log.info("the connection dropped while sending %s %s; waiting for resume", method, request_id)

        try:
            return await self._socket.pending.call(request_id, method, send, limit)
        except TimeoutError as exc:
            if isinstance(exc, RequestTimeout):
                raise
            raise RequestTimeout(f"the control plane did not answer {method} within {limit:g}s") from None

    async def get_skill_package(self, session_id: str, skill_id: str, version: str = "latest") -> Any:
        """A skill package the local cache lacks (fails while offline: the skill is unavailable)."""
        if not self.connected:
            raise ControlPlaneUnavailable(
                f"skill {skill_id!r} is not cached locally and cannot be fetched:"
                f" {self._unavailable_reason()}"
            )
        return await self.call(
            session_id, METHOD_GET_SKILL_PACKAGE, {"skill_id": skill_id, "version": version}
        )

    async def memory_search(self, session_id: str, query: str, top_k: int = 5) -> list[Any]:
        """Long-term memory hits; ``[]`` while the control plane is unreachable (degraded mode)."""
        if not self.connected:
            log.info("[degraded] long-term memory search skipped: %s", self._unavailable_reason())
            return []
        try:
            result = await self.call(session_id, METHOD_MEMORY_SEARCH, {"query": query, "top_k": top_k})
        except (ControlPlaneUnavailable, TimeoutError) as exc:
            log.warning("[degraded] long-term memory search failed, using no memories: %s", exc)
            return []
        if not isinstance(result, list):
            log.warning("memory_search answered %s, not a list; using no memories", type(result).__name__)
            return []
        return result

    async def mcp_call(
        self, session_id: str, server: str, tool: str, arguments: dict[str, Any] | None = None
    ) -> Any:
        """Call a remote MCP tool through the control plane; raises :class:`ControlPlaneUnavailable`
        while offline (the agent should plan without the tool)."""
        if not self.connected:
            raise ControlPlaneUnavailable(
                f"remote MCP tool {server}/{tool} is unavailable: {self._unavailable_reason()};"
                " continue without it"
            )
        params = {"server": server, "tool": tool, "arguments": dict(arguments or {})}
        return await self.call(session_id, METHOD_MCP_CALL, params)

    # -- fire-and-forget -----------------------------------------------------------------------

    async def fire_and_forget(self, session_id: str, method: str, /, **params: Any) -> None:
        """Send a record that needs no answer (see the module docstring): it is appended to the
        queue file first and sent from there. Never raises for connection or disk problems (they are
        logged); raises ``TypeError`` for params that are not JSON-serialisable."""
        frame = fire_and_forget_frame(uuid.uuid4().hex, session_id, method, params)
        encode(frame)  # not serialisable → TypeError now, not in the flush
        if method in SKIPPED_OFFLINE:
            conn = self._socket.current
            if conn is None:
                log.info("[degraded] %s skipped while the control plane is unreachable", method)
                return
            with contextlib.suppress(ConnectionClosed):
                await conn.send(frame)
            return
        try:
            await asyncio.to_thread(self._queue.append, frame)
        except OSError as exc:
            log.error("could not queue %s record %s in %s: %s", method, frame["id"], self._queue.path, exc)
            return
        self._ff_wakeup.set()
        if not self.connected:
            log.info("[degraded] queued %s record %s until the control plane is back", method, frame["id"])

    async def report_usage(
        self, session_id: str, model: str, tokens_in: int, tokens_out: int, **extra: Any
    ) -> None:
        await self.fire_and_forget(
            session_id, FF_USAGE_REPORT, model=model, tokens_in=tokens_in, tokens_out=tokens_out, **extra
        )

    async def log_audit(self, session_id: str, event: str, details: dict[str, Any] | None = None) -> None:
        await self.fire_and_forget(session_id, FF_AUDIT_LOG, event=event, details=dict(details or {}))

    # -- SSE -----------------------------------------------------------------------------------

    async def send_frame(self, frame: Mapping[str, Any]) -> bool:
        """Send ``frame`` now if connected; ``False`` (nothing kept) if not."""
        conn = self._socket.current
        if conn is None or conn.lost:
            return False
        try:
            await conn.send(frame)
        except Exception:
            log.debug("could not send a %s frame", frame.get("type"), exc_info=True)
            return False
        return True

    async def send_sse_event(self, session_id: str, data: Any) -> int:
        """Forward one SSE event of a session; buffered while disconnected. Returns its ``seq``."""
        seq = self._sse_seq.get(session_id, 0) + 1
        self._sse_seq[session_id] = seq
        frame = sse_event_frame(session_id, data, seq, self.stream_id)
        async with self._sse_lock:
            conn = self._socket.current
            if self._sse_live and conn is not None:
                try:
                    await conn.send(frame)
                except ConnectionClosed:
                    self._sse_live = False  # it may have arrived: the replay has the same seq
                else:
                    if not conn.lost:
                        self._sse_sent_unconfirmed(frame)
                        return seq
                    # lost while sending: replay it after the events the loss re-queued
            if not self._sse_buffer.append(frame) and not self._sse_drop_warned:
                self._sse_drop_warned = True
                log.warning(
                    "[degraded] SSE buffer full (%d events): dropping the oldest events",
                    self._sse_buffer.limit,
                )
        return seq

    # -- internals: connecting -----------------------------------------------------------------

    def _unavailable_reason(self) -> str:
        if self._is_closed:
            return "the control plane client is closed"
        if self.state == "offline":
            return f"control plane unreachable (offline; retrying every {self.backoff[-1]:g}s)"
        if self.state == "reconnecting":
            return "not connected to the control plane (reconnecting)"
        return "not connected to the control plane"

    def _next_url(self) -> str:
        """The URL of the next attempt: with the ticket until a server has seen it (``on_frame`` sees
        it as ``("connect", {url})``)."""
        if self._ticket:
            log.info("connecting with a ticket")
        url = connect_url(self.url, self.user_id, self._ticket)
        self._socket.observe("connect", {"url": url})
        return url

    def _refusal(self, exc: Exception) -> Exception | None:
        """A failed opening that is a refusal: HTTP 401/403, or a close with 4401 before ``init``."""
        if isinstance(exc, InvalidStatus):
            self._ticket = None  # the server saw it
            status = exc.response.status_code
            if status in (401, 403):
                return ControlPlaneRefused(
                    f"http_{status}", f"HTTP {status} from {safe_url(self.url)}", final=True
                )
        elif (
            isinstance(exc, ConnectionClosed) and exc.rcvd is not None and exc.rcvd.code == CLOSE_UNAUTHORIZED
        ):
            return ControlPlaneRefused("closed", f"closed before init ({close_description(exc)})", final=True)
        return None

    async def _handshake(self, wire: Wire) -> _Link:
        """``auth`` → ``init`` (checked): the control plane's side of opening a connection."""
        self._ticket = None  # single use: the server has it now, reconnects go without
        await wire.send(auth_frame(self._token))
        while True:
            frame = await wire.recv()
            if frame["type"] == "init":
                data: dict[str, Any] = frame["data"]
                check_event_encoding(data)
                return _Link(data, acks=data.get(INIT_HEARTBEAT_ACK) is True)
            if frame["type"] == "error":
                code = frame["error"]["code"]
                raise ControlPlaneRefused(code, frame["error"]["message"], final=code in REFUSAL_CODES)
            log.debug("ignoring a %s frame before init", frame["type"])

    def _opened(self, conn: _Conn) -> None:
        """A new connection: resume what waits (on a reconnect), replay SSE events, pump the queue."""
        self._init_data = conn.state.init
        conn.lines = self._init_data.get(INIT_FRAMES_PER_LINE) is True  # frames that pile up: one message
        if conn.number > 1:
            conn.spawn(self._resume(conn), "control-plane-resume")  # first: resume follows init
        conn.spawn(self._replay_sse(conn), "control-plane-sse-replay")
        conn.spawn(self._pump_queue(conn), "control-plane-queue-pump")
        conn.spawn(self._heartbeat(conn), "control-plane-heartbeat", stop_on_loss=True)
        keys = self._init_data.get("api_keys")
        providers = ", ".join(sorted(map(str, keys))) if isinstance(keys, dict) else "none"
        log.info(
            "connected to the control plane at %s (connection %d; API keys for: %s)",
            safe_url(self.url),
            conn.number,
            providers,
        )

    async def _resume(self, conn: _Conn) -> None:
        """Send ``resume`` with the ids still waiting and settle them from ``resume_response``."""
        waiting = self._socket.pending.waiting()
        waiter: asyncio.Future[ResumeResponseFrame] = asyncio.get_running_loop().create_future()
        conn.state.resume_waiter = waiter
        try:
            await conn.send(resume_frame(list(waiting)))
        except ConnectionClosed:
            return
        if not waiting:
            return  # nothing to settle: do not hold anything up waiting for the answer
        try:
            frame = await asyncio.wait_for(waiter, self.request_timeout)
        except TimeoutError:
            log.warning(
                "no resume_response within %gs; %d requests keep waiting for their own timeouts",
                self.request_timeout,
                len(waiting),
            )
            return
        except ControlPlaneUnavailable:
            return  # lost again: the next reconnect resumes them
        results = frame["results"]
        pending = self._socket.pending
        settled = {"completed": 0, "lost": 0, "pending": 0}
        for rid, method in waiting.items():
            result = results.get(rid)
            status = result["status"] if result is not None else "lost"
            if result is None or status == "lost":
                done = pending.fail(
                    rid,
                    RequestLost(
                        f"{method} request {rid} was lost while reconnecting to the control plane;"
                        " it may or may not have been carried out"
                    ),
                )
            elif status == "completed" and "error" in result:
                done = pending.fail(rid, ControlPlaneError.from_shape(result["error"]))
            elif status == "completed":
                done = pending.resolve(rid, result.get("data"))
            else:
                done = rid in pending.waiting()
            settled[status] += done
        log.info(
            "resumed %d requests: %d completed, %d lost, %d still pending",
            len(waiting),
            settled["completed"],
            settled["lost"],
            settled["pending"],
        )

    async def _replay_sse(self, conn: _Conn) -> None:
        """After a connect: replay buffered SSE events in order, then send new ones directly."""
        async with self._sse_lock:
            replayed = 0
            while self._sse_buffer and not conn.lost:
                frame = self._sse_buffer.peek()
                try:
                    await conn.send(frame)
                except ConnectionClosed:
                    return
                if conn.lost:
                    return  # the loss re-queued what this connection sent; this frame is still first
                self._sse_buffer.popleft()
                self._sse_sent_unconfirmed(frame)
                replayed += 1
            if conn.lost:
                return
            self._sse_live = True
            self._sse_drop_warned = False
        if replayed:
            log.info("replayed %d buffered SSE events", replayed)

    def _sse_sent_unconfirmed(self, frame: SseEventFrame) -> None:
        self._sse_sent += 1
        self._sse_unconfirmed.append((self._sse_sent, frame))

    def _confirm_sse(self, mark: int) -> None:
        """A pong arrived for a ping sent after event number ``mark``: those events arrived."""
        while self._sse_unconfirmed and self._sse_unconfirmed[0][0] <= mark:
            self._sse_unconfirmed.popleft()

    async def _pump_queue(self, conn: _Conn) -> None:
        """Send the fire-and-forget queue file over ``conn`` while it lasts: a batch of records,
        then a ping; only after its pong (the control plane's WebSocket received them) are they
        removed from the file. Wakes up whenever a record is appended."""
        first = True
        while not conn.lost:
            async with self._pump_lock:  # one pump at a time: offsets are only valid until a consume
                if conn.lost:
                    return
                self._ff_wakeup.clear()
                try:
                    batch = await asyncio.to_thread(self._queue.read, FLUSH_BATCH)
                    if batch.records:
                        if first:
                            log.info("flushing the fire-and-forget queue %s", self._queue.path)
                        first = False
                        if not await self._send_batch(conn, batch):
                            return
                        continue
                    first = False
                    if batch.end:
                        await asyncio.to_thread(self._queue.consume, batch.end)
                except OSError as exc:
                    log.error("cannot use the queue file %s: %s; retrying", self._queue.path, exc)
                    await asyncio.sleep(self.backoff[-1])
                    continue
            await self._ff_wakeup.wait()

    async def _send_batch(self, conn: _Conn, batch: QueueBatch) -> bool:
        sent = 0
        for record in batch.records:
            try:
                frame = parse_frame(record.data)
                if frame["type"] != FIRE_AND_FORGET:
                    raise FrameError(f"a {frame['type']} frame")
            except FrameError as exc:
                log.warning("dropping an unreadable queued record: %s", exc)
                continue
            try:
                await conn.send(frame)
            except ConnectionClosed:
                return False  # nothing of the batch is removed: all of it goes again (same ids)
            sent += 1
        try:
            await self._handled(conn, self.request_timeout)
        except ConnectionClosed:
            return False
        except TimeoutError:
            await conn.drop(
                f"no acknowledgement within {self.request_timeout:g}s after sending queued records",
                1011,
                "no pong",
            )
            return False
        await asyncio.to_thread(self._queue.consume, batch.end)
        log.debug("sent %d fire-and-forget records", sent)
        return True

    # -- internals: the open connection --------------------------------------------------------

    def _dispatch(self, conn: _Conn, frame: Any) -> None:
        handle = self._frame_handlers.get(frame["type"])
        if handle is None:
            log.debug("ignoring a %s frame from the control plane", frame["type"])
        else:
            handle(conn, frame)

    def _on_response(self, conn: _Conn, frame: ResponseFrame) -> None:
        pending = self._socket.pending
        if "error" in frame:
            settled = pending.fail(frame["id"], ControlPlaneError.from_shape(frame["error"]))
        else:
            settled = pending.resolve(frame["id"], frame["result"])
        if not settled:
            log.debug("response to an unknown or finished request %s", frame["id"])

    def _on_resume_response(self, conn: _Conn, frame: ResumeResponseFrame) -> None:
        waiter = conn.state.resume_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)
        else:
            log.debug("ignoring an unexpected resume_response")

    def _on_session_message(self, conn: _Conn, frame: UserMessageFrame | CancelFrame) -> None:
        kind, session_id = frame["type"], frame["session_id"]
        handlers = self._sessions.get(session_id)
        if handlers is None:
            log.warning("dropping %s for unknown session %s", kind, session_id)
            return
        handler = handlers.on_user_message if kind == "user_message" else handlers.on_cancel
        if handler is None:
            log.info("session %s has no %s handler; dropping it", session_id, kind)
        else:
            self._run_handler(f"{kind} handler of session {session_id}", handler, frame["data"])

    def _on_machine_message(self, conn: _Conn, frame: StartSessionFrame | StopSessionFrame) -> None:
        handler = self.on_start_session if frame["type"] == "start_session" else self.on_stop_session
        if handler is None:
            log.warning("no %s handler; dropping it for session %s", frame["type"], frame["session_id"])
        else:
            self._run_handler(f"{frame['type']} handler", handler, frame["data"])

    def _on_init(self, conn: _Conn, frame: InitFrame) -> None:
        self._init_data = frame["data"]
        log.info("the control plane sent new init data")

    def _on_error(self, conn: _Conn, frame: ErrorFrame) -> None:
        error = ControlPlaneError.from_shape(frame["error"])
        if not ("id" in frame and self._socket.pending.fail(frame["id"], error)):
            log.warning(
                "the control plane reported %s: %s", frame["error"]["code"], frame["error"]["message"]
            )

    def _on_http(self, conn: _Conn, frame: Mapping[str, Any]) -> None:
        if self.on_http is None:
            log.warning("no HTTP tunnel here; dropping a %s frame", frame["type"])
            return
        try:
            self.on_http(frame)
        except Exception:
            log.exception("the HTTP tunnel failed on a %s frame", frame["type"])

    def _on_heartbeat(self, conn: _Conn, frame: HeartbeatFrame) -> None:
        ack = conn.state.ack_waiters.get(frame.get("id", ""))
        if ack is not None and not ack.done():
            ack.set_result(None)

    def _run_handler(self, name: str, handler: Handler, data: dict[str, Any]) -> None:
        async def run() -> None:
            try:
                result = handler(data)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", name)

        task = asyncio.create_task(run(), name=name)
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    async def _heartbeat(self, conn: _Conn) -> None:
        while not conn.lost:
            await asyncio.sleep(self.heartbeat_interval)
            if conn.lost:
                return
            try:
                mark = self._sse_sent
                await self._handled(conn, self.heartbeat_interval, heartbeat=True)
            except ConnectionClosed:
                return
            except TimeoutError:
                log.debug("no acknowledgement within %gs", self.heartbeat_interval)
                continue
            if self._socket.current is conn:
                self._confirm_sse(mark)

    async def _handled(self, conn: _Conn, timeout: float, *, heartbeat: bool = False) -> None:
        """Return once the control plane has handled everything sent on ``conn`` so far: its
        answer to a heartbeat with an id (when ``init`` offered ``heartbeat_ack``), else a
        WebSocket pong (which only says the frames arrived). ``heartbeat``: send a plain heartbeat
        first when there is no acknowledgement to ask for. Raises ``ConnectionClosed`` (also when
        the connection is lost while waiting) or ``TimeoutError``."""
        if not conn.state.acks:
            if heartbeat:
                await conn.send(heartbeat_frame(time.time()))
            pong = await conn.ws.ping()
            await asyncio.wait_for(pong, timeout)
            return
        ack_id = uuid.uuid4().hex
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.state.ack_waiters[ack_id] = waiter
        try:
            await conn.send(heartbeat_frame(time.time(), ack_id))
            await asyncio.wait_for(waiter, timeout)
        finally:
            conn.state.ack_waiters.pop(ack_id, None)

    def _lost(self, conn: _Conn, reason: str) -> None:
        """``conn`` is lost: new sends queue/buffer, waiting requests keep waiting (for resume)."""
        self._sse_live = False
        # events sent since the last confirmed ping may not have arrived: replay them first
        # (the control plane drops the ones it has by seq)
        unconfirmed = [frame for _, frame in self._sse_unconfirmed]
        self._sse_unconfirmed.clear()
        if not self._close_called:
            self._sse_buffer.prepend(unconfirmed)
        waiter = conn.state.resume_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ControlPlaneUnavailable("the connection dropped during resume"))
            waiter.exception()  # retrieved: nobody may be waiting for it any more
        self._ff_wakeup.set()  # a queue pump waiting for records ends
        for ack in conn.state.ack_waiters.values():  # nothing sent on conn will be acknowledged now
            if not ack.done():
                ack.set_exception(ConnectionClosed(None, None))
                ack.exception()


class EventSink(Protocol):
    """What :func:`forward_event` needs of :class:`ControlPlaneClient`."""

    async def send_sse_event(self, session_id: str, data: Any) -> int: ...

    async def report_usage(
        self, session_id: str, model: str, tokens_in: int, tokens_out: int, **extra: Any
    ) -> None: ...


async def forward_event(sink: EventSink, session_id: str, event: Event, *, model: str) -> None:
    """Send ``event`` of ``session_id`` to the control plane as an ``sse_event`` (buffered while
    disconnected); a ``Usage`` with tokens also as a usage report (queued on disk meanwhile)."""
    await sink.send_sse_event(session_id, event_to_json(event))
    if isinstance(event, Usage) and (event.input_tokens or event.output_tokens):
        await sink.report_usage(session_id, model, event.input_tokens, event.output_tokens)
    elif isinstance(event, Title) and (event.input_tokens or event.output_tokens):
        await sink.report_usage(session_id, model, event.input_tokens, event.output_tokens, purpose="title")

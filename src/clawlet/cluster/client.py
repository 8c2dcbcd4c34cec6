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

Nothing reported is lost to a dropped connection (seed §10, details in :mod:`clawlet.cluster.offline`):

* fire-and-forget records (``report_usage``, ``log_audit``, ``submit_evolution``, …) are always
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
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException

from clawlet.cluster.offline import (
    DEFAULT_SSE_BUFFER_LIMIT,
    USAGE_QUEUE_FILE,
    DiskQueue,
    QueueBatch,
    ReplayBuffer,
)
from clawlet.cluster.protocol import (
    CLOSE_UNAUTHORIZED,
    ERR_PROTOCOL_MISMATCH,
    EVENT_ENCODING,
    FF_AUDIT_LOG,
    FF_EVOLUTION_SUBMIT,
    FF_SNAPSHOT_SYNC,
    FF_USAGE_REPORT,
    FIRE_AND_FORGET,
    HEARTBEAT_INTERVAL,
    INIT_EVENT_ENCODING,
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
    ErrorShape,
    Frame,
    FrameError,
    ResumeResponseFrame,
    SseEventFrame,
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

log = logging.getLogger(__name__)
#: websockets logs frames and the opening request at DEBUG (the ``auth`` frame holds the JWT, the
#: first URL the ticket); its logger for control-plane connections never goes below INFO.
_ws_log = logging.getLogger(f"{__name__}.websocket")
_ws_log.setLevel(logging.INFO)

ClientState = Literal["idle", "connected", "reconnecting", "offline", "closed"]
FrameObserver = Callable[[str, dict[str, Any]], None]
"""``on_frame(direction, frame)``: direction ``"in"``, ``"out"``, or ``"connect"`` (frame ``{url}``)."""
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
class _Pending:
    future: asyncio.Future[Any]
    method: str
    session_id: str


@dataclass(eq=False)
class _SessionHandlers:
    on_user_message: Handler
    on_cancel: Handler | None


@dataclass(eq=False)
class _Connection:
    ws: ClientConnection
    number: int
    reader: asyncio.Task[None] | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    resume_waiter: asyncio.Future[ResumeResponseFrame] | None = None
    lost: bool = False
    acks: bool = False
    """The control plane acknowledges heartbeats (``init``'s ``heartbeat_ack``)."""
    ack_waiters: dict[str, asyncio.Future[None]] = field(default_factory=dict)


def safe_url(url: str) -> str:
    """``url`` without its query (ticket) or credentials, for logs and error messages."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
    except ValueError:
        return "<invalid control plane url>"


def connect_url(url: str, user_id: str, ticket: str | None = None) -> str:
    """``url`` with ``user_id`` (and ``ticket``) added to its query."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in (QUERY_USER_ID, QUERY_TICKET)]
    query.append((QUERY_USER_ID, user_id))
    if ticket:
        query.append((QUERY_TICKET, ticket))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


class ControlPlaneClient:
    """The execution plane's control-plane connection (see the module docstring)."""

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
        self.on_frame = on_frame
        self.on_start_session = on_start_session
        self.on_stop_session = on_stop_session
        self.on_http: Callable[[Mapping[str, Any]], None] | None = None
        """Called in order, from the reader, with each ``http_request`` / ``http_cancel`` /
        ``http_resume`` frame (the tunnel: :class:`clawlet.cluster.tunnel.TunnelServer`)."""
        self.stream_id = uuid.uuid4().hex[:16]
        """Numbers this process's SSE events (``sse_event.stream``)."""
        self.connects = 0
        """Successful handshakes so far (the first connect and every reconnect)."""
        self.last_error: BaseException | None = None
        self._state: ClientState = "idle"
        self._init_data: dict[str, Any] = {}
        self._conn: _Connection | None = None
        self._manager: asyncio.Task[None] | None = None
        self._final_error: BaseException | None = None
        self._close_called = False
        self._pending: dict[str, _Pending] = {}
        self._sessions: dict[str, _SessionHandlers] = {}
        self._handler_tasks: set[asyncio.Task[Any]] = set()
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
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, state_dir: Path | str, **options: Any
    ) -> ControlPlaneClient:
        """A client configured by ``USER_ID``, ``VM_TOKEN``, ``VM_TICKET`` (optional: a restarted
        daemon has none left) and ``CONTROL_PLANE_WS``; raises ``ValueError`` naming what is missing."""
        env = os.environ if environ is None else environ
        required = (ENV_USER_ID, ENV_VM_TOKEN, ENV_CONTROL_PLANE_WS)
        missing = [name for name in required if not env.get(name, "").strip()]
        if missing:
            raise ValueError(f"missing environment variables: {', '.join(missing)}")
        return cls(
            env[ENV_CONTROL_PLANE_WS].strip(),
            env[ENV_USER_ID].strip(),
            env[ENV_VM_TOKEN].strip(),
            env.get(ENV_VM_TICKET, "").strip() or None,
            state_dir=state_dir,
            **options,
        )

    def __repr__(self) -> str:
        return (
            f"ControlPlaneClient(url={safe_url(self.url)!r}, user_id={self.user_id!r}, state={self._state!r})"
        )

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        return self._state

    @property
    def _is_closed(self) -> bool:
        return self._state == "closed"

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.lost

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
        return len(self._pending)

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
        if self._manager is not None:
            raise RuntimeError("connect() was already called; the client reconnects by itself")
        conn = await self._open()
        self._manager = asyncio.create_task(self._manage(conn), name="control-plane-manager")
        return self._init_data

    async def close(self) -> None:
        """Disconnect for good: stop reconnecting, fail waiting requests, stop handler tasks.

        The fire-and-forget queue file stays for the next client; buffered SSE events are dropped."""
        if self._close_called:
            return
        self._close_called = True
        self._state = "closed"
        error = ControlPlaneUnavailable("the control plane client was closed")
        manager, self._manager = self._manager, None
        if manager is not None and manager is not asyncio.current_task():
            manager.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await manager
        conn = self._conn
        if conn is not None:
            await self._shutdown(conn)
        self._fail_pending(error)
        handler_tasks = list(self._handler_tasks)
        for task in handler_tasks:
            task.cancel()
        await asyncio.gather(*handler_tasks, return_exceptions=True)
        dropped = self._sse_buffer.clear()
        if dropped:
            log.warning("discarding %d SSE events the client was closed before it could send", dropped)

    async def wait_closed(self) -> None:
        """Wait until the client stops for good (:meth:`close`, or a final refusal, which is raised)."""
        manager = self._manager
        if manager is not None:
            await asyncio.wait({manager})
        if self._final_error is not None:
            raise self._final_error

    async def __aenter__(self) -> ControlPlaneClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

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
        conn = self._conn
        if conn is None or conn.lost:
            raise ControlPlaneUnavailable(f"cannot send {method}: {self._unavailable_reason()}")
        limit = self.request_timeout if timeout is None else timeout
        request_id = str(uuid.uuid4())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(future, method, session_id)
        try:
            async with asyncio.timeout(limit):
                try:
                    await self._send(conn, request_frame(request_id, session_id, method, params))
                except ConnectionClosed:
                    log.info(
                        "the connection dropped while sending %s %s; waiting for resume", method, request_id
                    )
                return await future
        except TimeoutError as exc:
            if isinstance(exc, RequestTimeout):
                raise
            raise RequestTimeout(f"the control plane did not answer {method} within {limit:g}s") from None
        finally:
            self._pending.pop(request_id, None)

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
            conn = self._conn
            if conn is None or conn.lost:
                log.info("[degraded] %s skipped while the control plane is unreachable", method)
                return
            with contextlib.suppress(ConnectionClosed):
                await self._send(conn, frame)
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

    async def submit_evolution(self, session_id: str, skill_data: dict[str, Any]) -> None:
        await self.fire_and_forget(session_id, FF_EVOLUTION_SUBMIT, **skill_data)

    # -- SSE -----------------------------------------------------------------------------------

    async def send_frame(self, frame: Mapping[str, Any]) -> bool:
        """Send ``frame`` now if connected; ``False`` (nothing kept) if not."""
        conn = self._conn
        if conn is None or conn.lost:
            return False
        try:
            await self._send(conn, frame)
        except Exception:
            return False
        return True

    async def send_sse_event(self, session_id: str, data: Any) -> int:
        """Forward one SSE event of a session; buffered while disconnected. Returns its ``seq``."""
        seq = self._sse_seq.get(session_id, 0) + 1
        self._sse_seq[session_id] = seq
        frame = sse_event_frame(session_id, data, seq, self.stream_id)
        async with self._sse_lock:
            conn = self._conn
            if self._sse_live and conn is not None and not conn.lost:
                try:
                    await self._send(conn, frame)
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
        if self._state == "offline":
            return f"control plane unreachable (offline; retrying every {self.backoff[-1]:g}s)"
        if self._state == "reconnecting":
            return "not connected to the control plane (reconnecting)"
        return "not connected to the control plane"

    async def _open(self) -> _Connection:
        """One connection attempt: socket (ticket in the URL at most once), ``auth``, ``init``."""
        ticket = self._ticket
        url = connect_url(self.url, self.user_id, ticket)
        where = safe_url(self.url)
        self._emit("connect", {"url": url})
        log.info("connecting to the control plane at %s%s", where, " with a ticket" if ticket else "")
        try:
            ws = await connect(
                url,
                open_timeout=self.connect_timeout,
                close_timeout=CLOSE_TIMEOUT,
                max_size=MAX_FRAME_BYTES,
                logger=_ws_log,
            )
        except InvalidURI:
            raise ControlPlaneUnavailable(f"invalid control plane URL {where!r}") from None
        except InvalidStatus as exc:
            self._ticket = None  # the server saw it
            status = exc.response.status_code
            if status in (401, 403):
                raise ControlPlaneRefused(
                    f"http_{status}", f"HTTP {status} from {where}", final=True
                ) from None
            raise ControlPlaneUnavailable(f"the control plane at {where} answered HTTP {status}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ControlPlaneUnavailable(f"cannot connect to the control plane at {where}: {exc}") from None
        self._ticket = None  # single use: the server has it now, reconnects go without
        try:
            await self._send_ws(ws, auth_frame(self._token))
            data = await asyncio.wait_for(self._await_init(ws), self.connect_timeout)
            check_event_encoding(data)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await ws.close()
            if isinstance(exc, TimeoutError):
                raise ControlPlaneUnavailable(
                    f"the control plane at {where} sent no init within {self.connect_timeout:g}s"
                ) from None
            if isinstance(exc, ConnectionClosed):
                frame = exc.rcvd
                code = frame.code if frame is not None else None
                reason = (
                    f"code {code}{f' ({frame.reason})' if frame and frame.reason else ''}"
                    if code
                    else "no close frame"
                )
                if code == CLOSE_UNAUTHORIZED:
                    raise ControlPlaneRefused(
                        "closed", f"closed before init ({reason})", final=True
                    ) from None
                raise ControlPlaneUnavailable(
                    f"the control plane at {where} closed the connection before init ({reason})"
                ) from None
            raise
        self.connects += 1
        conn = _Connection(ws, self.connects)
        self._conn = conn
        self._init_data = data
        conn.acks = data.get(INIT_HEARTBEAT_ACK) is True
        self._state = "connected"
        self.last_error = None
        conn.reader = asyncio.create_task(self._read(conn), name="control-plane-reader")
        self._spawn_for(conn, self._heartbeat(conn), "control-plane-heartbeat")
        keys = data.get("api_keys")
        providers = ", ".join(sorted(map(str, keys))) if isinstance(keys, dict) else "none"
        log.info(
            "connected to the control plane at %s (connection %d; API keys for: %s)",
            where,
            conn.number,
            providers,
        )
        return conn

    async def _await_init(self, ws: ClientConnection) -> dict[str, Any]:
        while True:
            frame = await self._recv(ws)
            if frame is None:
                continue
            if frame["type"] == "init":
                return frame["data"]
            if frame["type"] == "error":
                code = frame["error"]["code"]
                raise ControlPlaneRefused(code, frame["error"]["message"], final=code in REFUSAL_CODES)
            log.debug("ignoring a %s frame before init", frame["type"])

    async def _recv(self, ws: ClientConnection) -> Frame | None:
        raw = await ws.recv()
        try:
            frame = decode(raw)
        except FrameError as exc:
            log.warning("ignoring a bad frame from the control plane: %s", exc)
            return None
        self._emit("in", redact_frame(frame))
        return frame

    async def _manage(self, conn: _Connection | None) -> None:
        """Serve each connection until it drops, then reconnect; stop on close or a final refusal."""
        resume = False
        try:
            while conn is not None:
                await self._serve(conn, resume=resume)
                if self._is_closed:
                    return
                resume = True
                conn = await self._reconnect()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, not a network failure: stop and say why
            log.exception("the control plane connection manager failed")
            self._stop_for_good(
                ControlPlaneUnavailable(f"the control plane connection manager failed: {exc}")
            )

    async def _serve(self, conn: _Connection, *, resume: bool) -> None:
        self._spawn_for(conn, self._replay_sse(conn), "control-plane-sse-replay")
        self._spawn_for(conn, self._pump_queue(conn), "control-plane-queue-pump")
        if resume:
            await self._resume(conn)
        if conn.reader is not None:
            await asyncio.wait({conn.reader})

    async def _reconnect(self) -> _Connection | None:
        if self._state != "closed":
            self._state = "reconnecting"
        last: BaseException | None = None
        for attempt, delay in enumerate(self.backoff, start=1):
            log.info(
                "reconnecting to the control plane in %gs (attempt %d/%d)", delay, attempt, len(self.backoff)
            )
            conn, last = await self._attempt(delay)
            if conn is not None or self._is_closed:
                return conn
            log.warning("reconnect attempt %d/%d failed: %s", attempt, len(self.backoff), last)
        error = ControlPlaneUnavailable(
            f"control plane unreachable: gave up after {len(self.backoff)} reconnect attempts"
            f" over {sum(self.backoff):g}s ({last})"
        )
        self.last_error = error
        self._state = "offline"
        failed = self._fail_pending(error)
        log.error(
            "%s; failed %d waiting requests; requests fail fast while offline; retrying every %gs",
            error,
            failed,
            self.backoff[-1],
        )
        while True:
            conn, last = await self._attempt(self.backoff[-1])
            if conn is not None or self._is_closed:
                return conn
            log.info("control plane still unreachable: %s", last)

    async def _attempt(self, delay: float) -> tuple[_Connection | None, BaseException | None]:
        await asyncio.sleep(delay)
        if self._is_closed:
            return None, None
        try:
            return await self._open(), None
        except ControlPlaneRefused as exc:
            self.last_error = exc
            if exc.final:
                log.error("%s; not reconnecting", exc)
                self._stop_for_good(exc)
            return None, exc
        except ControlPlaneUnavailable as exc:
            self.last_error = exc
            return None, exc

    def _stop_for_good(self, error: BaseException) -> None:
        self._final_error = error
        self.last_error = error
        self._state = "closed"
        self._fail_pending(error)

    async def _resume(self, conn: _Connection) -> None:
        """Send ``resume`` with the ids still waiting and settle them from ``resume_response``."""
        ids = [rid for rid, pending in self._pending.items() if not pending.future.done()]
        waiter: asyncio.Future[ResumeResponseFrame] = asyncio.get_running_loop().create_future()
        conn.resume_waiter = waiter
        try:
            await self._send(conn, resume_frame(ids))
        except ConnectionClosed:
            return
        if not ids:
            return  # nothing to settle: do not hold anything up waiting for the answer
        try:
            frame = await asyncio.wait_for(waiter, self.request_timeout)
        except TimeoutError:
            log.warning(
                "no resume_response within %gs; %d requests keep waiting for their own timeouts",
                self.request_timeout,
                len(ids),
            )
            return
        except ControlPlaneUnavailable:
            return  # lost again: the next reconnect resumes them
        results = frame["results"]
        settled = {"completed": 0, "lost": 0, "pending": 0}
        for rid in ids:
            pending = self._pending.get(rid)
            if pending is None or pending.future.done():
                continue
            result = results.get(rid)
            status = result["status"] if result is not None else "lost"
            settled[status] += 1
            if result is None or status == "lost":
                pending.future.set_exception(
                    RequestLost(
                        f"{pending.method} request {rid} was lost while reconnecting to the control plane;"
                        " it may or may not have been carried out"
                    )
                )
            elif status == "completed":
                if "error" in result:
                    pending.future.set_exception(ControlPlaneError.from_shape(result["error"]))
                else:
                    pending.future.set_result(result.get("data"))
        log.info(
            "resumed %d requests: %d completed, %d lost, %d still pending",
            len(ids),
            settled["completed"],
            settled["lost"],
            settled["pending"],
        )

    async def _replay_sse(self, conn: _Connection) -> None:
        """After a connect: replay buffered SSE events in order, then send new ones directly."""
        async with self._sse_lock:
            replayed = 0
            while self._sse_buffer and not conn.lost:
                frame = self._sse_buffer.peek()
                try:
                    await self._send(conn, frame)
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

    async def _pump_queue(self, conn: _Connection) -> None:
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

    async def _send_batch(self, conn: _Connection, batch: QueueBatch) -> bool:
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
                await self._send(conn, frame)
            except ConnectionClosed:
                return False  # nothing of the batch is removed: all of it goes again (same ids)
            sent += 1
        try:
            await self._handled(conn, self.request_timeout)
        except ConnectionClosed:
            return False
        except TimeoutError:
            log.warning(
                "no acknowledgement within %gs after sending queued records; dropping the connection",
                self.request_timeout,
            )
            with contextlib.suppress(Exception):
                await conn.ws.close(1011, "no pong")
            return False
        await asyncio.to_thread(self._queue.consume, batch.end)
        log.debug("sent %d fire-and-forget records", sent)
        return True

    # -- internals: the open connection --------------------------------------------------------

    def _spawn_for(self, conn: _Connection, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        conn.tasks.add(task)
        task.add_done_callback(self._task_done(conn))

    @staticmethod
    def _task_done(conn: _Connection) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            conn.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("%s failed", task.get_name(), exc_info=task.exception())

        return done

    async def _read(self, conn: _Connection) -> None:
        reason = "connection closed"
        try:
            while True:
                raw = await conn.ws.recv()
                try:
                    self._dispatch(conn, raw)
                except Exception:
                    log.exception("failed to handle a control plane frame; ignoring it")
        except ConnectionClosed as exc:
            frame = exc.rcvd
            reason = f"closed with code {frame.code}" if frame is not None else "closed without a close frame"
        except Exception as exc:  # the reader must end cleanly whatever happens
            log.exception("control plane reader failed")
            reason = f"reader failed: {exc}"
        finally:
            self._lost(conn, reason)

    def _dispatch(self, conn: _Connection, raw: str | bytes) -> None:
        try:
            frame = decode(raw)
        except FrameError as exc:
            log.warning("ignoring a bad frame from the control plane: %s", exc)
            return
        self._emit("in", redact_frame(frame))
        if frame["type"] == "response":
            pending = self._pending.get(frame["id"])
            if pending is None or pending.future.done():
                log.debug("response to an unknown or finished request %s", frame["id"])
            elif "error" in frame:
                pending.future.set_exception(ControlPlaneError.from_shape(frame["error"]))
            else:
                pending.future.set_result(frame["result"])
        elif frame["type"] == "resume_response":
            waiter = conn.resume_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
            else:
                log.debug("ignoring an unexpected resume_response")
        elif frame["type"] == "user_message" or frame["type"] == "cancel":
            handlers = self._sessions.get(frame["session_id"])
            handler = None
            if handlers is not None:
                handler = handlers.on_user_message if frame["type"] == "user_message" else handlers.on_cancel
            if handlers is None:
                log.warning("dropping %s for unknown session %s", frame["type"], frame["session_id"])
            elif handler is None:
                log.info("session %s has no %s handler; dropping it", frame["session_id"], frame["type"])
            else:
                self._run_handler(
                    f"{frame['type']} handler of session {frame['session_id']}", handler, frame["data"]
                )
        elif frame["type"] == "start_session" or frame["type"] == "stop_session":
            vm_handler = self.on_start_session if frame["type"] == "start_session" else self.on_stop_session
            if vm_handler is None:
                log.warning("no %s handler; dropping it for session %s", frame["type"], frame["session_id"])
            else:
                self._run_handler(f"{frame['type']} handler", vm_handler, frame["data"])
        elif frame["type"] == "init":
            self._init_data = frame["data"]
            log.info("the control plane sent new init data")
        elif frame["type"] == "error":
            pending = self._pending.get(frame["id"]) if "id" in frame else None
            if pending is not None and not pending.future.done():
                pending.future.set_exception(ControlPlaneError.from_shape(frame["error"]))
            else:
                log.warning(
                    "the control plane reported %s: %s", frame["error"]["code"], frame["error"]["message"]
                )
        elif frame["type"] in ("http_request", "http_cancel", "http_resume"):
            if self.on_http is None:
                log.warning("no HTTP tunnel here; dropping a %s frame", frame["type"])
            else:
                try:
                    self.on_http(frame)
                except Exception:
                    log.exception("the HTTP tunnel failed on a %s frame", frame["type"])
        elif frame["type"] == "heartbeat":
            ack = conn.ack_waiters.get(frame.get("id", ""))
            if ack is not None and not ack.done():
                ack.set_result(None)
        else:
            log.debug("ignoring a %s frame from the control plane", frame["type"])

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

    async def _heartbeat(self, conn: _Connection) -> None:
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
            if self._conn is conn:
                self._confirm_sse(mark)

    async def _handled(self, conn: _Connection, timeout: float, *, heartbeat: bool = False) -> None:
        """Return once the control plane has handled everything sent on ``conn`` so far: its
        answer to a heartbeat with an id (when ``init`` offered ``heartbeat_ack``), else a
        WebSocket pong (which only says the frames arrived). ``heartbeat``: send a plain heartbeat
        first when there is no acknowledgement to ask for. Raises ``ConnectionClosed`` (also when
        the connection is lost while waiting) or ``TimeoutError``."""
        if not conn.acks:
            if heartbeat:
                await self._send(conn, heartbeat_frame(time.time()))
            pong = await conn.ws.ping()
            await asyncio.wait_for(pong, timeout)
            return
        ack_id = uuid.uuid4().hex
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.ack_waiters[ack_id] = waiter
        try:
            await self._send(conn, heartbeat_frame(time.time(), ack_id))
            await asyncio.wait_for(waiter, timeout)
        finally:
            conn.ack_waiters.pop(ack_id, None)

    async def _send(self, conn: _Connection, frame: Any) -> None:
        await self._send_ws(conn.ws, frame)

    async def _send_ws(self, ws: ClientConnection, frame: Any) -> None:
        self._emit("out", redact_frame(frame))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("control plane <- %s", encode(redact_frame(frame))[:500])
        await ws.send(encode(frame))

    def _emit(self, direction: str, frame: dict[str, Any]) -> None:
        if self.on_frame is None:
            return
        try:
            self.on_frame(direction, frame)
        except Exception:
            log.exception("on_frame callback failed")

    def _lost(self, conn: _Connection, reason: str) -> None:
        """Mark ``conn`` lost (idempotent): new sends queue/buffer, waiting requests keep waiting."""
        if conn.lost:
            return
        conn.lost = True
        if self._conn is conn:
            self._conn = None
            self._sse_live = False
            # events sent since the last confirmed ping may not have arrived: replay them first
            # (the control plane drops the ones it has by seq)
            unconfirmed = [frame for _, frame in self._sse_unconfirmed]
            self._sse_unconfirmed.clear()
            if not self._close_called:
                self._sse_buffer.prepend(unconfirmed)
            if self._state != "closed":
                self._state = "reconnecting"
                log.warning(
                    "lost the connection to the control plane (%s); %d requests waiting",
                    reason,
                    len(self._pending),
                )
        waiter = conn.resume_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ControlPlaneUnavailable("the connection dropped during resume"))
            waiter.exception()  # retrieved: nobody may be waiting for it any more
        self._ff_wakeup.set()  # a queue pump waiting for records ends
        for ack in conn.ack_waiters.values():  # nothing sent on conn will be acknowledged now
            if not ack.done():
                ack.set_exception(ConnectionClosed(None, None))
                ack.exception()
        current = asyncio.current_task()
        for task in list(conn.tasks):
            if task is not current and task.get_name() == "control-plane-heartbeat":
                task.cancel()

    async def _shutdown(self, conn: _Connection) -> None:
        self._lost(conn, "client closed")
        with contextlib.suppress(Exception):
            await conn.ws.close()
        tasks = [t for t in (conn.reader, *conn.tasks) if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _fail_pending(self, error: BaseException) -> int:
        failed = 0
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(error)
                failed += 1
        return failed

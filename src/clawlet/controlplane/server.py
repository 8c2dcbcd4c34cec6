"""The control plane (seed 001 §3.1, §5, §10): execution planes connect here, sessions are routed here.

:class:`ControlPlane` is the service; :func:`create_control_plane_app` puts it in a FastAPI app
serving the ``/ws/vm`` WebSocket of :mod:`clawlet.cluster.protocol` (the other side is
:class:`clawlet.execplane.client.ControlPlaneClient`).

**Connecting.** An execution plane opens ``/ws/vm?user_id=<id>[&ticket=<ticket>]`` and must send
``auth {token}`` within ``auth_timeout`` seconds. The JWT is verified (PyJWT, HS256 pinned, every
claim required; ``sub`` must be the URL's ``user_id``); a ticket in the URL is redeemed once, for
that user, within its 30 s (tickets live in the database: :class:`~clawlet.controlplane.db.SqlTicketBackend`);
no ticket means a reconnect, authenticated by the JWT alone. The user must exist and not be
disabled. Then ``init {user_id, org_id?, api_keys, vm_id, heartbeat_ack, event_encoding}`` goes
out. Every refusal is an ``error``
frame with a code of :data:`~clawlet.cluster.protocol.REFUSAL_CODES` and a close with 4401; the
log names the user and the reason, never the token or the ticket (uvicorn's own line with the URL
gets its ticket masked by :class:`TicketRedactingFilter`, and so do websockets' DEBUG lines of
``auth`` frames their token).

**One connection per user.** A new authenticated connection replaces the user's previous one (which
is closed with :data:`CLOSE_REPLACED`). Heartbeats update the VM's ``last_seen``.

**Requests** (``get_skill_package``, ``memory_search``, ``mcp_call``, plus any registered with
:meth:`ControlPlane.register_method`) run as tasks that outlive the connection they came on: the
``response`` goes to the user's *current* connection when the request finishes, on whichever
instance holds it then (through the broker). Requests are recorded in the database
(``request_outcomes``): the instance that runs one claims it first (a request another instance has
claimed, or finished, is not run again: the finished one's outcome is sent), and every outcome is kept
there for ``result_ttl`` seconds. So ``resume`` after a reconnect, to this instance or any other,
answers ``completed`` (with ``data`` or ``error``), ``pending`` (still running, here or on another
instance: the ``response`` follows on the new connection) or ``lost`` (never seen, or its outcome
expired; recorded too, so that a frame of it arriving late at some instance is not run). A request
is carried out at most once, and its answer reaches the execution plane by the ``response`` or by a
later ``resume``. A request claimed by an instance that died before finishing
it stays ``pending`` until its record expires (``result_ttl`` after it started): the execution plane
fails it at its own request timeout. On the instance that runs it, a request leaves the running set
only once its outcome is stored, with no await between, so a ``resume`` there sees one of them.

**Fire-and-forget** records are stored de-duplicated by ``(user_id, id)`` (the client delivers at
least once); ``snapshot_sync`` upserts, and so does ``transcript_sync`` (the latest transcript of
each session). **SSE events** go to the durable event log (:mod:`clawlet.controlplane.event_log`),
de-duplicated by ``(stream, session_id, seq)`` — an event whose ``seq`` is not above the last
stored for its ``(stream, session)`` is dropped; one the database cannot take now (unreachable or
busy) closes the connection, so the execution plane sends it again — and are then published, in
order, to :meth:`ControlPlane.subscribe`, as they came: clawlet events in their JSON encoding
(:mod:`clawlet.controlplane.seed_events`) — on this instance at once, on the others through a
notice on the broker and a read of the shared log (:mod:`clawlet.controlplane.event_feed`). A
subscriber gets the log's events after the ``n`` it names, then the live ones, each once; the log
is pruned to ``event_log_max_events`` per session and drops a
session's events ``event_log_max_age`` seconds after its last one.

**Isolation.** Everything an execution plane sends is attributed to the user its JWT names. A
session belongs to the user who started it (the ``sessions`` table); the routing API
(:meth:`start_session`, :meth:`send_user_message`, :meth:`cancel`, :meth:`stop_session`,
:meth:`subscribe`) refuses another user's session with :class:`SessionForbidden`, and an execution
plane's events, records and requests for another user's session are dropped or refused. Memory
search, MCP servers and private skill packages are looked up for the connection's user only.

The async methods must run on the event loop that serves the WebSocket (the app's loop). The admin
helpers (:meth:`create_user`, :meth:`issue_vm_credentials`, …) are synchronous and may block briefly
on the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias, cast
from urllib.parse import urlsplit, urlunsplit

import uvicorn
from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketState

from clawlet.cluster.protocol import (
    AUTH,
    AUTH_TIMEOUT,
    CLOSE_UNAUTHORIZED,
    ERR_AUTH_REQUIRED,
    ERR_BAD_FRAME,
    ERR_FORBIDDEN,
    ERR_INTERNAL,
    ERR_TICKET_REJECTED,
    ERR_TOKEN_INVALID,
    ERR_UNKNOWN_METHOD,
    EVENT_ENCODING,
    FF_AUDIT_LOG,
    FF_EVOLUTION_SUBMIT,
    FF_SNAPSHOT_SYNC,
    FF_TRANSCRIPT_SYNC,
    FF_USAGE_REPORT,
    HTTP_REQUEST,
    INIT_EVENT_ENCODING,
    INIT_FRAMES_PER_LINE,
    INIT_HEARTBEAT_ACK,
    MAX_FRAME_BYTES,
    METHOD_GET_SKILL_PACKAGE,
    METHOD_MCP_CALL,
    METHOD_MEMORY_SEARCH,
    QUERY_TICKET,
    QUERY_USER_ID,
    REQUEST_TIMEOUT,
    TICKET_TTL_SECONDS,
    WS_PATH,
    FireAndForgetFrame,
    FrameError,
    RequestFrame,
    ResumeFrame,
    ResumeResult,
    SseEventFrame,
    cancel_frame,
    completed,
    completed_with_error,
    decode,
    encode,
    error_frame,
    error_response_frame,
    heartbeat_frame,
    init_frame,
    lost,
    response_frame,
    resume_response_frame,
    split_lines,
    start_session_frame,
    still_pending,
    stop_session_frame,
    user_message_frame,
)
from clawlet.controlplane.auth import (
    MIN_SECRET_BYTES,
    TicketRejected,
    TicketStore,
    TokenRejected,
    issue_vm_token,
    verify_vm_token,
)
from clawlet.controlplane.broker import Broker, BrokerUnavailable, broker_from_url
from clawlet.controlplane.db import (
    ControlPlaneStore,
    RequestOutcome,
    SessionRecord,
    SkillPackageRecord,
    SqlTicketBackend,
    UnknownUser,
    UserRecord,
    default_database_url,
    now_ms,
)
from clawlet.controlplane.event_feed import CATCH_UP_SECONDS, EventNotices, session_channel
from clawlet.controlplane.event_log import READ_PAGE, Appended, EventLog, InvalidTranscript, LogUnavailable
from clawlet.controlplane.event_log import SessionEvent as SessionEvent  # re-exported: what subscribers get
from clawlet.controlplane.routing import TunnelRouter
from clawlet.controlplane.userdata import (
    ERR_INVALID_PARAMS,
    ERR_NOT_FOUND,
    MAX_TOP_K,
    LongTermMemory,
    McpCallError,
    UserMcpServers,
    check_user_id,
    import_legacy_files,
)
from clawlet.execplane.skill_cache import (
    LATEST,
    SKILL_MD,
    SkillUnavailable,
    parse_package,
    validate_skill_id,
)
from clawlet.logs import swallowed
from clawlet.memory.embeddings import EmbeddingClient
from clawlet.serving import uvicorn_options
from clawlet.skills.scanner import SkillError, skill_summary

log = logging.getLogger(__name__)

CLOSE_REPLACED: Final = 4000
"""Close code for a connection replaced by a newer one of the same user."""
CLOSE_DISCONNECTED: Final = 1012
"""Close code of :meth:`ControlPlane.disconnect_exec_plane` (the client reconnects)."""
CLOSE_GOING_AWAY: Final = 1001
CLOSE_INTERNAL_ERROR: Final = 1011
DEFAULT_VM_TOKEN_TTL: Final = 30 * 24 * 3600.0
"""A VM token must outlive the VM: the execution plane reconnects with it, never with a new one."""
MAX_LOGGED_ID: Final = 64
CACHE_DIR: Final = "cache"
"""``<data_dir>/cache/<user_id>/``: what this instance derives from the database for a user (the
index of their memory) and their MCP servers' working directory (:mod:`clawlet.controlplane.userdata`)."""


# -- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlPlaneConfig:
    """What a control plane needs; only ``data_dir`` and ``jwt_secret`` have no default."""

    data_dir: Path
    jwt_secret: str
    """HS256 key of the VM tokens (at least 32 bytes)."""
    database_url: str | None = None
    """Default ``sqlite:///<data_dir>/controlplane.db``; ``postgresql+psycopg://…`` works too."""
    redis_url: str | None = None
    """The broker shared by every instance (``CLAWLET_REDIS_URL``, ``redis://…``); ``None``: in-process
    (one instance). See :mod:`clawlet.controlplane.broker`."""
    public_url: str = "ws://127.0.0.1:8002"
    """Where execution planes reach this control plane (``ws``/``wss``, or ``http``/``https``)."""
    vm_token_ttl: float = DEFAULT_VM_TOKEN_TTL
    ticket_ttl: float = TICKET_TTL_SECONDS
    auth_timeout: float = AUTH_TIMEOUT
    result_ttl: float = 2 * REQUEST_TIMEOUT
    """How long a request's outcome (and the record that an instance runs it) is kept for ``resume``."""
    event_log_max_events: int = 10_000
    """Events the event log keeps per session (the oldest go first)."""
    event_log_max_age: float = 30 * 24 * 3600.0
    """Seconds after a session's last event that its events are dropped from the log."""
    event_log_prune_interval: float = 600.0
    """Seconds between two prunings of the event log (and of expired request outcomes)."""
    subscriber_buffer: int = 10_000
    """Live events a subscriber may fall behind by; beyond, it reads them from the event log."""
    event_catch_up: float = CATCH_UP_SECONDS
    """Silence on a watched session's broker channel after which the log's counter is read (makes
    up for a notice the broker lost; :mod:`clawlet.controlplane.event_feed`)."""
    mcp_timeout: float = 50.0
    clock: Callable[[], float] = time.time
    """Wall clock of tickets (injectable for tests)."""
    embedder: EmbeddingClient | None = None
    """Vectors for long-term memory search (keyword search works without)."""

    @property
    def ws_url(self) -> str:
        """The ``/ws/vm`` URL handed to execution planes."""
        parts = urlsplit(self.public_url)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        if scheme not in ("ws", "wss"):
            raise ValueError(
                f"public_url must be ws://, wss://, http:// or https:// (got {self.public_url!r})"
            )
        return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or default_database_url(self.data_dir)


DEFAULT_RUNTIME_TYPE: Final = "semigraph"
USER_TOKEN_PREFIX: Final = "clu_"  # noqa: S105 (a prefix, not a secret)
"""Every user API token starts with this (tells them apart from VM tokens and other secrets)."""


def resolve_runtime_type(*, session: Any = None, agent: Any = None, user: Any = None, org: Any = None) -> str:
    """Seed 001's precedence: the session's ``runtime_type``, else the agent's, else the user's
    default, else the organisation's, else ``semigraph`` (clawlet's engine). Blank values are skipped."""
    for value in (session, agent, user, org):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return DEFAULT_RUNTIME_TYPE


MODEL_KEYS: Final = ("model", "provider", "base_url")
"""The model settings of a session, agent, user or organisation (``model``: ``name`` or
``provider/name``; ``provider`` and ``base_url`` optional). They travel together: the level that
names a model gives all three."""


def resolve_model_settings(
    *, session: Any = None, agent: Any = None, user: Any = None, org: Any = None
) -> dict[str, str]:
    """The model settings of the first level (session, agent, user, organisation, as
    :func:`resolve_runtime_type`) that names a ``model``; ``{}`` when none does: the execution plane
    then uses its own model (its ``CLAWLET_LLM_*`` settings)."""
    for value in (session, agent, user, org):
        if isinstance(value, Mapping) and isinstance(value.get("model"), str) and value["model"].strip():
            return {
                key: value[key].strip()
                for key in MODEL_KEYS
                if isinstance(value.get(key), str) and value[key].strip()
            }
    return {}


def check_model_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """``settings`` as stored model settings (blank values dropped); ``ValueError`` for an unknown
    key, a non-string value, settings without a ``model`` or a ``base_url`` that is not http(s)."""
    unknown = sorted(set(settings) - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"unknown model settings {unknown} (known: {', '.join(MODEL_KEYS)})")
    if any(value is not None and not isinstance(value, str) for value in settings.values()):
        raise ValueError("model settings are strings")
    checked = {k: v.strip() for k, v in settings.items() if isinstance(v, str) and v.strip()}
    if checked and "model" not in checked:
        raise ValueError("model settings need a model (a provider or base URL alone names no model)")
    base_url = checked.get("base_url")
    if base_url is not None and urlsplit(base_url).scheme not in ("http", "https"):
        raise ValueError(f"base_url must be an http:// or https:// URL (got {base_url!r})")
    return checked


def session_key(user_id: str, session_id: str) -> str:
    """The control plane's id of ``user_id``'s session ``session_id`` (the one its execution plane
    knows): sessions of every user share the control plane's tables, and two users may both have an
    ``s1``. ``<12 hex digits of the user>.<session id>`` (the session id hashed when that would be
    too long)."""
    prefix = hashlib.sha256(user_id.encode()).hexdigest()[:12]
    combined = f"{prefix}.{session_id}"
    if len(combined) > MAX_SESSION_KEY:
        combined = f"{prefix}.{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"
    return combined


MAX_SESSION_KEY: Final = 128


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# -- errors of the routing API -------------------------------------------------------------------


class RoutingError(Exception):
    """The routing API refused (the HTTP layer maps these to status codes)."""


class ExecPlaneUnavailable(RoutingError):
    """The user has no connected execution plane (or the connection dropped while sending)."""


class SessionNotFound(RoutingError):
    """No such session."""


class SessionForbidden(RoutingError):
    """The session belongs to another user."""


class SessionNotRunning(RoutingError):
    """The session was stopped."""


class RequestFailed(Exception):
    """Raised by a request handler: answered as ``response {error: {code, message}}``."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class _LinkClosed(Exception):
    pass


# -- shapes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VmCredentials:
    """What an execution plane is started with (seed §5's environment)."""

    user_id: str
    vm_id: str
    ticket: str
    token: str
    ws_url: str

    def env(self) -> dict[str, str]:
        """``USER_ID``, ``VM_TOKEN``, ``VM_TICKET`` and ``CONTROL_PLANE_WS``."""
        return {
            "USER_ID": self.user_id,
            "VM_TOKEN": self.token,
            "VM_TICKET": self.ticket,
            "CONTROL_PLANE_WS": self.ws_url,
        }

    def __repr__(self) -> str:  # never the secrets
        return f"VmCredentials(user_id={self.user_id!r}, vm_id={self.vm_id!r}, ws_url={self.ws_url!r})"


@dataclass(frozen=True)
class RequestContext:
    """What a request handler gets: the user comes from the connection's JWT, never the frame."""

    user_id: str
    vm_id: str
    session_id: str
    request_id: str
    method: str
    params: dict[str, Any]


RequestHandler = Callable[[RequestContext], Awaitable[Any]]


# -- connections, sessions, subscriptions --------------------------------------------------------


@dataclass(eq=False)
class _VmLink:
    ws: WebSocket
    user_id: str
    vm_id: str
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False
    init_data: dict[str, Any] = field(default_factory=dict)
    """What the last ``init`` on this link said (sent again when the user's settings change)."""
    to_store: asyncio.Queue[_QueuedEvent | asyncio.Future[None] | None] = field(default_factory=asyncio.Queue)
    """The link's ``sse_event`` frames on their way to the event log, in the order they came, and
    heartbeat barriers (a future resolved once every event queued before it is stored); ``None``
    ends the writer (:meth:`ControlPlane._write_events`)."""


@dataclass(frozen=True)
class _QueuedEvent:
    state: _SessionState
    stream: str | None
    seq: int | None
    data: Any


_Stored: TypeAlias = "_QueuedEvent | asyncio.Future[None] | None"


def _drain(queue: asyncio.Queue[_Stored]) -> Iterator[_Stored]:
    """What ``queue`` holds now, oldest first (taken from it)."""
    while not queue.empty():
        yield queue.get_nowait()


def _drop_barriers(items: Iterable[_Stored]) -> None:
    for item in items:
        if isinstance(item, asyncio.Future):
            item.cancel()


EventReader = Callable[[int, int | None], Awaitable[list[SessionEvent]]]
"""Reads a session's logged events ``after < n < before`` (``before`` ``None``: no bound), a page at
a time, oldest first."""


@dataclass(eq=False)
class _SessionState:
    session_id: str
    user_id: str
    status: str
    last_seq: dict[str, int] = field(default_factory=dict)
    """The highest ``seq`` this process knows is logged, per stream (spares the database the
    replays it has seen)."""
    append_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held from an event's append to its publication: subscribers get events in ``n`` order."""
    subscribers: set[SessionSubscription] = field(default_factory=set)
    known: int = 0
    """The highest ``n`` this instance knows the log holds (stored here, or announced by another
    instance; :mod:`clawlet.controlplane.event_feed`)."""
    watch: asyncio.Task[None] | None = None
    """Listens for other instances' notices while the session has subscribers here."""
    watched: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the watch listens and has read where the log is (:meth:`baseline`)."""

    def publish(self, event: SessionEvent) -> None:
        """An event this instance stored: to every subscriber, as it is."""
        self.known = max(self.known, event["id"])
        for subscriber in list(self.subscribers):
            subscriber._push(event)

    def learn(self, n: int) -> None:
        """The log holds the session's events up to ``n`` (stored by another instance, maybe):
        subscribers behind it read them from the log."""
        if n > self.known:
            self.known = n
            for subscriber in list(self.subscribers):
                subscriber._notify(n)

    def baseline(self, n: int) -> None:
        """The watch listens now, and the log held events up to ``n`` just after it began: every
        later event reaches the subscribers. A subscriber that asked only for events from now on
        and has none yet starts after ``n``."""
        self.learn(n)
        for subscriber in list(self.subscribers):
            subscriber._start_after(n)
        self.watched.set()

    def drop(self, subscriber: SessionSubscription) -> None:
        """``subscriber`` is gone; the last one takes the watch with it."""
        self.subscribers.discard(subscriber)
        if not self.subscribers and self.watch is not None:
            if self.watch is not asyncio.current_task():  # (the watch ends itself)
                self.watch.cancel()
            self.watch = None
            self.watched = asyncio.Event()

    def end_subscriptions(self) -> None:
        for subscriber in list(self.subscribers):
            subscriber._finish()


class SessionSubscription:
    """An async iterator of one session's events, each once, in ``n`` order: with ``after``, first
    the event log's events above it, then the live ones (whichever arrive while the log is read are
    delivered once, at their place); an event missing between two live ones (stored by another
    control plane instance, or dropped from the queue of a subscriber that fell more than
    ``subscriber_buffer`` events behind) is read from the log, and so are the events another
    instance announces (:mod:`clawlet.controlplane.event_feed`). Ends when the session is stopped,
    here or on another instance (after what the log holds) or on :meth:`close`. Use as ``async
    with``/``async for``; ``await`` :meth:`ready` to know it gets every event stored from then on,
    on any instance."""

    def __init__(self, state: _SessionState, limit: int, after: int | None, read: EventReader) -> None:
        self.session_id = state.session_id
        self._state = state
        self._limit = limit
        self._read = read
        self._last = after
        """The ``n`` of the last event delivered (``None``: none yet, and no replay asked for)."""
        self._queue: deque[SessionEvent] = deque()
        self._backlog: deque[SessionEvent] = deque()
        self._behind = after is not None
        """The log has events for us before the live queue's."""
        self._gap_read = False
        """The log was read for the gap before the queue's head (and had nothing for it)."""
        self._known = 0
        """The highest ``n`` the log is known to hold (another instance said so)."""
        self._wakeup = asyncio.Event()
        self._ended = False
        self._closed = False
        if state.status == "running":
            state.subscribers.add(self)
            if state.watched.is_set():
                self._start_after(state.known)
        else:
            self._ended = True

    async def ready(self) -> None:
        """Return once every event stored from now on, on any instance, reaches this subscription
        (at once on a single instance, or for a session that is not running)."""
        if not self._ended and self._state.watch is not None:
            await self._state.watched.wait()

    def _notify(self, n: int) -> None:
        if n > self._known:
            self._known = n
            self._wakeup.set()

    def _start_after(self, n: int) -> None:
        """Where a subscriber from now on (no ``after``) starts, when it has no event yet."""
        if self._last is None:
            self._last = min(n, self._queue[0]["id"] - 1) if self._queue else n

    def _push(self, event: SessionEvent) -> None:
        if self._ended:
            return
        if len(self._queue) >= self._limit:
            log.info(
                "a subscriber of session %s fell %d events behind; it continues from the event log",
                self.session_id,
                self._limit,
            )
            if self._last is None:
                self._last = self._queue[0]["id"] - 1
            self._queue.clear()
            self._behind = True
        self._queue.append(event)
        self._wakeup.set()

    def _finish(self) -> None:
        self._ended = True
        self._state.drop(self)
        self._wakeup.set()

    def close(self) -> None:
        self._closed = True
        self._finish()
        self._queue.clear()
        self._backlog.clear()

    def _deliver(self, event: SessionEvent) -> SessionEvent:
        self._last = event["id"]
        self._gap_read = False
        return event

    def __aiter__(self) -> SessionSubscription:
        return self

    async def __anext__(self) -> SessionEvent:
        while not self._closed:
            if self._backlog:
                return self._deliver(self._backlog.popleft())
            if self._behind:
                self._behind = False  # unless this page is full (or the queue overflows meanwhile)
                batch = await self._read(self._last or 0, None)
                self._behind = self._behind or len(batch) >= READ_PAGE
                self._backlog.extend(batch)
                continue
            if self._queue:
                head = self._queue[0]
                if self._last is not None and head["id"] <= self._last:  # had it from the log
                    self._queue.popleft()
                    continue
                if self._last is not None and head["id"] > self._last + 1 and not self._gap_read:
                    self._gap_read = True
                    self._backlog.extend(await self._read(self._last, head["id"]))
                    continue
                return self._deliver(self._queue.popleft())
            if self._last is not None and self._known > self._last:  # stored by another instance
                batch = await self._read(self._last, None)
                if not batch:  # (pruned meanwhile: nothing to wait for)
                    self._known = self._last
                self._backlog.extend(batch)
                continue
            if self._ended:
                break
            self._wakeup.clear()
            await self._wakeup.wait()
        raise StopAsyncIteration

    async def __aenter__(self) -> SessionSubscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


# -- the service ---------------------------------------------------------------------------------


class ControlPlane:
    """Execution-plane connections, request handlers, records, and session routing (see the module
    docstring)."""

    def __init__(
        self,
        config: ControlPlaneConfig,
        *,
        store: ControlPlaneStore | None = None,
        broker: Broker | None = None,
    ) -> None:
        if len(config.jwt_secret.encode("utf-8")) < MIN_SECRET_BYTES:
            raise ValueError(f"the JWT secret must be at least {MIN_SECRET_BYTES} bytes")
        config.ws_url  # noqa: B018 (validates public_url now rather than at the first credentials)
        self.config = config
        self.data_dir = Path(config.data_dir).expanduser()
        self.store = store if store is not None else ControlPlaneStore.open(config.resolved_database_url)
        if config.redis_url is None:
            # the only instance: nobody holds a socket yet. (Instances sharing a broker leave the
            # flags of each other's machines alone; presence records say who is connected.)
            self.store.mark_all_vms_disconnected()
        self.event_log = EventLog(self.store.engine)
        """Sessions' events and transcripts (synchronous: call it from a thread in async code)."""
        self.tickets = TicketStore(
            SqlTicketBackend(self.store.engine), ttl=config.ticket_ttl, clock=config.clock
        )
        cache_root = self.data_dir / CACHE_DIR
        self.memory = LongTermMemory(self.store, cache_root, config.embedder)
        self.mcp = UserMcpServers(self.store, cache_root, config.mcp_timeout)
        try:
            import_legacy_files(self.store, self.data_dir)
        except Exception:  # the files stay where they are; the next start tries again
            log.exception("could not import the long-term memory and MCP files of %s", self.data_dir)
        self.duplicate_records = 0
        """Fire-and-forget records received again (already stored) since start."""
        self.duplicate_events = 0
        """SSE events dropped as replays (``seq`` not above the last seen) since start."""
        self._links: dict[str, _VmLink] = {}
        self._running: dict[str, dict[str, asyncio.Task[None]]] = {}
        self._sessions: dict[str, _SessionState] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._methods: dict[str, RequestHandler] = {
            METHOD_GET_SKILL_PACKAGE: self._get_skill_package,
            METHOD_MEMORY_SEARCH: self._memory_search,
            METHOD_MCP_CALL: self._mcp_call,
        }
        self._closed = False
        self._pruning: asyncio.Task[None] | None = None
        self.broker: Broker = broker if broker is not None else broker_from_url(config.redis_url)
        self.tunnel = TunnelRouter(self.broker, self._send_tunnel_frame)
        self.notices = EventNotices(self.broker)
        """Tells the other instances which sessions' events this one stored."""
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect the broker, listen on this instance's channel and start the periodic pruning of
        the event log (on the app's event loop, by its lifespan; once)."""
        if self._started or self._closed:
            return
        self._started = True
        await self.broker.start()
        await self.tunnel.start()
        self._pruning = asyncio.create_task(self._prune_periodically(), name="control-plane-prune")
        self._tasks.add(self._pruning)

    def prune_event_log(self) -> int:
        """Apply the event log's retention now (synchronous); returns the events deleted."""
        deleted = self.event_log.prune(
            self.config.event_log_max_events, int(self.config.event_log_max_age * 1000)
        )
        if deleted:
            log.info("pruned %d events from the event log", deleted)
        return deleted

    async def _prune_periodically(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.prune_event_log)
            except Exception:
                log.exception("pruning the event log failed")
            try:
                await asyncio.to_thread(self.store.prune_request_outcomes)
            except Exception:
                log.exception("pruning the expired request outcomes failed")
            await asyncio.sleep(self.config.event_log_prune_interval)

    async def aclose(self) -> None:
        """Close every execution-plane connection and stop running requests (the database stays
        open: :meth:`close` releases it)."""
        self._closed = True
        for link in list(self._links.values()):
            await self._close_link(link, CLOSE_GOING_AWAY, "control plane shutting down")
        tasks = [task for running in self._running.values() for task in running.values()]
        tasks += list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:  # the requests stopped here: a resume answers lost rather than pending
            await asyncio.to_thread(self.store.drop_running_requests, self.broker.instance_id)
        except Exception:
            log.exception("could not forget the requests this instance was running")
        for state in self._sessions.values():
            state.end_subscriptions()
        await self.notices.aclose()
        if self._started:
            await self.tunnel.aclose()
            await self.broker.aclose()  # releases this instance's presence records

    def close(self) -> None:
        self.store.close()

    # -- admin helpers (synchronous) -----------------------------------------------------------

    def create_user(
        self, user_id: str, name: str, api_keys: Mapping[str, str], *, org_id: str | None = None
    ) -> UserRecord:
        """A new user (``UserExists`` if the id is taken); ``api_keys`` is ``{provider: key}``."""
        return self.store.create_user(check_user_id(user_id), name, api_keys, org_id=org_id)

    def update_user(
        self,
        user_id: str,
        *,
        name: str | None = None,
        api_keys: Mapping[str, str] | None = None,
        org_id: str | None = None,
        disabled: bool | None = None,
        runtime_type: str | None = None,
        model_settings: Mapping[str, str] | None = None,
    ) -> UserRecord:
        """Change a user; new API keys and ``disabled`` take effect at the execution plane's next
        (re)connect (:meth:`disconnect_exec_plane` forces one). ``runtime_type=""`` clears the
        user's default runtime, ``model_settings={}`` their default model (:data:`MODEL_KEYS`);
        both apply from the next session start."""
        return self.store.update_user(
            user_id,
            name=name,
            api_keys=api_keys,
            org_id=org_id,
            disabled=disabled,
            runtime_type=runtime_type,
            model_settings=None if model_settings is None else check_model_settings(model_settings),
        )

    def get_user(self, user_id: str) -> UserRecord | None:
        return self.store.get_user(user_id)

    def issue_user_token(self, user_id: str, label: str = "") -> str:
        """A new bearer token of the HTTP API for ``user_id`` (only its digest is stored: show it
        to the user now, it cannot be read back)."""
        token = USER_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.store.add_user_token(user_id, token_digest(token), label)
        return token

    def authenticate_user(self, token: str) -> UserRecord | None:
        """The enabled user whose API token this is, else ``None``. Tokens are looked up by their
        SHA-256 digest, so the lookup's timing says nothing about the token's characters."""
        if not token.startswith(USER_TOKEN_PREFIX):
            return None
        user = self.store.user_for_token_digest(token_digest(token))
        return None if user is None or user.disabled else user

    def set_org_runtime_type(self, org_id: str, runtime_type: str | None) -> None:
        """The organisation's default runtime type (``None`` clears it)."""
        self.store.set_org_runtime_type(org_id, runtime_type or None)

    def set_org_model_settings(self, org_id: str, model_settings: Mapping[str, str] | None) -> None:
        """The organisation's default model (:data:`MODEL_KEYS`; ``None`` or ``{}`` clears it)."""
        self.store.set_org_model_settings(org_id, check_model_settings(model_settings or {}))

    def resolve_runtime_type(self, user_id: str, config: Mapping[str, Any]) -> str:
        """The runtime of a session started with ``config`` (see :func:`resolve_runtime_type`)."""
        return self.resolve_session_runtime(user_id, config)[0]

    def resolve_session_runtime(self, user_id: str, config: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        """The runtime type and the model settings of a session started with ``config``: the
        session's (``runtime_type``, ``model_settings``), else the agent's (in ``agent_config``),
        else the user's, else the organisation's (:func:`resolve_runtime_type`,
        :func:`resolve_model_settings`)."""
        user = self.store.get_user(user_id)
        org_runtime, org_model = (
            self.store.org_defaults(user.org_id) if user is not None and user.org_id else (None, None)
        )
        agent = config.get("agent_config")
        agent = agent if isinstance(agent, Mapping) else {}
        runtime_type = resolve_runtime_type(
            session=config.get("runtime_type"),
            agent=agent.get("runtime_type"),
            user=user.runtime_type if user is not None else None,
            org=org_runtime,
        )
        model = resolve_model_settings(
            session=config.get("model_settings"),
            agent=agent,
            user=user.model_settings if user is not None else None,
            org=org_model,
        )
        return runtime_type, model

    def issue_vm_credentials(self, user_id: str, vm_id: str | None = None) -> VmCredentials:
        """A ticket (single use, ``ticket_ttl`` seconds), a VM token and the WebSocket URL for a new
        execution plane of ``user_id``."""
        if self.store.get_user(user_id) is None:
            raise UnknownUser(f"no user {user_id!r}")
        vm = vm_id or f"vm-{uuid.uuid4().hex[:16]}"
        self.store.register_vm(vm, user_id)
        ticket = self.tickets.issue(user_id, vm)
        token = issue_vm_token(user_id, self.config.jwt_secret, self.config.vm_token_ttl, vm_id=vm)
        return VmCredentials(user_id, vm, ticket, token, self.config.ws_url)

    def add_skill_package(
        self,
        skill_id: str,
        version: str,
        files: list[dict[str, Any]],
        user_id: str | None = None,
    ) -> SkillPackageRecord:
        """Publish ``files`` (``[{path, content, encoding?}]``, with a top-level ``SKILL.md``) as
        ``version`` of ``skill_id``: the user's own package, or global when ``user_id`` is None.
        The package is checked exactly as the execution plane's cache will check it (``ValueError``
        if it would be refused); ``SkillPackageExists`` if that version is published already."""
        version = version.strip() if isinstance(version, str) else ""
        if not version or version == LATEST or len(version) > 128:
            raise ValueError(f"invalid version {version!r} ('latest' is not a version)")
        if user_id is not None and self.store.get_user(user_id) is None:
            raise UnknownUser(f"no user {user_id!r}")
        package_files = [dict(item) for item in files]
        try:
            validate_skill_id(skill_id)
            parse_package(skill_id, {"files": package_files})
        except SkillUnavailable as exc:
            raise ValueError(str(exc)) from None
        return self.store.add_skill_package(skill_id, version, package_files, user_id)

    def skill_index(self, user_id: str) -> list[dict[str, Any]]:
        """``start_session``'s ``skill_index`` from the registry: the newest version of each skill
        the user sees (their own over a global one), described by its ``SKILL.md``."""
        entries: list[dict[str, Any]] = []
        for package in self.store.newest_skill_packages(user_id):
            skill_md = next((f for f in package.files if f.get("path") == SKILL_MD), None)
            text = skill_md.get("content") if skill_md is not None else None
            if not isinstance(text, str) or (skill_md or {}).get("encoding") == "base64":
                continue
            try:
                summary = skill_summary(text, package.skill_id)
            except SkillError as exc:
                log.warning(
                    "skill %s %s is left out of the index: %s", package.skill_id, package.version, exc
                )
                continue
            files = [str(f.get("path")) for f in package.files]
            entries.append(
                {"skill_id": package.skill_id, "version": package.version, "files": files, **summary}
            )
        return entries

    def add_memory(self, user_id: str, text: str) -> None:
        """Add one entry to the user's long-term memory (``ValueError`` for a blank one)."""
        if self.store.get_user(user_id) is None:
            raise UnknownUser(f"no user {user_id!r}")
        self.memory.add(user_id, text)

    def set_mcp_servers(self, user_id: str, servers: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the user's remote MCP servers (``{name: {command, args?, env?}}``)."""
        if self.store.get_user(user_id) is None:
            raise UnknownUser(f"no user {user_id!r}")
        self.mcp.configure(user_id, servers)

    def register_method(self, method: str, handler: RequestHandler) -> None:
        """Serve requests of ``method`` (or replace a built-in handler)."""
        self._methods[method] = handler

    # -- observations --------------------------------------------------------------------------

    async def exec_plane_online(self, user_id: str) -> bool:
        """Whether any control-plane instance holds ``user_id``'s execution plane."""
        return user_id in self._links or await self.broker.holder(user_id) is not None

    def is_connected(self, user_id: str) -> bool:
        link = self._links.get(user_id)
        return link is not None and not link.closed

    def connected_users(self) -> list[str]:
        return sorted(user for user, link in self._links.items() if not link.closed)

    def running_requests(self, user_id: str) -> int:
        return len(self._running.get(user_id, {}))

    def list_sessions(self, user_id: str) -> list[SessionRecord]:
        return self.store.list_sessions(user_id)

    # -- the routing API -----------------------------------------------------------------------

    async def start_session(self, user_id: str, session_id: str, config: Mapping[str, Any]) -> SessionRecord:
        """Start (or restart) ``session_id`` for ``user_id`` on the user's execution plane; the
        frame's ``data`` is ``config`` (``agent_config``, ``skill_index``, …) with the session id."""
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("a session needs a non-empty id")
        key = session_key(user_id, session_id)
        link = self._require_link(user_id)
        record = await self._claim(user_id, key)
        data = await asyncio.to_thread(self.session_config, user_id, config)
        frame = start_session_frame({**data, "session_id": session_id})
        await self._send_or_unavailable(link, dict(frame))
        return SessionRecord(key, user_id, "running", record.created_at, record.updated_at)

    async def _claim(self, user_id: str, key: str) -> SessionRecord:
        """The session ``key`` of ``user_id``, recorded (and running) from now on."""
        record = await asyncio.to_thread(self.store.claim_session, key, user_id)
        if record.user_id != user_id:  # cannot happen: the key names the user
            raise SessionForbidden(f"session {key!r} belongs to another user")
        if record.status != "running":
            await asyncio.to_thread(self.store.set_session_status, key, user_id, "running")
        state = self._sessions.get(key)
        if state is None:
            state = self._new_state(key, user_id)
        state.status = "running"
        return record

    def session_config(self, user_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` completed with what the control plane stores: the resolved ``runtime_type``
        and model (in ``agent_config``), the user's MCP server names and skill index. ``init`` carries
        it for ``{}``: the defaults of the sessions the user's execution plane starts itself."""
        runtime_type, model = self.resolve_session_runtime(user_id, config)
        data = {**dict(config), "runtime_type": runtime_type}
        data.pop("model_settings", None)
        if model:  # the resolved model replaces the agent's own model settings
            agent = data.get("agent_config")
            agent = agent if isinstance(agent, Mapping) else {}
            data["agent_config"] = {**{k: v for k, v in agent.items() if k not in MODEL_KEYS}, **model}
        if "mcp_servers" not in data:  # the user's remote MCP servers, by name (called via mcp_call)
            data["mcp_servers"] = sorted(self.mcp.servers(user_id))
        if "skill_index" not in data:  # the registry's skills the user sees (fetched lazily)
            data["skill_index"] = self.skill_index(user_id)
        return data

    async def send_user_message(self, user_id: str, session_id: str, data: Mapping[str, Any]) -> None:
        """Deliver a user message to the session's process."""
        await self._owned_running(user_id, session_key(user_id, session_id))
        link = self._require_link(user_id)
        await self._send_or_unavailable(link, dict(user_message_frame(session_id, data)))

    async def cancel(self, user_id: str, session_id: str) -> None:
        """Cancel what the session is doing."""
        await self._owned_running(user_id, session_key(user_id, session_id))
        link = self._require_link(user_id)
        await self._send_or_unavailable(link, dict(cancel_frame(session_id)))

    async def stop_session(self, user_id: str, session_id: str) -> None:
        """Stop the session's process; its subscriptions end. Stopping a stopped session is a no-op."""
        key = session_key(user_id, session_id)
        state = await self._owned(user_id, key)
        if state.status != "running":
            return
        link = self._require_link(user_id)
        await self._send_or_unavailable(link, dict(stop_session_frame(session_id)))
        state.status = "stopped"
        await asyncio.to_thread(self.store.set_session_status, key, user_id, "stopped")
        state.end_subscriptions()
        self._sessions.pop(key, None)
        self.notices.stopped(key)

    def subscribe(self, user_id: str, session_id: str, *, after: int | None = None) -> SessionSubscription:
        """The session's SSE events from now on (with ``after=N``, first the event log's events
        whose ``n`` is above ``N``; :class:`SessionSubscription`). Refused at once for a session
        that is unknown or another user's."""
        session_id = session_key(user_id, session_id)
        state = self._sessions.get(session_id)
        if state is None:
            record = self.store.get_session(session_id)
            if record is None:
                raise SessionNotFound(f"no session {session_id!r}")
            state = self._state_for(record)
        if state.user_id != user_id:
            raise SessionForbidden(f"session {session_id!r} belongs to another user")

        async def read(after_n: int, before: int | None) -> list[SessionEvent]:
            return await asyncio.to_thread(self.event_log.read, session_id, after_n, before)

        subscription = SessionSubscription(state, self.config.subscriber_buffer, after, read)
        if state.subscribers and state.watch is None and self._started and not self._closed:
            state.watch = asyncio.create_task(self._watch(state), name=f"control-plane-watch-{session_id}")
            self._tasks.add(state.watch)
            state.watch.add_done_callback(self._tasks.discard)
        return subscription

    async def _watch(self, state: _SessionState) -> None:
        """While ``state`` has subscribers here: learn from the other instances' notices (and,
        after ``event_catch_up`` seconds of silence, from the log's counter) how far the session's log
        goes, and end its subscriptions when another instance stops it
        (:mod:`clawlet.controlplane.event_feed`)."""
        while True:
            try:
                async with self.broker.subscribe(session_channel(state.session_id)) as notices:
                    state.baseline(await self._last_n(state))
                    received = notices.__aiter__()
                    while True:
                        try:
                            notice = await asyncio.wait_for(received.__anext__(), self.config.event_catch_up)
                        except TimeoutError:
                            state.learn(await self._last_n(state))
                            continue
                        except StopAsyncIteration:  # the broker was closed: this instance stops
                            return
                        if notice.get("instance") == self.broker.instance_id:
                            continue  # its events reached the subscribers here as they were stored
                        n = notice.get("n")
                        if isinstance(n, int) and not isinstance(n, bool):
                            state.learn(n)
                        if notice.get("stopped") is True:
                            self._stopped_elsewhere(state, await self._last_n(state))
                            return
            except BrokerUnavailable as exc:  # the log's counter stands in until the broker is back
                log.warning("session %s: no notices from other instances (%s)", state.session_id, exc)
            except Exception:
                log.exception("watching session %s for other instances' events failed", state.session_id)
            with swallowed(log, "session %s: reading its event count failed", state.session_id):
                state.baseline(await self._last_n(state))
            await asyncio.sleep(self.config.event_catch_up)

    async def _last_n(self, state: _SessionState) -> int:
        return await asyncio.to_thread(self.event_log.last_n, state.session_id)

    def _stopped_elsewhere(self, state: _SessionState, last_n: int) -> None:
        """Another instance stopped the session: its subscribers here end after the log's events
        up to ``last_n``."""
        state.learn(last_n)
        state.status = "stopped"
        state.end_subscriptions()
        if self._sessions.get(state.session_id) is state:
            del self._sessions[state.session_id]

    async def disconnect_exec_plane(
        self, user_id: str, reason: str = "disconnected by the control plane"
    ) -> bool:
        """Close the user's connection (the execution plane reconnects and resumes)."""
        link = self._links.get(user_id)
        if link is None or link.closed:
            return False
        await self._close_link(link, CLOSE_DISCONNECTED, reason)
        return True

    # -- routing internals ---------------------------------------------------------------------

    def _require_link(self, user_id: str) -> _VmLink:
        link = self._links.get(user_id)
        if link is None or link.closed:
            raise ExecPlaneUnavailable(f"user {user_id!r} has no connected execution plane")
        return link

    async def _send_or_unavailable(self, link: _VmLink, frame: Mapping[str, Any]) -> None:
        try:
            await self._send(link, frame)
        except _LinkClosed:
            raise ExecPlaneUnavailable(
                f"the execution plane of user {link.user_id!r} disconnected while sending {frame.get('type')}"
            ) from None

    def _new_state(self, session_id: str, user_id: str) -> _SessionState:
        state = _SessionState(session_id, user_id, "running")
        self._sessions[session_id] = state
        return state

    def _state_for(self, record: SessionRecord) -> _SessionState:
        state = self._sessions.get(record.id)
        if state is None:
            state = _SessionState(record.id, record.user_id, record.status)
            if record.status == "running":
                self._sessions[record.id] = state
        return state

    async def _load_session(self, session_id: str) -> _SessionState | None:
        state = self._sessions.get(session_id)
        if state is not None:
            return state
        record = await asyncio.to_thread(self.store.get_session, session_id)
        return None if record is None else self._state_for(record)

    async def _owned(self, user_id: str, session_id: str) -> _SessionState:
        state = await self._load_session(session_id)
        if state is None:
            raise SessionNotFound(f"no session {session_id!r}")
        if state.user_id != user_id:
            raise SessionForbidden(f"session {session_id!r} belongs to another user")
        return state

    async def _owned_running(self, user_id: str, session_id: str) -> _SessionState:
        state = await self._owned(user_id, session_id)
        if state.status != "running":
            raise SessionNotRunning(f"session {session_id!r} is {state.status}")
        return state

    # -- the WebSocket -------------------------------------------------------------------------

    async def serve_vm(self, websocket: WebSocket) -> None:
        """Serve one execution-plane connection from handshake to close (never raises)."""
        user_id = websocket.query_params.get(QUERY_USER_ID) or ""
        ticket = websocket.query_params.get(QUERY_TICKET)
        link: _VmLink | None = None
        try:
            await websocket.accept()
            link = await self._handshake(websocket, user_id, ticket)
            if link is not None:
                await self._read_frames(link)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the connection of an execution plane (user %r) failed", user_id[:MAX_LOGGED_ID])
            with swallowed(log, "closing the execution plane connection failed"):
                if websocket.application_state != WebSocketState.DISCONNECTED:
                    await websocket.close(1011, "internal error")
        finally:
            if link is not None:
                await self._unregister(link)

    async def _receive_text(self, websocket: WebSocket) -> str | None:
        """The next text (or UTF-8 binary) frame; ``None`` once the peer is gone."""
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        if isinstance(text, str):
            return text
        data = message.get("bytes")
        if isinstance(data, bytes | bytearray):
            return bytes(data).decode("utf-8", "replace")
        return ""

    async def _refuse(self, websocket: WebSocket, user_id: str, code: str, message: str) -> None:
        log.warning(
            "refused an execution plane connection for user %r: %s (%s)",
            user_id[:MAX_LOGGED_ID],
            code,
            message,
        )
        with swallowed(log, "sending the %s error frame failed", code):
            await websocket.send_text(encode(error_frame(code, message)))
        with swallowed(log, "closing the refused connection failed"):
            await websocket.close(CLOSE_UNAUTHORIZED, code)

    async def _handshake(self, websocket: WebSocket, user_id: str, ticket: str | None) -> _VmLink | None:
        try:
            raw = await asyncio.wait_for(self._receive_text(websocket), self.config.auth_timeout)
        except TimeoutError:
            await self._refuse(
                websocket, user_id, ERR_AUTH_REQUIRED, f"no auth frame within {self.config.auth_timeout:g}s"
            )
            return None
        if raw is None:
            return None
        try:
            frame = decode(raw)
        except FrameError:
            frame = None
        if frame is None or frame["type"] != AUTH:
            await self._refuse(websocket, user_id, ERR_AUTH_REQUIRED, "the first frame must be auth {token}")
            return None
        if not user_id:
            await self._refuse(websocket, user_id, ERR_AUTH_REQUIRED, "user_id is missing from the URL")
            return None
        try:
            claims = verify_vm_token(frame["token"], self.config.jwt_secret, user_id=user_id)
        except TokenRejected as exc:
            await self._refuse(websocket, user_id, ERR_TOKEN_INVALID, str(exc))
            return None
        vm_id = claims.vm_id
        if ticket is not None:
            try:
                record = await asyncio.to_thread(self.tickets.redeem_record, ticket, user_id)
            except TicketRejected as exc:
                await self._refuse(websocket, user_id, ERR_TICKET_REJECTED, str(exc))
                return None
            if record.vm_id and vm_id and record.vm_id != vm_id:
                await self._refuse(
                    websocket, user_id, ERR_TICKET_REJECTED, "the ticket was issued for another VM"
                )
                return None
            vm_id = vm_id or record.vm_id
        user = await asyncio.to_thread(self.store.get_user, user_id)
        if user is None:
            await self._refuse(websocket, user_id, ERR_FORBIDDEN, "unknown user")
            return None
        if user.disabled:
            await self._refuse(websocket, user_id, ERR_FORBIDDEN, "the user is disabled")
            return None
        if self._closed:
            await self._refuse(websocket, user_id, ERR_FORBIDDEN, "the control plane is shutting down")
            return None
        link = _VmLink(websocket, user.id, vm_id or f"vm-{user.id}")
        await asyncio.to_thread(self.store.set_vm_connected, link.vm_id, user.id, True)
        data = await asyncio.to_thread(self._init_data, user, link.vm_id)
        try:
            await self._send(link, init_frame(data))
            link.init_data = data
        except _LinkClosed:
            await asyncio.to_thread(self.store.set_vm_connected, link.vm_id, user.id, False)
            return None
        previous = self._links.get(user.id)
        self._links[user.id] = link
        if previous is not None and not previous.closed:
            self._spawn(self._close_link(previous, CLOSE_REPLACED, "replaced by a newer connection"))
        try:
            await self.tunnel.connected(user.id)
        except Exception:  # a broker outage must not cost the user their socket
            log.exception("could not record that this instance holds user %s's execution plane", user.id)
        log.info(
            "execution plane %s of user %s connected (%s)",
            link.vm_id,
            user.id,
            "ticket" if ticket else "reconnect",
        )
        return link

    def _init_data(self, user: UserRecord, vm_id: str) -> dict[str, Any]:
        """``init``'s data for ``user``'s machine: the user, API keys and protocol options, and the
        defaults of the sessions the machine starts itself (:meth:`session_config` of ``{}``)."""
        data: dict[str, Any] = {
            "user_id": user.id,
            "api_keys": dict(user.api_keys),
            "vm_id": vm_id,
            INIT_HEARTBEAT_ACK: True,
            INIT_EVENT_ENCODING: EVENT_ENCODING,
            INIT_FRAMES_PER_LINE: True,
            **self.session_config(user.id, {}),
        }
        if user.org_id:
            data["org_id"] = user.org_id
        return data

    async def _send_tunnel_frame(self, user_id: str, frame: Mapping[str, Any]) -> bool:
        """A tunnel frame to ``user_id``'s machine. Before a request, ``init`` goes again when what
        it says changed since it was sent (``set-runtime``, new API keys, a published skill: an
        admin command in another process changes the database, and the request about to run must
        see it)."""
        link = self._links.get(user_id)
        if link is None or link.closed:
            return False
        if frame.get("type") == HTTP_REQUEST:
            user = await asyncio.to_thread(self.store.get_user, user_id)
            if user is not None:
                data = await asyncio.to_thread(self._init_data, user, link.vm_id)
                if data != link.init_data:
                    try:
                        await self._send(link, init_frame(data))
                    except _LinkClosed:
                        return False
                    link.init_data = data
        return await self._send_to_user(user_id, frame)

    async def _unregister(self, link: _VmLink) -> None:
        link.closed = True
        if self._links.get(link.user_id) is link:
            del self._links[link.user_id]
            log.info("execution plane %s of user %s disconnected", link.vm_id, link.user_id)
            with swallowed(log, "ending the tunnel of user %s failed", link.user_id):
                await self.tunnel.disconnected(link.user_id)
            try:
                await asyncio.to_thread(self.store.set_vm_connected, link.vm_id, link.user_id, False)
            except Exception:
                log.exception("could not record the disconnect of %s", link.vm_id)

    async def _close_link(self, link: _VmLink, code: int, reason: str) -> None:
        link.closed = True
        with swallowed(log, "closing the link of %s failed", link.vm_id):
            await link.ws.close(code, reason)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, link: _VmLink, frame: Mapping[str, Any]) -> None:
        text = encode(frame)
        if link.closed:
            raise _LinkClosed
        async with link.send_lock:
            try:
                await link.ws.send_text(text)
            except Exception as exc:
                link.closed = True
                raise _LinkClosed from exc

    async def _send_to_user(self, user_id: str, frame: Mapping[str, Any]) -> bool:
        link = self._links.get(user_id)
        if link is None:
            return False
        try:
            await self._send(link, frame)
        except _LinkClosed:
            return False
        return True

    async def _read_frames(self, link: _VmLink) -> None:
        writer = asyncio.create_task(self._write_events(link), name=f"control-plane-events-{link.vm_id}")
        try:
            await self._read_frames_until_closed(link)
        finally:
            link.to_store.put_nowait(None)  # what arrived is still stored (unless the writer failed)
            try:
                await writer
            except BaseException:
                writer.cancel()
                raise
            finally:
                _drop_barriers(list(_drain(link.to_store)))  # left by a writer that failed

    async def _read_frames_until_closed(self, link: _VmLink) -> None:
        while True:
            raw = await self._receive_text(link.ws)
            if raw is None:
                return
            for line in split_lines(raw):  # several frames in one message (INIT_FRAMES_PER_LINE)
                if not await self._handle_frame(link, line):
                    return

    async def _handle_frame(self, link: _VmLink, raw: str) -> bool:
        """Handle one frame of the link; ``False`` once the link is closed."""
        try:
            frame = decode(raw)
        except FrameError as exc:
            log.warning("bad frame from %s (user %s): %s", link.vm_id, link.user_id, exc)
            with contextlib.suppress(_LinkClosed):
                await self._send(link, error_frame(ERR_BAD_FRAME, str(exc)))
            return True
        try:
            if frame["type"] == "request":
                self._start_request(link, frame)
            elif frame["type"] == "fire_and_forget":
                await self._store_record(link, frame)
            elif frame["type"] == "sse_event":
                await self._on_sse_event(link, frame)
            elif frame["type"] == "heartbeat":
                stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                link.to_store.put_nowait(stored)
                self._spawn(self._on_heartbeat(link, stored, frame.get("id")))
            elif frame["type"] == "resume":
                await self._resume(link, frame)
            elif frame["type"] == "http_response" or frame["type"] == "http_body":
                await self.tunnel.from_exec_plane(link.user_id, frame)
            elif frame["type"] == "auth":
                log.debug("ignoring a repeated auth frame from %s", link.vm_id)
            else:
                kind = frame["type"]
                log.warning("an execution plane sent a %s frame, which only a control plane sends", kind)
                await self._send(link, error_frame(ERR_BAD_FRAME, f"unexpected {kind} frame"))
        except _LinkClosed:
            return False
        except Exception:
            log.exception("failed to handle a %s frame from %s", frame["type"], link.vm_id)
        return True

    # -- requests ------------------------------------------------------------------------------

    def _start_request(self, link: _VmLink, frame: RequestFrame) -> None:
        user_id, request_id = link.user_id, frame["id"]
        running = self._running.setdefault(user_id, {})
        if request_id in running:
            log.info("request %s is running already; ignoring the repeat", request_id)
            return
        context = RequestContext(
            user_id, link.vm_id, frame["session_id"], request_id, frame["method"], frame["params"]
        )
        task = asyncio.create_task(self._run_request(context), name=f"control-plane-request-{request_id}")
        running[request_id] = task

    async def _run_request(self, context: RequestContext) -> None:
        """Claim the request in the database, run it, store its outcome, then send the response.
        A request another instance has claimed is left to it; one already finished is answered
        with its stored outcome."""
        user_id, request_id = context.user_id, context.request_id
        running = self._running.get(user_id, {})
        try:
            claimed = await self._claim_request(context)
            if claimed is not None:  # elsewhere, finished or given up: never run twice
                running.pop(request_id, None)
                if claimed["status"] == "completed":
                    await self._deliver(user_id, self._response_for(request_id, claimed))
                else:
                    log.info(
                        "request %s of user %s %s; not running it",
                        request_id,
                        user_id,
                        "runs on another instance"
                        if claimed["status"] == "pending"
                        else "was answered lost to a resume",
                    )
                return
            outcome = await self._outcome_of(context)
            await self._keep_result(context, outcome)
        except asyncio.CancelledError:
            running.pop(request_id, None)
            raise
        # no await between keeping the outcome and leaving the running set: a resume sees one of them
        running.pop(request_id, None)
        await self._deliver(user_id, self._response_for(request_id, outcome))

    async def _claim_request(self, context: RequestContext) -> ResumeResult | None:
        """``None``: this instance runs the request now. Otherwise what a ``resume`` would answer
        for it (``pending``: another instance runs it; ``lost``: a resume gave it up), or an error
        when the database cannot say."""
        expires = now_ms() + int(self.config.result_ttl * 1000)
        try:
            row = await asyncio.to_thread(
                self.store.claim_request,
                context.user_id,
                context.request_id,
                self.broker.instance_id,
                expires,
            )
        except Exception as exc:
            log.error("could not record request %s of user %s: %s", context.request_id, context.user_id, exc)
            return completed_with_error(ERR_INTERNAL, f"{context.method} failed: the database is unavailable")
        return None if row is None else _resume_result(row)

    async def _outcome_of(self, context: RequestContext) -> ResumeResult:
        try:
            outcome = completed(await self._call_method(context))
            encode(outcome)  # a handler's result that JSON cannot carry is an internal error, now
            return outcome
        except RequestFailed as exc:
            return completed_with_error(exc.code, exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception(
                "%s request %s of user %s failed", context.method, context.request_id, context.user_id
            )
            return completed_with_error(ERR_INTERNAL, f"{context.method} failed: {type(exc).__name__}")

    async def _keep_result(self, context: RequestContext, outcome: ResumeResult) -> None:
        """Store the outcome for ``resume`` on any instance. One the database refuses is still sent;
        a ``resume`` elsewhere then finds the request claimed and answers ``pending`` until the claim
        expires (the execution plane's own timeout fails it)."""
        expires = now_ms() + int(self.config.result_ttl * 1000)
        try:
            await asyncio.to_thread(
                self.store.finish_request,
                context.user_id,
                context.request_id,
                self.broker.instance_id,
                outcome,
                expires,
            )
        except Exception:
            log.exception(
                "could not store the outcome of request %s of user %s", context.request_id, context.user_id
            )

    async def _deliver(self, user_id: str, frame: Mapping[str, Any]) -> None:
        """Send ``frame`` over the user's socket, on whichever instance holds it now. Looked up
        after the outcome is stored: an instance that takes the socket over later finds the outcome
        in the database when the execution plane resumes."""
        try:
            holder = await self.broker.holder(user_id)
        except Exception as exc:
            log.warning("could not look up who holds user %s's execution plane: %s", user_id, exc)
            holder = None
        if holder is None or holder == self.broker.instance_id:
            await self._send_to_user(user_id, frame)
            return
        try:
            await self.tunnel.deliver(holder, user_id, frame)
        except Exception as exc:  # the execution plane's resume finds the outcome in the database
            log.warning("could not pass a response for user %s to instance %s: %s", user_id, holder, exc)

    @staticmethod
    def _response_for(request_id: str, outcome: ResumeResult) -> dict[str, Any]:
        error = outcome.get("error")
        if error is not None:
            return dict(error_response_frame(request_id, error["code"], error["message"]))
        return dict(response_frame(request_id, outcome.get("data")))

    async def _call_method(self, context: RequestContext) -> Any:
        handler = self._methods.get(context.method)
        if handler is None:
            raise RequestFailed(ERR_UNKNOWN_METHOD, f"unknown method {context.method!r}")
        state = await self._load_session(session_key(context.user_id, context.session_id))
        if state is not None and state.user_id != context.user_id:
            raise RequestFailed(ERR_FORBIDDEN, f"session {context.session_id!r} belongs to another user")
        return await handler(context)

    async def _resume(self, link: _VmLink, frame: ResumeFrame) -> None:
        ids = frame["pending_ids"]
        running = self._running.get(link.user_id, {})
        # running here: its response follows. Else, the database says (a request that finished here
        # was stored before it left the running set, so this snapshot comes first).
        results: dict[str, ResumeResult] = {rid: still_pending() for rid in ids if rid in running}
        elsewhere = [rid for rid in ids if rid not in results]
        try:
            rows = (
                await asyncio.to_thread(self.store.request_outcomes, link.user_id, elsewhere)
                if elsewhere
                else {}
            )
        except Exception as exc:  # not knowing, say pending: an answer that comes is taken, none runs twice
            log.error("could not read request outcomes for the resume of %s: %s", link.vm_id, exc)
            rows = {}
            results.update((rid, still_pending()) for rid in elsewhere)
        for rid in elsewhere:
            row = rows.get(rid)
            if row is None and rid not in results:
                row = await self._give_up(link.user_id, rid)
            results.setdefault(rid, lost() if row is None else _resume_result(row))
        counts = {
            status: sum(1 for r in results.values() if r["status"] == status)
            for status in ("completed", "pending", "lost")
        }
        log.info("resume from %s: %s", link.vm_id, ", ".join(f"{n} {status}" for status, n in counts.items()))
        await self._send(link, resume_response_frame({rid: results[rid] for rid in ids}))

    async def _give_up(self, user_id: str, request_id: str) -> RequestOutcome | None:
        """Record that ``resume`` answers ``lost`` for a request no instance has claimed, so that
        none runs it if its frame still reaches one; returns ``None`` when recorded, else the row of
        the instance that claimed it meanwhile."""
        expires = now_ms() + int(self.config.result_ttl * 1000)
        try:
            return await asyncio.to_thread(
                self.store.claim_request, user_id, request_id, self.broker.instance_id, expires, "lost"
            )
        except Exception as exc:  # answered lost all the same: it may or may not run (as the protocol allows)
            log.warning("could not record that request %s of user %s is lost: %s", request_id, user_id, exc)
            return None

    # -- built-in request handlers -------------------------------------------------------------

    async def _get_skill_package(self, context: RequestContext) -> dict[str, Any]:
        skill_id = context.params.get("skill_id")
        version = context.params.get("version") or LATEST
        if not isinstance(skill_id, str) or not isinstance(version, str):
            raise RequestFailed(ERR_INVALID_PARAMS, "get_skill_package needs a string skill_id and version")
        try:
            validate_skill_id(skill_id)
        except SkillUnavailable as exc:
            raise RequestFailed(ERR_INVALID_PARAMS, str(exc)) from None
        record = await asyncio.to_thread(
            self.store.find_skill_package, context.user_id, skill_id, version.strip()
        )
        if record is None:
            raise RequestFailed(ERR_NOT_FOUND, f"skill {skill_id!r} version {version!r} not found")
        return {"package": {"skill_id": record.skill_id, "version": record.version, "files": record.files}}

    async def _memory_search(self, context: RequestContext) -> list[dict[str, Any]]:
        query = context.params.get("query")
        top_k = context.params.get("top_k", 5)
        if not isinstance(query, str) or not query.strip():
            raise RequestFailed(ERR_INVALID_PARAMS, "memory_search needs a non-empty string query")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise RequestFailed(ERR_INVALID_PARAMS, "memory_search top_k must be a positive integer")
        hits = await asyncio.to_thread(self.memory.search, context.user_id, query, min(top_k, MAX_TOP_K))
        return [dict(hit) for hit in hits]

    async def _mcp_call(self, context: RequestContext) -> dict[str, Any]:
        server = context.params.get("server")
        tool = context.params.get("tool")
        arguments = context.params.get("arguments") or {}
        if not isinstance(server, str) or not server or not isinstance(tool, str) or not tool:
            raise RequestFailed(ERR_INVALID_PARAMS, "mcp_call needs string server and tool")
        if not isinstance(arguments, dict):
            raise RequestFailed(ERR_INVALID_PARAMS, "mcp_call arguments must be an object")
        try:
            return await self.mcp.call(context.user_id, server, tool, arguments)
        except McpCallError as exc:
            raise RequestFailed(exc.code, exc.message) from None

    # -- fire-and-forget and SSE ---------------------------------------------------------------

    async def _store_record(self, link: _VmLink, frame: FireAndForgetFrame) -> None:
        user_id, session_id, method = link.user_id, frame["session_id"], frame["method"]
        state = await self._load_session(session_key(user_id, session_id))
        if state is not None and state.user_id != user_id:
            log.warning("dropping %s of %s for session %s of another user", method, link.vm_id, session_id)
            return
        record_id = frame.get("id") or uuid.uuid4().hex
        ts = frame.get("ts")
        params = frame["params"]
        if method == FF_USAGE_REPORT:
            stored = await asyncio.to_thread(self.store.add_usage, user_id, record_id, session_id, params, ts)
        elif method == FF_AUDIT_LOG:
            stored = await asyncio.to_thread(self.store.add_audit, user_id, record_id, session_id, params, ts)
        elif method == FF_EVOLUTION_SUBMIT:
            stored = await asyncio.to_thread(
                self.store.add_evolution, user_id, record_id, session_id, params, ts
            )
        elif method == FF_SNAPSHOT_SYNC:
            await asyncio.to_thread(self.store.upsert_snapshot, user_id, session_id, params, ts)
            return
        elif method == FF_TRANSCRIPT_SYNC:
            try:
                stored = await asyncio.to_thread(
                    self.event_log.put_transcript, user_id, record_id, params, ts
                )
            except InvalidTranscript as exc:
                log.warning("dropping a transcript_sync record of %s: %s", link.vm_id, exc)
                return
        else:
            log.info("ignoring fire-and-forget method %r from %s", method, link.vm_id)
            return
        if not stored:
            self.duplicate_records += 1
            log.debug("%s record %s arrived again; stored once", method, record_id)

    async def _on_heartbeat(self, link: _VmLink, stored: asyncio.Future[None], ack_id: str | None) -> None:
        """Record the heartbeat; acknowledge it (when it has an id) once every frame before it is
        handled, the events among them stored in the log (``stored``; never set if the log failed)."""
        try:
            await stored
            await asyncio.to_thread(self.store.touch_vm, link.vm_id)
            if ack_id is not None:
                await self._send(link, heartbeat_frame(ack_id=ack_id))
        except (_LinkClosed, asyncio.CancelledError):
            return
        except Exception:
            log.exception("failed to handle a heartbeat from %s", link.vm_id)

    async def _on_sse_event(self, link: _VmLink, frame: SseEventFrame) -> None:
        # a session the execution plane started itself (through its API) is recorded by its first event
        session_id = session_key(link.user_id, frame["session_id"])
        state = await self._load_session(session_id)
        if state is None:
            await self._claim(link.user_id, session_id)
            state = await self._load_session(session_id)
        if state is None or state.user_id != link.user_id:
            log.warning(
                "dropping an SSE event of %s for unknown or foreign session %s", link.vm_id, session_id
            )
            return
        if state.status != "running" or self._sessions.get(session_id) is not state:
            log.debug("dropping an SSE event for stopped session %s", session_id)
            return
        seq = frame.get("seq")
        stream = frame.get("stream")
        if seq is not None and seq <= state.last_seq.get(stream or "", 0):  # a replay this process has seen
            self.duplicate_events += 1
            return
        link.to_store.put_nowait(_QueuedEvent(state, stream, seq, frame.get("data")))

    async def _write_events(self, link: _VmLink) -> None:
        """The link's writer: takes every queued event at once and stores them all in one
        transaction (the link's reader never waits for the database), then lets the heartbeats
        queued among them be acknowledged. An event the database cannot take now closes the link
        (the execution plane sends it again) and ends the writer."""
        while True:
            items = [await link.to_store.get(), *_drain(link.to_store)]
            batches: dict[_SessionState, list[_QueuedEvent]] = {}
            for item in items:
                if isinstance(item, _QueuedEvent):
                    batches.setdefault(item.state, []).append(item)
            try:
                if batches:
                    await self._store_events(link, batches)
            except _LinkClosed:
                _drop_barriers(items)  # their heartbeats are never acknowledged
                return
            for item in items:
                if isinstance(item, asyncio.Future) and not item.done():
                    item.set_result(None)
            if None in items:
                return

    async def _store_events(self, link: _VmLink, batches: dict[_SessionState, list[_QueuedEvent]]) -> None:
        """Store the sessions' events (one transaction, their append locks held in session order)
        and publish what was stored."""
        states = sorted(batches, key=lambda state: state.session_id)
        async with contextlib.AsyncExitStack() as locks:
            for state in states:
                await locks.enter_async_context(state.append_lock)
            offered = [
                (state.session_id, [(queued.stream, queued.seq, queued.data) for queued in batches[state]])
                for state in states
            ]
            try:
                stored = await asyncio.to_thread(self.event_log.append_batches, link.user_id, offered)
            except LogUnavailable as exc:
                # not stored: the execution plane must not take a later heartbeat's acknowledgement
                # for them. Closing the link makes it reconnect and send the events again.
                names = ", ".join(state.session_id for state in states)
                log.error("could not store events of session(s) %s (%s); closing the link", names, exc)
                await self._close_link(link, CLOSE_INTERNAL_ERROR, "could not store an event")
                raise _LinkClosed from None
            for state, appended in zip(states, stored, strict=True):
                self._published(state, len(batches[state]), appended)

    def _published(self, state: _SessionState, offered: int, stored: list[Appended]) -> None:
        """Note the ``seq``s just stored and publish the events (``offered`` came in)."""
        session_id = state.session_id
        self.duplicate_events += offered - len(stored)
        for appended in stored:
            seq, key = appended.event["seq"], appended.event["stream"] or ""
            if seq is not None:
                last = appended.previous_seq or 0
                if seq > last + 1:
                    log.warning(
                        "session %s stream %s skipped events %d-%d (the execution plane dropped them)",
                        session_id,
                        key,
                        last + 1,
                        seq - 1,
                    )
                state.last_seq[key] = seq
            state.publish(appended.event)
        if stored:
            self.notices.stored(session_id, stored[-1].event["id"])


def _resume_result(row: RequestOutcome) -> ResumeResult:
    """What ``resume`` answers for a stored request: its outcome, or ``pending`` while it runs."""
    if row.status == "completed" and row.outcome is not None and row.outcome.get("status") == "completed":
        return cast(ResumeResult, row.outcome)
    if row.status == "running":
        return still_pending()
    return lost()


# -- the app -------------------------------------------------------------------------------------

_TICKET_IN_TEXT = re.compile(r"(ticket=)[^&\s\"']+")
_TOKEN_IN_FRAME = re.compile(r'(\\?"token\\?"\s*:\s*\\?")[^"\\]*')
"""The ``token`` of an ``auth`` frame as websockets' debug lines show it (maybe escaped or cut)."""


class TicketRedactingFilter(logging.Filter):
    """Masks ``ticket=…`` in log records (uvicorn logs each WebSocket's path with its query) and the
    VM token of ``auth`` frames (at DEBUG, websockets logs every frame it receives, an ``auth``
    frame's head and tail included, on uvicorn's logger; not every log format redacts it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                _TICKET_IN_TEXT.sub(r"\1***", arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str) and "ticket=" in record.msg:
            record.msg = _TICKET_IN_TEXT.sub(r"\1***", record.msg)
        if record.levelno <= logging.DEBUG:  # frames are logged at DEBUG, as objects formatted late
            try:
                message = record.getMessage()
            except Exception:  # a malformed record: the handler reports it as usual
                return True
            if "token" in message:
                record.msg, record.args = _TOKEN_IN_FRAME.sub(r"\1***", message), None
        return True


_REDACTION_LOGGERS: Final = ("uvicorn.error", "uvicorn.access")


def install_ticket_redaction() -> None:
    """Add :class:`TicketRedactingFilter` to uvicorn's loggers (once)."""
    for name in _REDACTION_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, TicketRedactingFilter) for existing in logger.filters):
            logger.addFilter(TicketRedactingFilter())


def create_control_plane_app(
    config: ControlPlaneConfig | None = None, *, plane: ControlPlane | None = None
) -> FastAPI:
    """The control plane's ASGI app: ``/ws/vm`` and ``/healthz``. Pass ``config`` (the app owns the
    service it creates and closes it on shutdown) or an existing ``plane`` (``app.state.control_plane``)."""
    if plane is None:
        if config is None:
            raise ValueError("create_control_plane_app needs a config or a plane")
        service = ControlPlane(config)
        owned = True
    else:
        service = plane
        owned = False

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        yield
        await service.aclose()
        if owned:
            service.close()

    install_ticket_redaction()
    app = FastAPI(title="clawlet control plane", lifespan=lifespan)
    app.state.control_plane = service

    @app.websocket(WS_PATH)
    async def exec_plane_socket(websocket: WebSocket) -> None:
        await service.serve_vm(websocket)

    @app.get("/healthz")
    async def health() -> dict[str, Any]:
        return {"ok": True, "connected_exec_planes": len(service.connected_users())}

    return app


def server_config(app: Any, host: str = "127.0.0.1", port: int = 8002, **options: Any) -> uvicorn.Config:
    """A uvicorn config fit for the control plane: frames up to ``MAX_FRAME_BYTES`` (skill packages
    are large) and WebSocket keepalive pings."""
    options.setdefault("ws_max_size", MAX_FRAME_BYTES)
    options.setdefault("ws_ping_interval", 20.0)
    options.setdefault("ws_ping_timeout", 20.0)
    return uvicorn.Config(app, host=host, port=port, **{**uvicorn_options(), **options})


def new_jwt_secret() -> str:
    """A fresh random secret for VM tokens (64 URL-safe characters)."""
    return secrets.token_urlsafe(48)

"""One reconnecting WebSocket client: the transport under the exec plane's control-plane client
(:mod:`clawlet.execplane.client`) and the OpenClaw gateway client (:mod:`clawlet.gateway.client`).

:class:`ReconnectingSocket` owns what both need; the protocol on top gives it a ``handshake`` (what
it says once the socket is open: ``auth``/``init``, or the gateway's ``connect`` challenge), a frame
handler (``on_frame``), its error types and, optionally, hooks for a new and a lost connection.

* :meth:`~ReconnectingSocket.open` is one attempt: ``websockets`` connect with :class:`Limits` (frame
  size, ping interval and timeout, open and close timeouts), then the handshake within the open
  timeout. A failure closes the socket and raises the protocol's error: ``refine`` may turn a
  transport error into its own (an HTTP 401), else "cannot connect …", "did not complete the
  handshake …" or "closed the connection during the handshake …" as ``unavailable``.
* Each :class:`Connection` has a reader task: it decodes every frame (a bad one is logged and
  skipped), shows it to the observer (``observer(direction, frame)``, redacted if asked) and hands it
  to ``on_frame``; a handler that raises is logged. When the reader ends the connection is lost:
  tasks spawned with ``stop_on_loss`` are cancelled, ``on_lost`` runs, and the reconnect loop starts.
* The loop: attempt *k* waits ``schedule()[k]`` seconds (:meth:`~ReconnectingSocket.nudge` cuts the
  wait short: a caller needs the connection now). An error ``is_final`` calls final stops it for
  good (:attr:`~ReconnectingSocket.final_error`, raised by :meth:`~ReconnectingSocket.wait_closed`).
  When every attempt failed, every waiting request fails with "… unreachable: gave up after …" and
  the socket is ``offline``: it stops, or with ``retry_every`` keeps trying at that pace for as long
  as ``retry_while()`` says the connection is still needed (default: always).
* :class:`PendingRequests` holds the requests waiting for an answer, by id, each with its timeout.
* :meth:`~ReconnectingSocket.close` stops the loop, closes the socket, cancels the connection's tasks
  and fails what is still waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException

from clawlet.logs import swallowed

log = logging.getLogger(__name__)
#: websockets logs frames and the opening request at DEBUG (an auth frame or a URL may hold a
#: secret); its logger for these connections never goes below INFO.
_ws_log = logging.getLogger(f"{__name__}.websocket")
_ws_log.setLevel(logging.INFO)

S = TypeVar("S")
SocketState = Literal["idle", "connected", "reconnecting", "offline", "closed"]
FrameObserver = Callable[[str, dict[str, Any]], None]
"""``observer(direction, frame)``: direction ``"in"`` or ``"out"`` (a protocol may add its own)."""


@dataclass(frozen=True)
class Limits:
    """How a socket is opened (``websockets.connect``'s options of the same names)."""

    open_timeout: float = 10.0
    """Also bounds the handshake."""
    close_timeout: float = 2.0
    max_size: int = 64 * 1024 * 1024
    ping_interval: float | None = 20.0
    ping_timeout: float | None = 20.0
    compression: str | None = "deflate"
    """``None``: no permessage-deflate (it costs CPU on every frame, both ends)."""


def safe_url(url: str) -> str:
    """``url`` without its query (a ticket) or credentials, for logs and error messages."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
    except ValueError:
        return "<invalid url>"


def close_description(exc: ConnectionClosed) -> str:
    frame = exc.rcvd or exc.sent
    if frame is None:
        return "connection closed without a close frame"
    return f"closed with code {frame.code}{f' ({frame.reason})' if frame.reason else ''}"


class PendingRequests:
    """Requests waiting for their answer, by id: :meth:`call` waits, the frame handler settles."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[asyncio.Future[Any], str]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def waiting(self) -> dict[str, str]:
        """``{id: method}`` of the requests not settled yet."""
        return {rid: method for rid, (future, method) in self._waiting.items() if not future.done()}

    async def call(
        self, request_id: str, method: str, send: Callable[[], Awaitable[None]], timeout: float
    ) -> Any:
        """Register ``request_id``, ``send()`` it and return its answer; raises what it is failed
        with, or ``TimeoutError`` after ``timeout`` seconds (send included). Leaves nothing behind."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (future, method)
        try:
            async with asyncio.timeout(timeout):
                await send()
                return await future
        finally:
            self._waiting.pop(request_id, None)

    def resolve(self, request_id: str, result: Any) -> bool:
        """Answer a request; ``False`` when it is unknown or already settled (so is :meth:`fail`)."""
        return self._settle(request_id, lambda future: future.set_result(result))

    def fail(self, request_id: str, error: BaseException) -> bool:
        return self._settle(request_id, lambda future: future.set_exception(error))

    def fail_all(self, error: BaseException) -> int:
        """Fail every request still waiting; returns how many."""
        return sum(self.fail(rid, error) for rid in list(self._waiting))

    def _settle(self, request_id: str, settle: Callable[[asyncio.Future[Any]], None]) -> bool:
        entry = self._waiting.get(request_id)
        if entry is None or entry[0].done():
            return False
        settle(entry[0])
        return True


MAX_LINES_BYTES: Final = 1024 * 1024
"""The most text one message of :attr:`Wire.lines` takes (a larger frame goes alone)."""


class Wire:
    """An open socket: send and receive decoded frames (all the handshake gets).

    With :attr:`lines` set (the peer reads several frames in one message, one per line), the
    frames sent within one turn of the event loop go out together as one message: a busy
    sender (many sessions' events at once) pays for one WebSocket message and one write instead
    of one per frame. Each :meth:`send` still returns once its frame is handed to the socket, in
    order, and raises what the socket raised."""

    def __init__(self, owner: ReconnectingSocket[Any], ws: ClientConnection) -> None:
        self.ws = ws
        self._owner = owner
        self.last_frame_at = asyncio.get_running_loop().time()
        """Loop time of the last frame received (bad ones too)."""
        self.lines = False
        self._outbox: list[tuple[str, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def send(self, frame: Any) -> None:
        """Send one frame; raises ``ConnectionClosed``. Tasks may send at the same time: websockets
        writes each whole message at once (no lock needed)."""
        owner = self._owner
        owner.observe("out", frame)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s <- %s", owner.noun, owner.encode(owner.redact(frame))[:500])
        if not self.lines:
            await self.ws.send(owner.encode(frame))
            return
        sent = asyncio.get_running_loop().create_future()
        self._outbox.append((owner.encode(frame), sent))
        if self._flusher is None:  # its first step runs after what this loop turn has ready
            self._flusher = asyncio.create_task(self._flush(), name=f"{owner.noun}-send")
        await sent

    async def _flush(self) -> None:
        """Send the outbox, a message of lines at a time, until it is empty."""
        try:
            while self._outbox:
                size, count = 0, 0
                for text, _ in self._outbox:
                    if count and size + len(text) > MAX_LINES_BYTES:
                        break
                    size += len(text) + 1
                    count += 1
                batch, self._outbox = self._outbox[:count], self._outbox[count:]
                try:
                    await self.ws.send("\n".join(text for text, _ in batch))
                except Exception as exc:  # ConnectionClosed: every sender of the batch gets it
                    for _, sent in batch:
                        if not sent.done():
                            sent.set_exception(exc)
                except BaseException:
                    self._outbox[:0] = batch
                    raise
                else:
                    for _, sent in batch:
                        if not sent.done():
                            sent.set_result(None)
        finally:
            self._flusher = None
            for _, sent in self._outbox:  # cancelled (the loop is closing): nothing more goes out
                sent.cancel()
            self._outbox.clear()

    async def recv(self) -> Any:
        """The next good frame (bad ones are logged and skipped); raises ``ConnectionClosed``."""
        owner = self._owner
        while True:
            raw = await self.ws.recv()
            self.last_frame_at = asyncio.get_running_loop().time()
            try:
                frame = owner.decode(raw)
            except ValueError as exc:
                log.warning("ignoring a bad frame from the %s: %s", owner.noun, exc)
                continue
            owner.observe("in", frame)
            return frame


class Connection(Wire, Generic[S]):
    """One handshaken connection: ``state`` is what the handshake returned."""

    def __init__(self, owner: ReconnectingSocket[S], ws: ClientConnection, number: int, state: S) -> None:
        super().__init__(owner, ws)
        self.number = number
        self.state = state
        self.lost = False
        self.drop_reason: str | None = None
        self.reader: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self._stop_on_loss: set[asyncio.Task[Any]] = set()
        self._dropping: set[asyncio.Task[Any] | None] = set()

    def spawn(self, coro: Awaitable[Any], name: str, *, stop_on_loss: bool = False) -> None:
        """Run ``coro`` for this connection (cancelled on close; on loss too with ``stop_on_loss``)."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        if stop_on_loss:
            self._stop_on_loss.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        self._stop_on_loss.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def drop(self, why: str, code: int = 1011, reason: str = "") -> None:
        """Close this connection because of ``why`` (the reason the loss is logged with)."""
        self.drop_reason = why
        self._dropping.add(asyncio.current_task())  # the loss does not cancel the task closing
        log.warning("%s; dropping the connection", why)
        with swallowed(log, "closing the dropped connection failed"):
            await self.ws.close(code, reason)


class ReconnectingSocket(Generic[S]):
    """A WebSocket client that keeps one handshaken connection up (see the module docstring)."""

    def __init__(
        self,
        url: Callable[[], str],
        *,
        noun: str,
        handshake: Callable[[Wire], Awaitable[S]],
        on_frame: Callable[[Connection[S], Any], None],
        decode: Callable[[str | bytes], Any],
        encode: Callable[[Any], str],
        unavailable: Callable[[str], Exception],
        errors: tuple[type[Exception], ...],
        schedule: Callable[[], Sequence[float]],
        retry_every: float | None = None,
        retry_while: Callable[[], bool] = lambda: True,
        limits: Limits = Limits(),
        is_final: Callable[[Exception], bool] = lambda exc: False,
        refine: Callable[[Exception], Exception | None] = lambda exc: None,
        on_open: Callable[[Connection[S]], None] = lambda conn: None,
        on_lost: Callable[[Connection[S], str], None] = lambda conn, reason: None,
        redact: Callable[[Any], Any] = lambda frame: frame,
        redact_observed: bool = False,
        task_prefix: str = "ws-client",
    ) -> None:
        self.url, self.noun, self.decode, self.encode, self.redact = url, noun, decode, encode, redact
        self.schedule, self.retry_every, self.limits = schedule, retry_every, limits
        self.retry_while = retry_while
        self._handshake, self._on_frame, self._on_open, self._on_lost = handshake, on_frame, on_open, on_lost
        self._unavailable, self._errors, self._is_final, self._refine = unavailable, errors, is_final, refine
        self._redact_observed, self._prefix = redact_observed, task_prefix
        self.observer: FrameObserver | None = None
        self.pending = PendingRequests()
        self.state: SocketState = "idle"
        self.closing = False
        """:meth:`close` was called (and no :meth:`connect` since)."""
        self.connects = 0
        """Successful handshakes so far (the first connect and every reconnect)."""
        self.last_error: BaseException | None = None
        self.final_error: BaseException | None = None
        self._conn: Connection[S] | None = None
        self._lingering: set[Connection[S]] = set()
        """Lost connections whose tasks still run (they end on their own, or at :meth:`close`)."""
        self._manager: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self._nudged = asyncio.Event()

    @property
    def current(self) -> Connection[S] | None:
        return self._conn

    @property
    def started(self) -> bool:
        """:meth:`connect` succeeded once (and :meth:`close` was not called since)."""
        return self._manager is not None

    @property
    def running(self) -> bool:
        """A connection is served or being re-established."""
        return self._manager is not None and not self._manager.done()

    def observe(self, direction: str, frame: Any) -> None:
        if self.observer is None:
            return
        try:
            self.observer(direction, self.redact(frame) if self._redact_observed else frame)
        except Exception:
            log.exception("on_frame callback failed")

    async def send(self, frame: Any) -> None:
        """Send on the current connection; raises ``unavailable`` while there is none."""
        if self._conn is None:
            raise self._unavailable(f"not connected to the {self.noun} ({self.state})")
        await self._conn.send(frame)

    async def connect(self, opener: Callable[[], Awaitable[Connection[S]]] | None = None) -> Connection[S]:
        """One attempt (:meth:`open`, or ``opener``), then keep the connection up in the background."""
        self.closing, self.final_error = False, None
        conn = await (opener or self.open)()
        if self.closing:  # close() ran while connecting
            await self._shutdown(conn)
            self.state = "closed"
            raise self._unavailable(f"the {self.noun} client was closed")
        self._manager = asyncio.create_task(self._manage(conn), name=f"{self._prefix}-manager")
        return conn

    async def open(self) -> Connection[S]:
        """One connection attempt: socket and handshake (see the module docstring)."""
        url = self.url()
        where = safe_url(url)
        log.info("connecting to the %s at %s", self.noun, where)
        try:
            ws = await self._connect(url, where)
            state = await self._greet(ws, where)
        except Exception as exc:
            self.last_error = exc
            raise
        self.connects += 1
        conn = Connection(self, ws, self.connects, state)
        self._conn, self.state, self.last_error = conn, "connected", None
        conn.reader = asyncio.create_task(self._read(conn), name=f"{self._prefix}-reader")
        self._up.set()
        self._on_open(conn)
        return conn

    async def _connect(self, url: str, where: str) -> ClientConnection:
        try:
            return await connect(url, logger=_ws_log, **asdict(self.limits))
        except InvalidURI:
            raise self._unavailable(f"invalid {self.noun} URL {where!r}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            refined = self._refine(exc)
            raise refined or self._unavailable(
                f"cannot connect to the {self.noun} at {where}: {exc}"
            ) from None

    async def _greet(self, ws: ClientConnection, where: str) -> S:
        """The protocol's handshake on a new socket, within the open timeout; closes it on failure."""
        try:
            return await asyncio.wait_for(self._handshake(Wire(self, ws)), self.limits.open_timeout)
        except BaseException as exc:
            with swallowed(log, "closing the socket after a failed handshake failed"):
                await ws.close()
            if isinstance(exc, TimeoutError):
                within = f"within {self.limits.open_timeout:g}s"
                raise self._unavailable(
                    f"the {self.noun} at {where} did not complete the handshake {within}"
                ) from None
            if isinstance(exc, ConnectionClosed):
                refined = self._refine(exc)
                during = f"closed the connection during the handshake ({close_description(exc)})"
                raise refined or self._unavailable(f"the {self.noun} at {where} {during}") from None
            raise

    async def wait_connected(self, deadline: float | None) -> Connection[S]:
        """The connection, once the running reconnect cycle has one (by loop time ``deadline``);
        raises the cycle's error if it ends first."""
        loop = asyncio.get_running_loop()
        while (conn := self._conn) is None:
            manager = self._manager
            if manager is None or manager.done():
                if isinstance(self.last_error, self._errors):
                    raise self.last_error
                raise self._unavailable(f"not connected to the {self.noun}")
            timeout = None if deadline is None else deadline - loop.time()
            if timeout is not None and timeout <= 0:
                raise self._unavailable(f"not connected to the {self.noun} (still reconnecting)")
            up = asyncio.ensure_future(self._up.wait())
            try:
                await asyncio.wait({up, manager}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                up.cancel()
        return conn

    def nudge(self) -> None:
        """Make the reconnect loop's next attempt at once instead of after its backoff."""
        self._nudged.set()

    async def close(self) -> None:
        """Stop for good: no more reconnects, the connection closed, waiting requests failed."""
        self.closing, self.state = True, "closed"
        manager, self._manager = self._manager, None
        if manager is not None and manager is not asyncio.current_task():
            manager.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await manager
        if self._conn is not None:
            await self._shutdown(self._conn)
        for conn in list(self._lingering):
            await self._shutdown(conn)
        self.pending.fail_all(self._unavailable(f"the {self.noun} client was closed"))

    async def wait_closed(self) -> None:
        """Wait until the socket stops for good (:meth:`close`, or a final error, which is raised)."""
        if self._manager is not None:
            await asyncio.wait({self._manager})
        if self.final_error is not None:
            raise self.final_error

    async def _manage(self, conn: Connection[S]) -> None:
        current: Connection[S] | None = conn
        try:
            while current is not None:
                if current.reader is not None:
                    await asyncio.wait({current.reader})
                if self.closing:
                    return
                current = await self._reconnect()
        except Exception as exc:  # a bug, not a network failure: stop and say why
            log.exception("the %s connection manager failed", self.noun)
            self._stop(self._unavailable(f"the {self.noun} connection manager failed: {exc}"))

    async def _reconnect(self) -> Connection[S] | None:
        delays = list(self.schedule())
        last: Exception | None = None
        for attempt, delay in enumerate(delays, start=1):
            log.info("reconnecting to the %s in %gs (attempt %d/%d)", self.noun, delay, attempt, len(delays))
            conn, last = await self._attempt(delay)
            if conn is not None or self._stopped:
                return conn
            log.warning("%s reconnect attempt %d/%d failed: %s", self.noun, attempt, len(delays), last)
        error = self._unavailable(
            f"{self.noun} unreachable: gave up after {len(delays)} reconnect attempts"
            f" over {sum(delays):g}s ({last})"
        )
        self.last_error, self.state = error, "offline"
        failed = self.pending.fail_all(error)
        retry = self.retry_every
        then = "stopping" if retry is None or not self.retry_while() else f"retrying every {retry:g}s"
        log.error("%s; failed %d waiting requests; %s", error, failed, then)
        while retry is not None and self.retry_while():
            conn, last = await self._attempt(retry)
            if conn is not None or self._stopped:
                return conn
            log.info("the %s is still unreachable: %s", self.noun, last)
        return None

    async def _attempt(self, delay: float) -> tuple[Connection[S] | None, Exception | None]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._nudged.wait(), delay)
        self._nudged.clear()
        if self.closing:
            return None, None
        try:
            return await self.open(), None
        except self._errors as exc:
            if self._is_final(exc):
                log.error("%s; not reconnecting", exc)
                self._stop(exc)
            return None, exc

    @property
    def _stopped(self) -> bool:
        return self.state == "closed"

    def _stop(self, error: BaseException) -> None:
        self.final_error = self.last_error = error
        self.state = "closed"
        self.pending.fail_all(error)

    async def _read(self, conn: Connection[S]) -> None:
        reason = "connection closed"
        try:
            while True:
                frame = await conn.recv()
                try:
                    self._on_frame(conn, frame)
                except Exception:
                    log.exception("failed to handle a frame from the %s; ignoring it", self.noun)
        except ConnectionClosed as exc:
            reason = conn.drop_reason or close_description(exc)
        except Exception as exc:  # the reader must end cleanly whatever happens
            log.exception("the %s reader failed", self.noun)
            reason = f"reader failed: {exc}"
        finally:
            self._lost(conn, reason)

    def _lost(self, conn: Connection[S], reason: str) -> None:
        """Mark ``conn`` lost (once): stop its ``stop_on_loss`` tasks and tell the protocol."""
        if conn.lost:
            return
        conn.lost = True
        if self._conn is conn:
            self._conn = None
            self._up.clear()
            if not self.closing and self.state != "closed":
                self.state = "reconnecting"
                log.warning(
                    "lost the connection to the %s (%s); %d requests waiting",
                    self.noun,
                    reason,
                    len(self.pending),
                )
        self._lingering = {c for c in self._lingering if c.tasks} | {conn}
        keep = {asyncio.current_task(), *conn._dropping}
        for task in list(conn._stop_on_loss - keep):
            task.cancel()
        self._on_lost(conn, reason)

    async def _shutdown(self, conn: Connection[S]) -> None:
        self._lost(conn, "client closed")
        with swallowed(log, "closing the connection failed"):
            await conn.ws.close()
        tasks = [t for t in (conn.reader, *conn.tasks) if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class SocketClient:
    """What every protocol client over a :class:`ReconnectingSocket` shows (a mixin over ``_socket``)."""

    _socket: ReconnectingSocket[Any]

    @property
    def connected(self) -> bool:
        return self._socket.current is not None

    @property
    def on_frame(self) -> FrameObserver | None:
        """``on_frame(direction, frame)`` sees every frame ``"in"`` and ``"out"`` (see the client's
        docstring for whether they are redacted); settable at any time."""
        return self._socket.observer

    @on_frame.setter
    def on_frame(self, observer: FrameObserver | None) -> None:
        self._socket.observer = observer

    @property
    def connects(self) -> int:
        """Successful handshakes so far (the first connect and every reconnect)."""
        return self._socket.connects

    @property
    def last_error(self) -> BaseException | None:
        """Why the last connection attempt or cycle failed (``None`` while connected)."""
        return self._socket.last_error

    async def close(self) -> None:
        """Close the connection, stop reconnecting and fail whatever is in flight."""
        await self._socket.close()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

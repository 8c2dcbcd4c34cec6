"""A WebSocket client for the OpenClaw Gateway: clawlet's inbox runs tasks through it.

The client speaks the gateway protocol described in ``shared/design/PROTOCOLS.md`` §1 (v4, still
accepting v3 servers): it waits for ``connect.challenge``, sends ``connect`` as an operator
(``gateway-client``/``backend``, scopes read+write, ``caps:["tool-events"]``, the shared token),
then multiplexes requests (``chat.send``, ``chat.abort``, …) and ``chat`` events over one
connection. Every incoming frame is parsed leniently; a bad frame is logged, never fatal.

Connection lifecycle:

* :meth:`GatewayClient.start` makes **one** connection attempt (bounded by ``request_timeout``) and
  returns once ``hello-ok`` arrives. It raises :class:`GatewayUnavailable` when the gateway cannot
  be reached and :class:`~clawlet.gateway.protocol.GatewayError` when it refuses the ``connect``
  (token, protocol, pairing); a failed ``start()`` leaves nothing running behind it.
* Once connected, a background task keeps the connection up. A ``tick`` watchdog drops a
  connection that stays silent for twice ``policy.tickIntervalMs``. When the connection is lost,
  every pending request and every in-flight :meth:`GatewayClient.chat` fails with
  :class:`GatewayUnavailable` at once (the run may still finish on the gateway), and the client
  reconnects up to ``max_reconnects`` times with exponential backoff (``backoff_initial`` doubling,
  capped at ``backoff_max``; the count starts afresh after each successful connect). After that it
  keeps trying every ``backoff_max`` seconds for as long as ``keep_reconnecting()`` is true (the
  inbox sets it while tasks wait for the gateway), else it stops. A connect that the gateway refuses
  (``ok:false`` that is not ``retryable``) ends the cycle at once.
* :meth:`GatewayClient.connect_by` waits for a connection up to a deadline: it rides a reconnect
  under way, or keeps making attempts with the same backoff, and raises the last error once the
  deadline passes.
* While a reconnect is under way, new requests wait for it (within their own timeout). After the
  client gave up (or before it was ever started) a request makes a fresh ``start()`` attempt, so it
  fails fast if the gateway is still down and starts a new connect cycle if it is back.

Nothing here logs the token; frames handed to ``on_frame`` are the real ones (the ``connect`` frame
carries it), so a logging ``on_frame`` should pass them through :func:`redact_frame`.

The transport (opening the socket, the reader, the reconnect loop, waiting requests, closing) is
:class:`clawlet.ws_client.ReconnectingSocket`; this module is the gateway protocol over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import sys
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from websockets.exceptions import ConnectionClosed

from clawlet import __version__
from clawlet.gateway.answers import ChatHistory, chat_abort_result, chat_history, chat_send_result
from clawlet.gateway.payloads import ChatAbortResult, ChatSendResult
from clawlet.gateway.protocol import (
    CAP_TOOL_EVENTS,
    DEFAULT_TICK_INTERVAL_MS,
    DETAIL_PROTOCOL_MISMATCH,
    EVENT_AGENT,
    EVENT_CHALLENGE,
    EVENT_CHAT,
    EVENT_SHUTDOWN,
    EVENT_TICK,
    INVALID_REQUEST,
    MIN_PROTOCOL_VERSION,
    OPERATOR_SCOPES,
    PROTOCOL_VERSION,
    GatewayError,
    decode,
    encode,
    message_text,
    parse_session_key,
    request_frame,
)
from clawlet.ws_client import (
    Connection,
    Limits,
    ReconnectingSocket,
    SocketClient,
    Wire,
    close_description,
    safe_url,
)

log = logging.getLogger(__name__)

ChatState = Literal["delta", "final", "aborted", "error"]
TERMINAL_STATES: frozenset[str] = frozenset({"final", "aborted", "error"})

FrameCallback = Callable[[str, dict[str, Any]], None]
ToolEventCallback = Callable[[str, dict[str, Any]], None]
ChatEventCallback = Callable[[dict[str, Any]], None]

#: Incoming frames may be large (chat histories); the gateway is a trusted peer.
MAX_INCOMING_FRAME_BYTES = 64 * 1024 * 1024
#: How long closing a connection may wait for the peer's close frame.
CLOSE_TIMEOUT = 2.0
#: Chat events of runs nobody is watching (yet) are kept briefly: a ``chat.send`` ack whose runId
#: differs from the idempotency key may arrive after the run's first events.
UNCLAIMED_EVENTS_KEPT = 256
#: The ``chat.abort`` sent after a chat timeout waits at most this long for its answer.
ABORT_TIMEOUT = 5.0
STARTUP_RETRY_MIN = 0.25
"""The shortest wait before retrying a connect the gateway refused as ``retryable``."""
#: Close code the client uses when its tick watchdog drops a silent connection.
CLOSE_TICK_TIMEOUT = 4000

LOST_MESSAGE = "the gateway connection was lost; the run may still finish on the gateway"


class GatewayUnavailable(Exception):
    """No usable gateway connection: never connected, connection lost, gave up reconnecting, or a
    request timed out. The work may or may not have been carried out by the gateway."""


@dataclass(frozen=True)
class ChatUpdate:
    """One ``chat`` event of a run, with the text accumulated so far."""

    state: ChatState
    run_id: str
    text: str
    """Cumulative assistant text so far (for ``final``: the whole reply)."""
    delta: str = ""
    """Text this update added (with ``replaced``: the text that replaced everything before)."""
    error: str | None = None
    """``errorMessage`` for ``error``; the reason for ``aborted``."""
    error_kind: str | None = None
    stop_reason: str | None = None
    usage: Any = None
    replaced: bool = False
    """The text was replaced rather than extended (v4 ``replace:true``, or a v3 snapshot that does
    not continue the previous one)."""
    seq: int | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class ChatAccumulator:
    """Turns one run's ``chat`` event payloads into :class:`ChatUpdate` values.

    Understands v3 cumulative ``message`` snapshots and v4 ``deltaText`` (appended, or replacing
    the text with ``replace:true``); when a v4 event also carries a snapshot, the snapshot wins for
    ``text`` (it repairs missed events). Duplicate non-terminal events (a ``seq`` not above the last
    one) are dropped; gaps are tolerated.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.text = ""
        self.last_seq: int | None = None
        self.done = False

    def apply(self, payload: dict[str, Any]) -> ChatUpdate | None:
        """The update for one event payload, or ``None`` for events that carry no update
        (``status`` phases, unknown states, duplicates, anything after the terminal event)."""
        if self.done:
            return None
        state = payload.get("state")
        seq = payload.get("seq")
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        if state not in ("delta", "final", "aborted", "error"):
            log.debug("run %s: ignoring chat event with state %r", self.run_id, state)
            return None
        if state == "delta" and seq is not None and self.last_seq is not None and seq <= self.last_seq:
            log.debug("run %s: dropping duplicate chat delta seq=%s", self.run_id, seq)
            return None
        if seq is not None:
            self.last_seq = seq if self.last_seq is None else max(seq, self.last_seq)
        if state == "delta":
            return self._delta(payload, seq)
        self.done = True
        return self._terminal(state, payload, seq)

    def _snapshot(self, payload: dict[str, Any]) -> str | None:
        if "message" not in payload or payload.get("message") is None:
            return None
        return message_text(payload.get("message"))

    def _delta(self, payload: dict[str, Any], seq: int | None) -> ChatUpdate:
        previous = self.text
        snapshot = self._snapshot(payload)
        delta_text = payload.get("deltaText")
        replaced = False
        if isinstance(delta_text, str):
            if payload.get("replace") is True:
                self.text, delta, replaced = delta_text, delta_text, True
            else:
                self.text, delta = previous + delta_text, delta_text
            if snapshot and snapshot != self.text:
                log.debug("run %s: deltaText disagrees with the snapshot; using the snapshot", self.run_id)
                self.text = snapshot
        elif snapshot is not None:
            if snapshot.startswith(previous):
                delta = snapshot[len(previous) :]
            else:
                delta, replaced = snapshot, True
            self.text = snapshot
        else:
            delta = ""
        usage = payload.get("usage")
        return ChatUpdate("delta", self.run_id, self.text, delta, usage=usage, replaced=replaced, seq=seq)

    def _terminal(self, state: str, payload: dict[str, Any], seq: int | None) -> ChatUpdate:
        previous = self.text
        snapshot = self._snapshot(payload)
        if snapshot:
            self.text = snapshot
        delta = self.text[len(previous) :] if self.text.startswith(previous) else self.text
        replaced = not self.text.startswith(previous)
        stop_reason = _opt_str(payload.get("stopReason"))
        error_message = _opt_str(payload.get("errorMessage"))
        if state == "final":
            return ChatUpdate(
                "final",
                self.run_id,
                self.text,
                delta,
                stop_reason=stop_reason,
                usage=payload.get("usage"),
                replaced=replaced,
                seq=seq,
            )
        if state == "aborted":
            reason = error_message or (f"aborted ({stop_reason})" if stop_reason else "aborted")
            return ChatUpdate(
                "aborted", self.run_id, self.text, delta, error=reason, stop_reason=stop_reason, seq=seq
            )
        return ChatUpdate(
            "error",
            self.run_id,
            self.text,
            delta,
            error=error_message or "the gateway reported an error without a message",
            error_kind=_opt_str(payload.get("errorKind")),
            stop_reason=stop_reason,
            usage=payload.get("usage"),
            seq=seq,
        )


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def redact_frame(frame: dict[str, Any]) -> dict[str, Any]:
    """A copy of a frame fit for logs: ``connect``'s ``auth`` secrets replaced by ``***``."""
    params = frame.get("params")
    if not (isinstance(params, dict) and isinstance(params.get("auth"), dict)):
        return frame
    clean = copy.deepcopy(frame)
    clean["params"]["auth"] = {key: "***" for key in clean["params"]["auth"]}
    return clean


@dataclass(eq=False)
class _RunWatch:
    """An in-flight :meth:`GatewayClient.chat`: the run ids it answers to and its event queue."""

    session_key: str
    run_ids: set[str]
    queue: asyncio.Queue[dict[str, Any] | BaseException] = field(default_factory=asyncio.Queue)

    def accepts(self, payload: dict[str, Any]) -> bool:
        key = payload.get("sessionKey")
        return not isinstance(key, str) or not key or _same_session(key, self.session_key)


def _send_params(session_key: str, message: str, idempotency_key: str) -> dict[str, Any]:
    return {"sessionKey": session_key.lower(), "message": message, "idempotencyKey": idempotency_key}


def _same_session(key: Any, ours: str) -> bool:
    """Whether an event's ``sessionKey`` names the session ``ours`` (lower-cased)."""
    if not isinstance(key, str) or not key:
        return False
    return key.lower() == ours or parse_session_key(key) == parse_session_key(ours)


@dataclass(eq=False)
class _Session:
    """What one gateway connection adds to the socket's: ``hello-ok`` and the runs it carries."""

    hello: dict[str, Any]
    protocol: int
    tick_interval: float
    runs: dict[str, _RunWatch] = field(default_factory=dict)
    unclaimed: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=UNCLAIMED_EVENTS_KEPT))
    last_seq: int | None = None
    lost: GatewayUnavailable | None = None


_Conn = Connection[_Session]


class GatewayClient(SocketClient):
    """An operator connection to an OpenClaw gateway (see the module docstring for the lifecycle).
    ``on_frame`` sees the frames unredacted."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        request_timeout: float = 30.0,
        max_reconnects: int = 10,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        client_id: str = "gateway-client",
        client_mode: str = "backend",
        on_frame: FrameCallback | None = None,
        min_protocol: int = MIN_PROTOCOL_VERSION,
        max_protocol: int = PROTOCOL_VERSION,
    ) -> None:
        self.url = url
        self._token = token
        self.request_timeout = request_timeout
        self.max_reconnects = max(0, max_reconnects)
        self.backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self.client_id = client_id
        self.client_mode = client_mode
        self.min_protocol = min_protocol
        self.max_protocol = max_protocol
        self._socket = ReconnectingSocket[_Session](
            lambda: self.url,
            noun="gateway",
            handshake=self._handshake,
            on_frame=self._dispatch,
            decode=decode,
            encode=encode,
            unavailable=GatewayUnavailable,
            errors=(GatewayError, GatewayUnavailable),
            schedule=lambda: [self.backoff_delay(n) for n in range(1, self.max_reconnects + 1)],
            retry_every=backoff_max,
            retry_while=lambda: self.keep_reconnecting(),
            limits=Limits(
                open_timeout=request_timeout, close_timeout=CLOSE_TIMEOUT, max_size=MAX_INCOMING_FRAME_BYTES
            ),
            is_final=lambda exc: isinstance(exc, GatewayError) and not exc.retryable,
            on_open=self._opened,
            on_lost=self._lost,
            redact=redact_frame,
            task_prefix="gateway-client",
        )
        self._socket.observer = on_frame
        self._start_lock = asyncio.Lock()
        self._hello: dict[str, Any] | None = None
        self._protocol: int | None = None
        self._tool_listeners: list[tuple[Callable[[str], bool], ToolEventCallback]] = []
        self._chat_listeners: list[tuple[str, ChatEventCallback]] = []
        self.keep_reconnecting: Callable[[], bool] = lambda: False
        """Whether to keep trying (every ``backoff_max`` s) once ``max_reconnects`` attempts failed."""

    # -- state ---------------------------------------------------------------------------------

    @property
    def protocol(self) -> int | None:
        """The negotiated protocol version of the current (or last) connection."""
        return self._protocol

    @property
    def hello(self) -> dict[str, Any] | None:
        """The ``hello-ok`` payload of the current (or last) connection."""
        return self._hello

    @property
    def tick_interval(self) -> float | None:
        """``policy.tickIntervalMs`` of the current connection, in seconds."""
        conn = self._socket.current
        return conn.state.tick_interval if conn is not None else None

    @property
    def backoff_max(self) -> float:
        """The longest wait between reconnect attempts (also the pace once they are spent)."""
        return self._backoff_max

    @backoff_max.setter
    def backoff_max(self, value: float) -> None:
        self._backoff_max = value
        self._socket.retry_every = value

    def backoff_delay(self, attempt: int) -> float:
        """Seconds to wait before reconnect attempt ``attempt`` (1-based): 1, 2, 4, … capped."""
        return float(min(self.backoff_max, self.backoff_initial * 2 ** max(0, attempt - 1)))

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (one attempt) and return once ``hello-ok`` arrived; see the module docstring.

        Returns at once when already connected; while a reconnect cycle is under way, waits for its
        outcome. Raises :class:`GatewayUnavailable` or :class:`GatewayError`.
        """
        async with self._start_lock:
            if self.connected:
                return
            if self._socket.running:
                await self._socket.wait_connected(None)
                return
            await self._socket.connect(self._open_retrying_startup)

    async def _open_retrying_startup(self) -> _Conn:
        """One connection attempt; a refusal the gateway marks ``retryable`` (real OpenClaw answers
        ``UNAVAILABLE`` "gateway starting; retry shortly" for a second or two after its port opens)
        is retried after its ``retryAfterMs`` until ``request_timeout`` runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        while True:
            try:
                return await self._socket.open()
            except GatewayError as exc:
                wait = max(STARTUP_RETRY_MIN, (exc.retry_after_ms or 0) / 1000)
                if not exc.retryable or loop.time() + wait >= deadline:
                    raise
                log.info("the gateway asked to retry the connect in %.2fs: %s", wait, exc)
                await asyncio.sleep(wait)

    async def connect_by(self, deadline: float) -> None:
        """Return once connected, by loop time ``deadline``: waits for a reconnect under way (its
        next attempt made at once), or makes attempts with :meth:`backoff_delay` between them.
        Raises :class:`GatewayUnavailable` (the last attempt's error) when the deadline passes,
        :class:`GatewayError` when refused."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while not self.connected:
            try:
                if self._socket.running:
                    self._socket.nudge()
                    await self._socket.wait_connected(deadline)
                else:
                    async with asyncio.timeout_at(deadline):
                        await self.start()
            except (GatewayUnavailable, TimeoutError) as exc:
                last = self.last_error or exc
                attempt += 1
                wait = min(self.backoff_delay(attempt), deadline - loop.time())
                if wait <= 0:
                    raise GatewayUnavailable(str(last) or "still connecting") from None
                await asyncio.sleep(wait)

    async def __aenter__(self) -> GatewayClient:
        await self.start()
        return self

    # -- requests ------------------------------------------------------------------------------

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Send a request and return its ``payload`` as received (:meth:`send`, :meth:`abort` and
        :meth:`history` return theirs typed).

        Raises :class:`GatewayError` on ``ok:false`` and :class:`GatewayUnavailable` when there is
        no connection, it is lost before the answer, or no answer comes within ``timeout`` seconds
        (default ``request_timeout``).
        """
        limit = self.request_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        conn = await self._ensure_connected(deadline)
        return await self._request_on(conn, method, params, max(0.0, deadline - loop.time()), limit)

    async def abort(self, session_key: str, run_id: str | None = None) -> ChatAbortResult:
        """``chat.abort`` one run (or every run of the session when ``run_id`` is ``None``)."""
        params: dict[str, Any] = {"sessionKey": session_key.lower()}
        if run_id:
            params["runId"] = run_id
        return chat_abort_result(await self.request("chat.abort", params))

    async def send(
        self, session_key: str, message: str, idempotency_key: str, *, timeout: float | None = None
    ) -> ChatSendResult:
        """``chat.send`` without watching the run (:meth:`chat` watches it): its ack."""
        params = _send_params(session_key, message, idempotency_key)
        return chat_send_result(await self.request("chat.send", params, timeout=timeout), idempotency_key)

    async def history(self, session_key: str, *, timeout: float | None = None) -> ChatHistory:
        """``chat.history`` of a session: its transcript's messages."""
        return chat_history(
            await self.request("chat.history", {"sessionKey": session_key.lower()}, timeout=timeout)
        )

    async def chat(
        self,
        session_key: str,
        message: str,
        idempotency_key: str,
        *,
        timeout: float,
        on_tool: ToolEventCallback | None = None,
    ) -> AsyncGenerator[ChatUpdate]:
        """Send ``chat.send`` and yield an update per ``chat`` event of the run.

        The run id is the ack's ``runId`` (normally the idempotency key). Yields until the terminal
        update (``final``, ``aborted`` or ``error``), which is yielded last. Raises
        :class:`GatewayUnavailable` if the connection is lost mid-run (or the ack does not come),
        :class:`GatewayError` if the gateway refuses the send, and :class:`TimeoutError` when no
        terminal event arrives within ``timeout`` seconds (after sending ``chat.abort``).
        ``on_tool(run_id, payload)`` sees the run's ``agent`` events of stream ``tool``.
        Leaving the loop early stops watching the run but does not abort it (use :meth:`abort`).
        """
        key = session_key.lower()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        conn = await self._ensure_connected(min(deadline, loop.time() + self.request_timeout))
        watch = _RunWatch(key, {idempotency_key})
        self._watch(conn, watch, idempotency_key)
        listener: tuple[Callable[[str], bool], ToolEventCallback] | None = None
        if on_tool is not None:
            listener = (lambda run_id: run_id in watch.run_ids, on_tool)
            self._tool_listeners.append(listener)
        try:
            params = _send_params(key, message, idempotency_key)
            ack_timeout = max(0.0, min(self.request_timeout, deadline - loop.time()))
            ack = chat_send_result(
                await self._request_on(conn, "chat.send", params, ack_timeout, ack_timeout), idempotency_key
            )
            if ack["status"] != "started":
                log.info("chat.send for %s answered status %r", idempotency_key, ack["status"])
            run_id = ack["runId"]
            if run_id != idempotency_key:
                self._watch(conn, watch, run_id)
            accumulator = ChatAccumulator(run_id)
            while True:
                remaining = deadline - loop.time()
                try:
                    if remaining <= 0:
                        raise TimeoutError
                    item = await asyncio.wait_for(watch.queue.get(), remaining)
                except TimeoutError:
                    await self._abort_after_timeout(conn, key, run_id)
                    raise TimeoutError(
                        f"gateway run {run_id} did not finish within {timeout:g}s; sent chat.abort"
                    ) from None
                if isinstance(item, BaseException):
                    raise item
                update = accumulator.apply(item)
                if update is None:
                    continue
                yield update
                if update.terminal:
                    return
        finally:
            for rid in watch.run_ids:
                if conn.state.runs.get(rid) is watch:
                    del conn.state.runs[rid]
            if listener is not None:
                with contextlib.suppress(ValueError):
                    self._tool_listeners.remove(listener)

    def on_tool_event(self, callback: ToolEventCallback, run_id: str | None = None) -> Callable[[], None]:
        """Call ``callback(run_id, payload)`` for every ``agent`` event of stream ``tool`` (of one
        run, or of all runs). Returns a function that removes the listener."""
        listener: tuple[Callable[[str], bool], ToolEventCallback] = (
            (lambda rid: True) if run_id is None else (lambda rid: rid == run_id),
            callback,
        )
        self._tool_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._tool_listeners.remove(listener)

        return remove

    def on_chat_event(self, session_key: str, callback: ChatEventCallback) -> Callable[[], None]:
        """Call ``callback(payload)`` for every ``chat`` event of ``session_key`` (any run, watched
        or not). Returns a function that removes the listener."""
        listener = (session_key.lower(), callback)
        self._chat_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._chat_listeners.remove(listener)

        return remove

    # -- internals: requests -------------------------------------------------------------------

    async def _ensure_connected(self, deadline: float) -> _Conn:
        if self._socket.closing:
            raise GatewayUnavailable("the gateway client is closed")
        if not self._socket.running:
            await self.start()
        return await self._socket.wait_connected(deadline)

    async def _request_on(
        self, conn: _Conn, method: str, params: dict[str, Any] | None, timeout: float, limit: float
    ) -> Any:
        if conn.lost:
            raise conn.state.lost or GatewayUnavailable(LOST_MESSAGE)
        request_id = str(uuid.uuid4())
        frame = request_frame(request_id, method, params)
        try:
            return await self._socket.pending.call(request_id, method, lambda: conn.send(frame), timeout)
        except TimeoutError:
            raise GatewayUnavailable(f"the gateway did not answer {method} within {limit:g}s") from None
        except ConnectionClosed as exc:
            raise GatewayUnavailable(f"{LOST_MESSAGE} ({close_description(exc)})") from exc

    async def _abort_after_timeout(self, conn: _Conn, session_key: str, run_id: str) -> None:
        timeout = min(self.request_timeout, ABORT_TIMEOUT)
        try:
            await self._request_on(
                conn, "chat.abort", {"sessionKey": session_key, "runId": run_id}, timeout, timeout
            )
        except (GatewayError, GatewayUnavailable) as exc:
            log.warning("chat.abort for timed-out run %s failed: %s", run_id, exc)

    def _watch(self, conn: _Conn, watch: _RunWatch, run_id: str) -> None:
        """Route ``run_id``'s chat events to ``watch`` (and hand it those that came early)."""
        session = conn.state
        watch.run_ids.add(run_id)
        session.runs[run_id] = watch
        if not session.unclaimed:
            return
        keep: deque[dict[str, Any]] = deque(maxlen=UNCLAIMED_EVENTS_KEPT)
        for payload in session.unclaimed:
            if payload.get("runId") == run_id and watch.accepts(payload):
                watch.queue.put_nowait(payload)
            else:
                keep.append(payload)
        session.unclaimed = keep

    # -- internals: connecting -----------------------------------------------------------------

    def _connect_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "minProtocol": self.min_protocol,
            "maxProtocol": self.max_protocol,
            "client": {
                "id": self.client_id,
                "displayName": "clawlet",
                "version": __version__,
                "platform": sys.platform,
                "mode": self.client_mode,
            },
            "role": "operator",
            "scopes": list(OPERATOR_SCOPES),
            "caps": [CAP_TOOL_EVENTS],
        }
        if self._token:
            params["auth"] = {"token": self._token}
        return params

    async def _handshake(self, wire: Wire) -> _Session:
        """The gateway's side of opening a connection: challenge, ``connect``, ``hello-ok``."""
        while True:  # the gateway speaks first
            frame = await wire.recv()
            if frame.get("type") == "event" and frame.get("event") == EVENT_CHALLENGE:
                break
        request_id = str(uuid.uuid4())
        await wire.send(request_frame(request_id, "connect", self._connect_params()))
        while True:
            frame = await wire.recv()
            if frame.get("type") != "res" or frame.get("id") != request_id:
                continue
            if frame.get("ok") is False or ("ok" not in frame and "error" in frame):
                raise GatewayError.from_error_shape(frame.get("error"))
            payload = frame.get("payload")
            hello = payload if isinstance(payload, dict) else {}
            break
        protocol = self._negotiated(hello)
        policy = hello.get("policy")
        tick_ms = policy.get("tickIntervalMs") if isinstance(policy, dict) else None
        if not isinstance(tick_ms, int | float) or isinstance(tick_ms, bool) or tick_ms <= 0:
            tick_ms = DEFAULT_TICK_INTERVAL_MS
        return _Session(hello, protocol, tick_ms / 1000.0)

    def _opened(self, conn: _Conn) -> None:
        self._hello = conn.state.hello
        self._protocol = conn.state.protocol
        conn.spawn(self._watchdog(conn), "gateway-client-watchdog", stop_on_loss=True)
        log.info(
            "connected to the OpenClaw gateway at %s (protocol %d)", safe_url(self.url), conn.state.protocol
        )

    def _negotiated(self, hello: dict[str, Any]) -> int:
        protocol = hello.get("protocol")
        if not isinstance(protocol, int) or isinstance(protocol, bool):
            log.warning("hello-ok without a protocol version; assuming %d", self.min_protocol)
            return self.min_protocol
        if not self.min_protocol <= protocol <= self.max_protocol:
            raise GatewayError(
                INVALID_REQUEST,
                f"the gateway chose protocol {protocol};"
                f" clawlet speaks {self.min_protocol}..{self.max_protocol}",
                {"code": DETAIL_PROTOCOL_MISMATCH, "protocol": protocol},
            )
        return protocol

    # -- internals: the open connection --------------------------------------------------------

    def _dispatch(self, conn: _Conn, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "res":
            self._on_response(conn, frame)
        elif kind == "event":
            self._on_event(conn, frame)
        else:
            log.debug("ignoring a %s frame from the gateway", kind)

    def _on_response(self, conn: _Conn, frame: dict[str, Any]) -> None:
        request_id, pending = str(frame.get("id")), self._socket.pending
        if frame.get("ok") is False or ("ok" not in frame and "error" in frame):
            settled = pending.fail(request_id, GatewayError.from_error_shape(frame.get("error")))
        else:
            settled = pending.resolve(request_id, frame.get("payload"))
        if not settled:
            log.debug("response to an unknown or finished request %r", frame.get("id"))

    def _on_event(self, conn: _Conn, frame: dict[str, Any]) -> None:
        seq, session = frame.get("seq"), conn.state
        if isinstance(seq, int) and not isinstance(seq, bool):
            if session.last_seq is not None and seq != session.last_seq + 1:
                log.debug("gateway event seq jumped from %d to %d", session.last_seq, seq)
            session.last_seq = seq
        name = frame.get("event")
        payload = frame.get("payload")
        if name == EVENT_CHAT:
            self._on_chat(conn, payload)
        elif name == EVENT_AGENT:
            self._on_agent(payload)
        elif name == EVENT_SHUTDOWN:
            log.info("the gateway is shutting down: %s", payload)
        elif name not in (EVENT_TICK, EVENT_CHALLENGE):
            log.debug("ignoring gateway event %r", name)

    def _on_chat(self, conn: _Conn, payload: Any) -> None:
        if not isinstance(payload, dict) or not isinstance(payload.get("runId"), str):
            log.debug("ignoring a chat event without a runId")
            return
        for key, callback in list(self._chat_listeners):
            if _same_session(payload.get("sessionKey"), key):
                try:
                    callback(payload)
                except Exception:
                    log.exception("chat event callback failed")
        watch = conn.state.runs.get(payload["runId"])
        if watch is not None and watch.accepts(payload):
            watch.queue.put_nowait(payload)
        else:
            conn.state.unclaimed.append(payload)

    def _on_agent(self, payload: Any) -> None:
        if not isinstance(payload, dict) or payload.get("stream") != "tool":
            return
        run_id = payload.get("runId")
        if not isinstance(run_id, str):
            return
        for matches, callback in list(self._tool_listeners):
            if matches(run_id):
                try:
                    callback(run_id, payload)
                except Exception:
                    log.exception("tool event callback failed")

    async def _watchdog(self, conn: _Conn) -> None:
        """Drop the connection when no frame arrived for twice the tick interval."""
        loop = asyncio.get_running_loop()
        limit = 2 * conn.state.tick_interval
        while not conn.lost:
            delay = conn.last_frame_at + limit - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            why = f"no frame from the gateway for {limit:g}s (tick watchdog)"
            await conn.drop(why, CLOSE_TICK_TIMEOUT, "tick timeout")
            return

    def _lost(self, conn: _Conn, reason: str) -> None:
        """``conn`` is lost: fail everything in flight on it."""
        closed = self._socket.closing
        error = GatewayUnavailable(
            "the gateway client was closed" if closed else f"{LOST_MESSAGE} ({reason})"
        )
        conn.state.lost = error
        if not closed:
            self._socket.last_error = error  # the connection dropped: say so until it is back
        self._socket.pending.fail_all(error)
        for watch in set(conn.state.runs.values()):
            watch.queue.put_nowait(error)
        conn.state.unclaimed.clear()

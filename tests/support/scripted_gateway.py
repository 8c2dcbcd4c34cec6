"""A scriptable fake OpenClaw gateway: a real ``websockets`` server on 127.0.0.1 for client tests.

It speaks the handshake the real gateway speaks (``connect.challenge`` → ``connect`` →
``hello-ok``, see ``shared/design/PROTOCOLS.md`` §1) with a configurable protocol range, tick
interval and token, records every frame each side sent, and lets a test script the rest:

* ``gateway.chat_handler`` runs once per ``chat.send`` (after the ack) with a :class:`ScriptedRun`
  whose helpers emit v3 snapshots (:meth:`ScriptedRun.snapshot`), v4 ``deltaText`` deltas
  (:meth:`ScriptedRun.delta`, with ``replace``), ``final`` / ``error`` / ``aborted`` and tool events;
* ``gateway.methods[name]`` answers other requests: a payload, a callable, a ``GatewayError``, or
  :data:`SILENT` (never answered);
* ``connection.silent`` stops ticks and every other frame on that connection (trips a client's
  watchdog); ``connection.drop()`` kills the socket; ``refuse_connections`` closes new connections
  before the challenge; :meth:`ScriptedGateway.stop` / :meth:`ScriptedGateway.start` restart the
  server on the same port.

What it sends is meant to be schema-valid (tests check that, so the fake stays faithful).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from clawlet.gateway.protocol import (
    DETAIL_AUTH_TOKEN_MISMATCH,
    DETAIL_PROTOCOL_MISMATCH,
    INVALID_REQUEST,
    MAX_FRAME_BYTES,
    OPERATOR_SCOPES,
    GatewayError,
    assistant_message,
    event_frame,
    now_ms,
    response_error,
    response_ok,
)
from tests.support.scripted_ws import ScriptedWsServer


class _Silent:
    def __repr__(self) -> str:
        return "SILENT"


SILENT: Any = _Silent()
"""A ``methods`` entry that is never answered (for request timeouts)."""

ChatHandler = Callable[["ScriptedRun"], Awaitable[None]]


class ScriptedRun:
    """One ``chat.send`` run: helpers emit its ``chat`` (and ``agent``) events."""

    def __init__(self, conn: ScriptedConnection, run_id: str, session_key: str, message: str) -> None:
        self.conn = conn
        self.run_id = run_id
        self.session_key = session_key
        self.message = message
        self.seq = 0
        self.text = ""
        self.finished = False
        self.task: asyncio.Task[None] | None = None

    async def chat_event(self, state: str, **fields: Any) -> None:
        """Emit a raw chat event of this run (``fields`` may override runId/sessionKey/seq)."""
        self.seq += 1
        payload = {"runId": self.run_id, "sessionKey": self.session_key, "seq": self.seq, "state": state}
        payload.update(fields)
        if state in ("final", "aborted", "error"):
            self.finished = True
        await self.conn.event("chat", payload)

    async def snapshot(self, text: str) -> None:
        """A v3 delta: only the cumulative ``message`` snapshot."""
        self.text = text
        await self.chat_event("delta", message=assistant_message(text))

    async def delta(self, delta_text: str, *, replace: bool = False, message: bool = True) -> None:
        """A v4 delta: ``deltaText`` (``replace`` replaces the text) plus the cumulative snapshot."""
        self.text = delta_text if replace else self.text + delta_text
        fields: dict[str, Any] = {"deltaText": delta_text}
        if replace:
            fields["replace"] = True
        if message:
            fields["message"] = assistant_message(self.text)
        await self.chat_event("delta", **fields)

    async def stream(self, chunks: list[str]) -> None:
        """Stream chunks in the style of the negotiated protocol."""
        for chunk in chunks:
            if (self.conn.protocol or 4) >= 4:
                await self.delta(chunk)
            else:
                await self.snapshot(self.text + chunk)

    async def final(
        self, text: str | None = None, *, stop_reason: str = "stop", usage: Any = None, message: bool = True
    ) -> None:
        if text is not None:
            self.text = text
        fields: dict[str, Any] = {"stopReason": stop_reason}
        if message:
            fields["message"] = assistant_message(self.text)
        if usage is not None:
            fields["usage"] = usage
        await self.chat_event("final", **fields)

    async def error(self, error_message: str, kind: str | None = None) -> None:
        fields: dict[str, Any] = {"errorMessage": error_message}
        if kind is not None:
            fields["errorKind"] = kind
        await self.chat_event("error", **fields)

    async def aborted(self, stop_reason: str = "rpc") -> None:
        fields: dict[str, Any] = {"stopReason": stop_reason}
        if self.text:
            fields["message"] = assistant_message(self.text)
        await self.chat_event("aborted", **fields)

    async def tool(self, phase: str, name: str, **data: Any) -> None:
        """An ``agent`` event of stream ``tool`` for this run."""
        self.seq += 1
        payload = {
            "runId": self.run_id,
            "seq": self.seq,
            "stream": "tool",
            "ts": now_ms(),
            "data": {"phase": phase, "name": name, **data},
        }
        await self.conn.event("agent", payload)

    async def hang(self) -> None:
        """Never finish (until aborted or the connection ends)."""
        await asyncio.Event().wait()


async def echo_handler(run: ScriptedRun) -> None:
    """The default run: the reply ``Echo: <message>`` in three chunks, then ``final``."""
    reply = f"Echo: {run.message}"
    third = max(1, len(reply) // 3)
    await run.stream([reply[:third], reply[third : 2 * third], reply[2 * third :]])
    await run.final(usage={"input": 3, "output": 4})


class ScriptedConnection:
    """One client connection, with every frame each side sent."""

    def __init__(self, gateway: ScriptedGateway, ws: ServerConnection, index: int) -> None:
        self.gateway = gateway
        self.ws = ws
        self.index = index
        self.conn_id = f"conn-{index}-{uuid.uuid4().hex[:8]}"
        self.received: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.early_frames: list[dict[str, Any]] = []
        """Frames the client sent before the challenge (should be none)."""
        self.bad_frames: list[str] = []
        self.challenge_sent_at: float | None = None
        self.connect_received_at: float | None = None
        self.connect_params: dict[str, Any] | None = None
        self.protocol: int | None = None
        self.handshaken = False
        self.silent = False
        self.seq = 0
        self.runs: list[ScriptedRun] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.closed = asyncio.Event()
        self.close_code: int | None = None

    async def send(self, frame: dict[str, Any]) -> None:
        if self.silent or self.closed.is_set():
            return
        self.sent.append(frame)
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(frame))

    async def event(self, name: str, payload: Any = None, *, seq_step: int = 1) -> None:
        """An event with the connection's outer ``seq`` (``seq_step`` > 1 makes a gap)."""
        self.seq += seq_step
        await self.send(event_frame(name, payload, seq=self.seq))

    async def send_raw(self, text: str) -> None:
        """Any text, even a frame that is not valid JSON."""
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(text)

    def drop(self) -> None:
        """Kill the socket without a closing handshake."""
        self.ws.transport.abort()

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.gateway.errors.append(task.exception())

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == "req" and f.get("method") == method]


class ScriptedGateway(ScriptedWsServer):
    """A fake OpenClaw gateway on 127.0.0.1 (ephemeral port, kept across :meth:`stop`/:meth:`start`)."""

    noun = "scripted gateway"

    def __init__(
        self,
        *,
        token: str | None = None,
        min_protocol: int = 3,
        max_protocol: int = 4,
        tick_interval_ms: int = 30_000,
        challenge_delay: float = 0.0,
    ) -> None:
        super().__init__()
        self.token = token
        self.min_protocol = min_protocol
        self.max_protocol = max_protocol
        self.tick_interval_ms = tick_interval_ms
        self.challenge_delay = challenge_delay
        self.before_challenge: list[tuple[str, Any]] = []
        """Events sent ahead of ``connect.challenge`` (a client must keep waiting for the challenge)."""
        self.chat_handler: ChatHandler = echo_handler
        self.methods: dict[str, Any] = {
            "health": {"ok": True},
            "chat.history": lambda params: {"sessionKey": params.get("sessionKey"), "messages": []},
            "agents.list": {
                "defaultId": "main",
                "mainKey": "main",
                "scope": "per-sender",
                "agents": [{"id": "main"}],
            },
            "sessions.list": {"sessions": []},
            "models.list": {"models": [{"id": "demo", "name": "Demo", "provider": "scripted"}]},
        }
        self.connect_error: GatewayError | None = None
        """When set, every ``connect`` is refused with it."""
        self.hello_extra: dict[str, Any] = {}
        """Merged into every hello-ok (for leniency tests)."""
        self.refuse_connections = False
        self.run_id_for: Callable[[str], str] = lambda idempotency_key: idempotency_key
        """The runId a ``chat.send`` acks (real OpenClaw: the idempotency key)."""
        self.ack_delay = 0.0
        """Start the run this long before acking it (its first events then precede the ack)."""
        self.connections: list[ScriptedConnection] = []

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    # -- observations -----------------------------------------------------------------------

    @property
    def handshaken(self) -> list[ScriptedConnection]:
        return [c for c in self.connections if c.handshaken]

    @property
    def latest(self) -> ScriptedConnection:
        return self.handshaken[-1]

    @property
    def received(self) -> list[dict[str, Any]]:
        """Every frame any client sent, in connection order."""
        return [frame for conn in self.connections for frame in conn.received]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == "req" and f.get("method") == method]

    @property
    def runs(self) -> list[ScriptedRun]:
        return [run for conn in self.connections for run in conn.runs]

    # -- the protocol -----------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        conn = ScriptedConnection(self, ws, len(self.connections))
        self.connections.append(conn)
        if self.refuse_connections:
            await ws.close(1013, "try again later")
            conn.close_code = 1013
            conn.closed.set()
            return
        conn.spawn(self._challenge(conn))
        try:
            async for raw in ws:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    conn.bad_frames.append(str(raw))
                    continue
                conn.received.append(frame)
                if conn.challenge_sent_at is None:
                    conn.early_frames.append(frame)
                    continue
                await self._on_frame(conn, frame)
        except ConnectionClosed:
            pass
        finally:
            conn.close_code = ws.close_code
            conn.closed.set()
            for task in list(conn.tasks):
                task.cancel()

    async def _challenge(self, conn: ScriptedConnection) -> None:
        for name, payload in self.before_challenge:
            await conn.event(name, payload)
        if self.challenge_delay:
            await asyncio.sleep(self.challenge_delay)
        conn.challenge_sent_at = asyncio.get_running_loop().time()
        await conn.send(event_frame("connect.challenge", {"nonce": str(uuid.uuid4()), "ts": now_ms()}))

    async def _on_frame(self, conn: ScriptedConnection, frame: dict[str, Any]) -> None:
        if frame.get("type") != "req":
            return
        request_id = str(frame.get("id"))
        method = str(frame.get("method"))
        params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
        assert isinstance(params, dict)
        if not conn.handshaken:
            if method != "connect":
                error = GatewayError(INVALID_REQUEST, "the first request must be connect")
                await conn.send(response_error(request_id, error))
                await conn.ws.close(1008, "connect first")
                return
            await self._connect(conn, request_id, params)
            return
        if method == "chat.send":
            await self._chat_send(conn, request_id, params)
        elif method == "chat.abort":
            await self._chat_abort(conn, request_id, params)
        else:
            await self._method(conn, request_id, method, params)

    async def _connect(self, conn: ScriptedConnection, request_id: str, params: dict[str, Any]) -> None:
        conn.connect_received_at = asyncio.get_running_loop().time()
        conn.connect_params = params
        auth = params.get("auth") if isinstance(params.get("auth"), dict) else {}
        assert isinstance(auth, dict)
        refusal: tuple[GatewayError, int] | None = None
        client_min = int(params.get("minProtocol", 0))
        client_max = int(params.get("maxProtocol", 0))
        if self.connect_error is not None:
            refusal = (self.connect_error, 1008)
        elif self.token is not None and auth.get("token") != self.token:
            detail = {"code": DETAIL_AUTH_TOKEN_MISMATCH}
            refusal = (GatewayError(INVALID_REQUEST, "unauthorized: gateway token mismatch", detail), 1008)
        elif client_max < self.min_protocol or client_min > self.max_protocol:
            detail = {"code": DETAIL_PROTOCOL_MISMATCH, "expectedProtocol": self.max_protocol}
            refusal = (GatewayError(INVALID_REQUEST, "protocol mismatch", detail), 1002)
        if refusal is not None:
            await conn.send(response_error(request_id, refusal[0]))
            await conn.ws.close(refusal[1], refusal[0].message[:100])
            return
        conn.protocol = min(client_max, self.max_protocol)
        conn.handshaken = True
        await conn.send(response_ok(request_id, self.hello_ok(conn)))
        conn.spawn(self._ticks(conn))

    def hello_ok(self, conn: ScriptedConnection) -> dict[str, Any]:
        hello: dict[str, Any] = {
            "type": "hello-ok",
            "protocol": conn.protocol,
            "server": {"version": "2026.9.6", "connId": conn.conn_id},
            "features": {
                "methods": ["connect", "chat.send", "chat.abort", *self.methods],
                "events": ["chat", "agent", "tick", "shutdown"],
            },
            "snapshot": {
                "presence": [],
                "health": {},
                "stateVersion": {"presence": 0, "health": 0},
                "uptimeMs": 0,
                "sessionDefaults": {
                    "defaultAgentId": "main",
                    "mainKey": "main",
                    "mainSessionKey": "agent:main:main",
                },
            },
            "auth": {"role": "operator", "scopes": list(OPERATOR_SCOPES)},
            "policy": {
                "maxPayload": MAX_FRAME_BYTES,
                "maxBufferedBytes": 4 * MAX_FRAME_BYTES,
                "tickIntervalMs": self.tick_interval_ms,
            },
        }
        hello.update(self.hello_extra)
        return hello

    async def _ticks(self, conn: ScriptedConnection) -> None:
        while not conn.closed.is_set():
            await asyncio.sleep(self.tick_interval_ms / 1000)
            await conn.event("tick", {"ts": now_ms()})

    async def _chat_send(self, conn: ScriptedConnection, request_id: str, params: dict[str, Any]) -> None:
        run_id = self.run_id_for(str(params.get("idempotencyKey") or uuid.uuid4()))
        key = str(params.get("sessionKey", "")).lower()
        run = ScriptedRun(conn, run_id, key, str(params.get("message", "")))
        conn.runs.append(run)
        ack = response_ok(request_id, {"runId": run_id, "status": "started"})
        if self.ack_delay:
            run.task = conn.spawn(self.chat_handler(run))
            await asyncio.sleep(self.ack_delay)
            await conn.send(ack)
        else:
            await conn.send(ack)
            run.task = conn.spawn(self.chat_handler(run))

    async def _chat_abort(self, conn: ScriptedConnection, request_id: str, params: dict[str, Any]) -> None:
        key = str(params.get("sessionKey", "")).lower()
        run_id = params.get("runId")
        targets = [
            run
            for run in conn.runs
            if not run.finished and run.session_key == key and (run_id is None or run.run_id == run_id)
        ]
        await conn.send(
            response_ok(
                request_id, {"ok": True, "aborted": bool(targets), "runIds": [run.run_id for run in targets]}
            )
        )
        for run in targets:
            if run.task is not None:
                run.task.cancel()
            await run.aborted()

    async def _method(
        self, conn: ScriptedConnection, request_id: str, method: str, params: dict[str, Any]
    ) -> None:
        if method not in self.methods:
            error = GatewayError(INVALID_REQUEST, f"unknown method: {method}")
            await conn.send(response_error(request_id, error))
            return
        answer = self.methods[method]
        if answer is SILENT:
            return
        if callable(answer):
            answer = answer(params)
        if isinstance(answer, GatewayError):
            await conn.send(response_error(request_id, answer))
        else:
            await conn.send(response_ok(request_id, answer))

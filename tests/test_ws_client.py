"""The shared reconnecting WebSocket client (clawlet.ws_client) against a real websockets server.

The server on 127.0.0.1 speaks a toy protocol: it says ``hello`` first, expects ``hi`` back (the
handshake), answers ``req`` frames with ``res`` (``hang`` is never answered) and can refuse the
opening request with HTTP 503 while counting every attempt, so the reconnect schedule is checked by
counting attempts, never by timing them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from clawlet import ws_client
from clawlet.ws_client import Connection, Limits, PendingRequests, ReconnectingSocket, Wire


class Unavailable(ConnectionError):
    pass


class Refused(Unavailable):
    pass


async def until(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
    return value


class ToyServer:
    def __init__(self) -> None:
        self.port = 0
        self.attempts = 0
        """Opening requests seen (refused ones too)."""
        self.refusing = False
        self.refuse_handshake = False
        self.hold_hello: asyncio.Event | None = None
        """When set, ``hello`` waits for it (a handshake in progress)."""
        self.connections: list[ServerConnection] = []
        self.received: list[dict[str, Any]] = []
        self.messages = 0
        """WebSocket messages received (one holds several frames, one per line, from a client
        whose connection sends :attr:`~clawlet.ws_client.Wire.lines`)."""
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/toy"

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port, process_request=self._process)
        self.port = int(next(iter(self._server.sockets)).getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def drop_latest(self) -> None:
        """Kill the latest connection without a closing handshake."""
        transport = self.connections[-1].transport
        assert transport is not None
        transport.abort()

    def _process(self, connection: ServerConnection, request: Request) -> Response | None:
        self.attempts += 1
        return connection.respond(503, "not now\n") if self.refusing else None

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections.append(ws)
        await ws.send("not json")  # a bad frame first: skipped, never fatal
        if self.hold_hello is not None:
            await self.hold_hello.wait()
        await ws.send(json.dumps({"type": "refuse" if self.refuse_handshake else "hello"}))
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                self.messages += 1
                for line in str(raw).split("\n"):
                    frame = json.loads(line)
                    self.received.append(frame)
                    if frame["type"] == "req" and frame["method"] != "hang":
                        await ws.send(
                            json.dumps({"type": "res", "id": frame["id"], "result": frame["method"]})
                        )


class ToyClient:
    """The thinnest protocol layer: a handshake, responses settling requests, a record of losses."""

    def __init__(self, url: str, *, retry_every: float | None = None, delays: int = 3) -> None:
        self.lost: list[str] = []
        self.opened: list[int] = []
        self.socket = ReconnectingSocket[str](
            lambda: url,
            noun="toy server",
            handshake=self.handshake,
            on_frame=self.on_frame,
            decode=json.loads,
            encode=json.dumps,
            unavailable=Unavailable,
            errors=(Unavailable,),
            schedule=lambda: [0.01] * delays,
            retry_every=retry_every,
            limits=Limits(open_timeout=5.0),
            is_final=lambda exc: isinstance(exc, Refused),
            on_open=lambda conn: self.opened.append(conn.number),
            on_lost=lambda conn, reason: self.lost.append(reason),
        )

    async def handshake(self, wire: Wire) -> str:
        frame = await wire.recv()
        if frame["type"] == "refuse":
            raise Refused("the toy server refused us")
        await wire.send({"type": "hi"})
        return str(frame["type"])

    def on_frame(self, conn: Connection[str], frame: dict[str, Any]) -> None:
        if frame["type"] == "res":
            self.socket.pending.resolve(frame["id"], frame["result"])
        elif frame["type"] == "boom":
            raise RuntimeError("a handler bug")

    async def request(self, method: str, timeout: float = 10.0) -> Any:
        request_id = uuid.uuid4().hex
        frame = {"type": "req", "id": request_id, "method": method}
        return await self.socket.pending.call(request_id, method, lambda: self.socket.send(frame), timeout)


async def hanging(client: ToyClient, server: ToyServer) -> asyncio.Future[Any]:
    """A request the server never answers, once the server has it."""
    seen = len(server.received)
    waiting = asyncio.ensure_future(client.request("hang"))
    await until(lambda: any(f.get("method") == "hang" for f in server.received[seen:]))
    return waiting


@pytest.fixture
async def server() -> AsyncIterator[ToyServer]:
    toy = ToyServer()
    await toy.start()
    yield toy
    await toy.stop()


Connected = Callable[..., Awaitable[ToyClient]]


@pytest.fixture
async def connected(server: ToyServer) -> AsyncIterator[Connected]:
    """Makes clients of ``server`` and connects them; closes them all at the end."""
    made: list[ToyClient] = []

    async def make(**options: Any) -> ToyClient:
        client = ToyClient(server.url, **options)
        made.append(client)
        await client.socket.connect()
        return client

    yield make
    for client in made:
        await client.socket.close()


async def test_reconnects_after_the_server_drops_the_connection(
    server: ToyServer, connected: Connected, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = await connected()
    first = client.socket.current
    assert first is not None
    assert first.state == "hello" and client.socket.state == "connected"
    assert await client.request("ping") == "ping"
    assert "ignoring a bad frame from the toy server" in caplog.text

    server.drop_latest()
    await until(lambda: client.socket.connects == 2 and client.socket.current is not None)
    assert first.lost and len(client.lost) == 1 and client.opened == [1, 2]
    assert await client.request("again") == "again"
    assert [f["type"] for f in server.received].count("hi") == 2  # the handshake ran on each


async def test_backoff_schedule_is_one_attempt_per_delay_then_gives_up_and_fails_waiting_requests(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected(delays=4)
    waiting = await hanging(client, server)
    server.refusing = True
    before = server.attempts
    server.drop_latest()

    with pytest.raises(Unavailable, match="unreachable: gave up after 4 reconnect attempts") as info:
        await waiting
    assert "503" in str(info.value)
    await until(lambda: not client.socket.running)
    assert server.attempts - before == 4, "exactly one attempt per delay of the schedule"
    assert client.socket.state == "offline" and client.socket.last_error is info.value
    assert len(client.socket.pending) == 0


async def test_offline_keeps_retrying_with_retry_every_and_comes_back(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected(retry_every=0.01, delays=2)
    server.refusing = True
    before = server.attempts
    server.drop_latest()
    await until(lambda: client.socket.state == "offline")
    await until(lambda: server.attempts - before >= 5)  # beyond the schedule: still trying
    server.refusing = False
    await until(lambda: client.socket.state == "connected")
    assert await client.request("back") == "back"


async def test_sending_while_reconnecting_fails_clearly_and_waiting_gets_the_new_connection(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected(retry_every=0.01)
    server.refusing = True
    server.drop_latest()
    await until(lambda: client.socket.current is None)

    with pytest.raises(Unavailable, match="not connected to the toy server"):
        await client.socket.send({"type": "req", "id": "x", "method": "lost"})
    loop = asyncio.get_running_loop()
    with pytest.raises(Unavailable, match="still reconnecting"):
        await client.socket.wait_connected(loop.time())
    waiter = asyncio.ensure_future(client.socket.wait_connected(loop.time() + 30))
    server.refusing = False
    conn = await waiter
    assert conn is client.socket.current and conn.number == 2
    assert await client.request("sent") == "sent"


async def test_a_request_waiting_across_a_reconnect_keeps_waiting(
    server: ToyServer, connected: Connected
) -> None:
    """The socket fails waiting requests only on give-up or close: the protocol decides the rest."""
    client = await connected()
    waiting = await hanging(client, server)
    server.drop_latest()
    await until(lambda: client.socket.connects == 2)
    assert not waiting.done()
    rid = next(iter(client.socket.pending.waiting()))
    assert client.socket.pending.resolve(rid, "resumed") and await waiting == "resumed"
    assert not client.socket.pending.resolve(rid, "twice")


async def test_a_final_refusal_stops_for_good(server: ToyServer, connected: Connected) -> None:
    client = await connected()
    waiting = await hanging(client, server)
    server.refuse_handshake = True
    before = server.attempts
    server.drop_latest()
    with pytest.raises(Refused):
        await client.socket.wait_closed()
    with pytest.raises(Refused):
        await waiting
    assert server.attempts - before == 1 and client.socket.state == "closed"


async def test_a_failed_first_connect_leaves_nothing_running(server: ToyServer) -> None:
    server.refuse_handshake = True
    client = ToyClient(server.url)
    with pytest.raises(Refused):
        await client.socket.connect()
    assert not client.socket.running and client.socket.state == "idle"
    assert isinstance(client.socket.last_error, Refused)
    await server.stop()
    with pytest.raises(Unavailable, match="cannot connect to the toy server"):
        await client.socket.connect()


async def test_handler_errors_are_logged_and_the_reader_goes_on(
    server: ToyServer, connected: Connected, caplog: pytest.LogCaptureFixture
) -> None:
    client = await connected()
    await server.connections[-1].send(json.dumps({"type": "boom"}))
    assert await client.request("still") == "still"
    assert "failed to handle a frame from the toy server" in caplog.text
    assert client.socket.connects == 1


async def test_drop_closes_with_a_reason_and_stop_on_loss_tasks_end(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected()
    conn = client.socket.current
    assert conn is not None
    idle = asyncio.Event()
    conn.spawn(idle.wait(), "idle-task", stop_on_loss=True)
    kept = asyncio.Event()
    conn.spawn(kept.wait(), "kept-task")
    conn.spawn(conn.drop("no answer for a while", 4000, "quiet"), "dropper", stop_on_loss=True)
    await until(lambda: client.lost)
    assert client.lost == ["no answer for a while"]
    await until(lambda: {t.get_name() for t in conn.tasks} == {"kept-task"})
    await until(lambda: client.socket.connects == 2)
    await client.socket.close()
    assert not conn.tasks  # close cancels the rest


async def test_close_fails_waiting_requests_and_ends_wait_closed(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected()
    waiting = await hanging(client, server)
    closed = asyncio.ensure_future(client.socket.wait_closed())
    await client.socket.close()
    await closed
    with pytest.raises(Unavailable, match="toy server client was closed"):
        await waiting
    assert client.socket.state == "closed" and client.socket.current is None
    assert len(server.connections) == 1, "no reconnect after close"


async def test_pending_requests_time_out_and_leave_nothing_behind() -> None:
    pending = PendingRequests()

    async def send() -> None:
        return None

    with pytest.raises(TimeoutError):
        await pending.call("r1", "slow", send, 0.01)
    assert len(pending) == 0 and not pending.resolve("r1", "late")


async def test_close_during_the_first_connect_leaves_nothing_running(server: ToyServer) -> None:
    server.hold_hello = asyncio.Event()
    client = ToyClient(server.url)
    connecting = asyncio.ensure_future(client.socket.connect())
    await until(lambda: server.connections)  # the socket is open, the handshake waits
    await client.socket.close()
    server.hold_hello.set()
    with pytest.raises(Unavailable, match="client was closed"):
        await connecting
    assert client.socket.current is None and not client.socket.running
    assert client.socket.state == "closed"


async def test_with_lines_the_frames_of_one_loop_turn_go_out_as_one_message(
    server: ToyServer, connected: Connected, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await connected()
    conn = client.socket.current
    assert conn is not None
    await conn.send({"type": "note", "n": -1})  # without lines: one message per frame
    await until(lambda: server.messages == 2)  # "hi", then the note
    conn.lines = True
    notes = [{"type": "note", "n": n, "text": f"第{n}\n行"} for n in range(50)]
    await asyncio.gather(*(conn.send(note) for note in notes))
    await until(lambda: len(server.received) == 52)
    assert server.received[2:] == notes and server.messages == 3  # in order, in one message
    # a frame over the size of one message goes alone, between the others
    monkeypatch.setattr(ws_client, "MAX_LINES_BYTES", 200)
    sizes = [{"type": "note", "n": n, "pad": "x" * size} for n, size in enumerate([10, 500, 10, 10])]
    await asyncio.gather(*(conn.send(note) for note in sizes))
    await until(lambda: len(server.received) == 56)
    assert server.received[52:] == sizes and server.messages == 6  # [10], [500], [10, 10]
    # a request still gets its answer through a message of lines
    assert await client.request("ping") == "ping"


async def test_with_lines_every_sender_of_a_lost_message_gets_the_error(
    server: ToyServer, connected: Connected
) -> None:
    client = await connected()
    conn = client.socket.current
    assert conn is not None
    conn.lines = True
    server.drop_latest()
    await until(lambda: client.lost)
    results = await asyncio.gather(
        *(conn.send({"type": "note", "n": n}) for n in range(3)), return_exceptions=True
    )
    assert all(isinstance(result, ConnectionClosed) for result in results), results

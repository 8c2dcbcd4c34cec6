"""The HTTP tunnel's ends (clawlet.execplane.tunnel on the execution plane, clawlet.controlplane.routing
on the control plane) and its frames, in-process: a real ASGI app answers, real brokers route.

The whole path over real sockets and processes is in tests/test_cluster_e2e.py (one instance) and
tests/test_cluster_scaleout.py (two instances behind HAProxy, one killed mid-turn)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from clawlet.cluster.protocol import (
    FrameError,
    decode,
    encode,
    frame_body,
    http_body_frame,
    http_request_frame,
    http_resume_frame,
)
from clawlet.controlplane.broker import LocalBroker, LocalHub
from clawlet.controlplane.routing import ExecPlaneOffline, TunnelRouter
from clawlet.execplane.tunnel import TunnelServer

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

DEADLINE = 30.0


def test_tunnel_frames_round_trip_and_bad_ones_are_refused() -> None:
    request = http_request_frame(
        "r1", "post", "/api/chat", "a=1", [("content-type", "application/json")], "你好".encode()
    )
    parsed = decode(encode(request))
    assert parsed["type"] == "http_request" and parsed["method"] == "POST"
    assert frame_body(parsed) == "你好".encode() and parsed["headers"] == [
        ("content-type", "application/json")
    ]  # type: ignore[typeddict-item]
    body = decode(encode(http_body_frame("r1", 3, b"\x00\xff", more=True)))
    assert body["type"] == "http_body" and frame_body(body) == b"\x00\xff" and body["more"] is True
    for bad in (
        {**request, "body": "not base64!"},
        {**request, "path": "api/chat"},
        {**request, "headers": [["only-a-name"]]},
        {"type": "http_response", "id": "r1", "status": 99, "headers": []},
        {"type": "http_body", "id": "r1", "n": 0, "body": "", "more": False},
        {"type": "http_body", "id": "r1", "n": 1, "body": "", "more": "no"},
        {"type": "http_resume", "id": "r1", "after": -2},
    ):
        with pytest.raises(FrameError):
            decode(encode(bad))


# -- the execution plane's end ---------------------------------------------------------------------


class Gate:
    """Lets the streaming route below produce its chunks one at a time."""

    def __init__(self) -> None:
        self.next = asyncio.Semaphore(0)
        self.disconnected = asyncio.Event()
        self.watchers: set[asyncio.Future[None]] = set()


def make_app(gate: Gate) -> Starlette:
    async def stream(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for index in range(3):
                await gate.next.acquire()
                yield f"chunk-{index};".encode()

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gate.disconnected.set()

        gate.watchers.add(asyncio.ensure_future(watch()))
        return StreamingResponse(chunks(), media_type="text/plain")

    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse(
            {
                "body": body.decode(),
                "host": request.headers["host"],
                "auth": request.headers.get("authorization"),
            }
        )

    return Starlette(routes=[Route("/stream", stream), Route("/echo", echo, methods=["POST"])])


class Wire:
    """The execution plane's side of a socket: records what was sent; ``up`` says if it is connected."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.up = True
        self.changed = asyncio.Event()

    async def send(self, frame: Mapping[str, Any]) -> bool:
        if not self.up:
            return False
        self.sent.append(dict(frame))
        self.changed.set()
        return True

    async def until(self, count: int) -> list[dict[str, Any]]:
        async with asyncio.timeout(DEADLINE):
            while len(self.sent) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.sent


def bodies(frames: list[dict[str, Any]]) -> str:
    return "".join(base64.b64decode(f["body"]).decode() for f in frames if f["type"] == "http_body")


async def test_a_response_streams_frame_by_frame_and_resumes_after_a_drop() -> None:
    gate, wire = Gate(), Wire()
    server = TunnelServer(make_app(gate), wire.send)
    try:
        server.handle(http_request_frame("r1", "GET", "/stream", "", [], b""))
        gate.next.release()
        frames = await wire.until(2)
        assert frames[0]["type"] == "http_response" and frames[0]["status"] == 200
        assert bodies(frames) == "chunk-0;"
        wire.up = False  # the socket drops: the next chunks are kept, not lost
        gate.next.release()
        gate.next.release()
        async with asyncio.timeout(DEADLINE):
            while server.running():
                await asyncio.sleep(0.01)
        assert len(wire.sent) == 2
        wire.up = True
        server.handle(http_resume_frame("r1", 1))  # what the control plane has: up to n = 1
        frames = await wire.until(2 + 3)
        resent = frames[2:]
        assert [f["n"] for f in resent] == [2, 3, 4] and resent[-1]["more"] is False
        assert bodies(frames) == "chunk-0;chunk-1;chunk-2;"
        # a repeat of the whole request (another instance took over) resends everything, runs nothing
        server.handle(http_request_frame("r1", "GET", "/stream", "", [], b""))
        frames = await wire.until(5 + 5)
        assert [f.get("n", 0) for f in frames[5:]] == [0, 1, 2, 3, 4]
        # an id it never had: the response is cut, saying so
        server.handle(http_resume_frame("unknown", 2))
        frames = await wire.until(11)
        assert frames[-1] == {**frames[-1], "id": "unknown", "more": False, "lost": True}
    finally:
        await server.aclose()


async def test_cancel_tells_the_app_the_client_went_away_and_headers_are_the_tunnels() -> None:
    gate, wire = Gate(), Wire()
    server = TunnelServer(make_app(gate), wire.send)
    try:
        server.handle(http_request_frame("r1", "GET", "/stream", "", [], b""))
        await wire.until(0)
        server.handle({"type": "http_cancel", "id": "r1"})
        async with asyncio.timeout(DEADLINE):
            await gate.disconnected.wait()
        headers = [("authorization", "Bearer clu_secret"), ("host", "evil.example"), ("x-mine", "1")]
        server.handle(http_request_frame("r2", "POST", "/echo", "", headers, "体".encode()))
        frames = await wire.until(2)
        echoed = [f for f in frames if f["id"] == "r2"]
        assert echoed[0]["status"] == 200
        import json

        data = json.loads(bodies(echoed))
        assert data == {"body": "体", "host": "localhost", "auth": None}  # the user's token stays behind
    finally:
        await server.aclose()


# -- the control plane's end: two instances on one broker hub ---------------------------------------


class Instance:
    """A control-plane instance's router whose "socket" to an execution plane is a TunnelServer."""

    def __init__(self, hub: LocalHub, exec_plane: TunnelServer | None = None) -> None:
        self.broker = LocalBroker(hub=hub, presence_ttl=60)
        self.exec_plane = exec_plane
        self.router = TunnelRouter(self.broker, self.send_to_user, grace=5, poll_seconds=0.05)

    async def send_to_user(self, user_id: str, frame: Mapping[str, Any]) -> bool:
        if self.exec_plane is None:
            return False
        self.exec_plane.handle(frame)
        return True

    async def start(self) -> None:
        await self.broker.start()
        await self.router.start()

    async def aclose(self) -> None:
        await self.router.aclose()
        await self.broker.aclose()


async def test_a_request_at_one_instance_is_answered_by_the_exec_plane_at_another() -> None:
    hub = LocalHub()
    gate = Gate()
    holder, front = Instance(hub), Instance(hub)

    async def to_holder(frame: Mapping[str, Any]) -> bool:
        if frame["type"] in ("http_response", "http_body"):
            await holder.router.from_exec_plane("alice", frame)  # type: ignore[arg-type]
        return True

    exec_plane = TunnelServer(make_app(gate), to_holder)
    holder.exec_plane = exec_plane
    await holder.start()
    await front.start()
    try:
        with pytest.raises(ExecPlaneOffline):
            async for _ in front.router.exchange(
                "alice", http_request_frame("r0", "GET", "/stream", "", [], b"")
            ):
                pass
        await holder.router.connected("alice")
        for _ in range(3):
            gate.next.release()
        frames = [
            f
            async for f in front.router.exchange(
                "alice", http_request_frame("r1", "GET", "/stream", "", [], b"")
            )
        ]
        assert frames[0]["type"] == "http_response"
        assert bodies([dict(f) for f in frames]) == "chunk-0;chunk-1;chunk-2;"
        assert frames[-1]["type"] == "http_body" and frames[-1]["more"] is False
    finally:
        await front.aclose()
        await holder.aclose()
        await exec_plane.aclose()


def test_the_exec_planes_response_headers_cannot_set_cookies_on_the_shared_origin() -> None:
    from clawlet.controlplane.api_proxy import response_headers

    sent = response_headers(
        [
            ("Content-Type", "application/json"),
            ("Set-Cookie", "session=evil; Path=/"),
            ("Connection", "keep-alive"),
            ("X-Content-Type-Options", "off"),
            ("X-Mine", "yes"),
        ]
    )
    assert sent == [
        (b"content-type", b"application/json"),
        (b"x-mine", b"yes"),
        (b"x-content-type-options", b"nosniff"),
    ]


async def test_a_gap_in_the_frames_is_filled_by_a_resume_in_order() -> None:
    """Frames may reach the requester out of order when the socket just moved to another instance
    (what it sent before that instance carried the request is dropped there): the requester asks
    once for everything after the last frame it has, and yields the answer in order."""
    hub = LocalHub()
    front, holder = LocalBroker(hub=hub), LocalBroker(hub=hub)
    await front.start()
    await holder.start()
    router = TunnelRouter(front, lambda user, frame: asyncio.sleep(0, False), grace=5, poll_seconds=0.05)
    await router.start()
    resumes: list[int] = []
    listening = asyncio.Event()

    async def serve() -> None:
        async with holder.subscribe(f"instance.{holder.instance_id}") as messages:
            listening.set()
            async for message in messages:
                reply, frame = message["reply"], message["frame"]
                if message["op"] == "request":
                    await holder.publish(
                        reply, {"type": "http_response", "id": frame["id"], "status": 200, "headers": []}
                    )
                    await holder.publish(reply, dict(http_body_frame(frame["id"], 2, b"two;", more=False)))
                elif message["op"] == "resume":
                    resumes.append(frame["after"])
                    await holder.publish(reply, dict(http_body_frame(frame["id"], 1, b"one;", more=True)))
                    await holder.publish(reply, dict(http_body_frame(frame["id"], 2, b"two;", more=False)))

    serving = asyncio.create_task(serve())
    try:
        await asyncio.wait_for(listening.wait(), DEADLINE)
        await holder.claim("alice")
        async with asyncio.timeout(DEADLINE):
            frames = [
                f async for f in router.exchange("alice", http_request_frame("g1", "GET", "/x", "", [], b""))
            ]
        assert [f.get("n", 0) for f in frames] == [0, 1, 2]
        assert bodies([dict(f) for f in frames]) == "one;two;" and resumes == [0]
    finally:
        serving.cancel()
        await router.aclose()
        await holder.aclose()
        await front.aclose()

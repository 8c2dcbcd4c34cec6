"""The SSE response every event stream is sent with (clawlet.api.sse_response): the frames that are
ready together go out as one body message, none waits for a later one, and a client that leaves
stops the stream (its source is closed) while the response itself ends normally. Through a real
server, a chat completion's closing frames arrive in one piece."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable

import pytest
from starlette.types import Message

from clawlet.api.sse_response import SseResponse
from tests.conftest import LiveServer

SCOPE = {"type": "http", "method": "POST", "asgi": {"version": "3.0", "spec_version": "2.3"}}


class Client:
    """The ASGI server's side: records what the response sends; ``leave()`` disconnects."""

    def __init__(self, fail_on_body: int | None = None) -> None:
        self.sent: list[Message] = []
        self.left = asyncio.Event()
        self.fail_on_body = fail_on_body

    async def receive(self) -> Message:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and len(self.bodies) == self.fail_on_body:
            raise OSError("connection reset")
        self.sent.append(message)

    @property
    def bodies(self) -> list[Message]:
        return [message for message in self.sent if message["type"] == "http.response.body"]

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(30):
            while not condition():
                await asyncio.sleep(0)


class Source:
    """An SSE body: two frames ready together, then (after ``gate``) one, then the closing two
    together; ``closed`` once it was stopped or ended."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = False
        self.closed = False

    async def chunks(self) -> AsyncIterator[list[str]]:
        try:
            yield ["data: a\n\n", "data: b\n\n"]
            self.waiting = True
            await self.gate.wait()
            self.waiting = False
            yield ["data: c\n\n"]
            yield ["data: d\n\n", "data: [DONE]\n\n"]
        finally:
            self.closed = True


def test_headers_and_one_message_per_chunk_none_held_back() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        response = SseResponse(source.chunks(), {"X-Session-ID": "s1"})
        task = asyncio.create_task(response(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        # what was ready went out, in one message, while the source waits for more
        assert client.bodies == [
            {"type": "http.response.body", "body": b"data: a\n\ndata: b\n\n", "more_body": True}
        ]
        source.gate.set()
        await task
        start = client.sent[0]
        assert start["type"] == "http.response.start" and start["status"] == 200
        assert dict(start["headers"]) == {
            b"x-session-id": b"s1",
            b"cache-control": b"no-cache",
            b"x-accel-buffering": b"no",
            b"content-type": b"text/event-stream; charset=utf-8",
        }
        assert [(body["body"], body["more_body"]) for body in client.bodies[1:]] == [
            (b"data: c\n\n", True),
            (b"data: d\n\ndata: [DONE]\n\n", True),
            (b"", False),
        ]
        assert source.closed

    asyncio.run(scenario())


def test_a_client_that_leaves_stops_the_stream_and_the_response_ends_normally() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        response = SseResponse(source.chunks())

        async def serve() -> int:
            await response(SCOPE, client.receive, client.send)
            task = asyncio.current_task()
            assert task is not None
            return task.cancelling()  # nothing left over to cancel what the server does next

        task = asyncio.create_task(serve())
        await client.until(lambda: source.waiting)
        client.left.set()
        assert await task == 0
        assert source.closed  # the source stopped where it waited
        assert len(client.bodies) == 1

    asyncio.run(scenario())


def test_a_failed_send_stops_the_source() -> None:
    async def scenario() -> None:
        client, source = Client(fail_on_body=1), Source()
        task = asyncio.create_task(SseResponse(source.chunks())(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        source.gate.set()
        await task  # an ASGI 2.4 server reports a gone client by raising OSError from send
        assert source.closed
        assert [body["body"] for body in client.bodies] == [b"data: a\n\ndata: b\n\n"]

    asyncio.run(scenario())


def test_cancelling_the_request_still_cancels_it() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        task = asyncio.create_task(SseResponse(source.chunks())(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        task.cancel()  # e.g. the server shuts down
        with pytest.raises(asyncio.CancelledError):
            await task
        assert source.closed

    asyncio.run(scenario())


def http_chunks(port: int, path: str, body: dict[str, object]) -> list[bytes]:
    """POST ``body`` over a raw socket and return the response body's HTTP/1.1 chunks as sent
    (one per ASGI body message), the terminating empty chunk excluded."""
    payload = json.dumps(body).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request)
        raw = b""
        while data := sock.recv(65536):
            raw += data
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    chunks = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(rest[:size])
        rest = rest[size + 2 :]


def test_a_chat_completions_closing_frames_arrive_in_one_piece(server: LiveServer) -> None:
    body = {"model": "clawlet", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    chunks = http_chunks(server.port, "/v1/chat/completions", body)
    frames = [frame for chunk in chunks for frame in chunk.decode().split("\n\n") if frame]
    assert frames[-1] == "data: [DONE]" and len(chunks) < len(frames)
    last = [frame for frame in chunks[-1].decode().split("\n\n") if frame]
    assert len(last) >= 2 and last[-1] == "data: [DONE]"  # the finish chunk and [DONE]: one write
    assert json.loads(last[-2].removeprefix("data: "))["choices"][0]["finish_reason"] == "stop"

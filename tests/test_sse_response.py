"""The SSE response every event stream is sent with (clawlet.api.sse_response): the frames that are
ready together go out as one body message, none waits for a later one, and a client that leaves
stops the stream (its source is closed) while the response itself ends normally."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from starlette.types import Message

from clawlet.api.sse_response import SseResponse

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
    """An SSE source: ``a``, ``b`` and ``c`` at once, then ``d`` after ``gate``, then the end;
    ``closed`` once it was stopped or ended."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = False
        self.closed = False

    async def frames(self) -> AsyncIterator[str]:
        try:
            for frame in ("data: a\n\n", "data: b\n\n", "data: c\n\n"):
                yield frame
            self.waiting = True
            await self.gate.wait()
            self.waiting = False
            yield "data: d\n\n"
            await asyncio.sleep(0)  # the end comes a moment later
            yield "data: e\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.closed = True


def test_headers_and_frames_ready_together_in_one_message_none_held_back() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        response = SseResponse(source.frames(), {"X-Session-ID": "s1"})
        task = asyncio.create_task(response(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        # what was ready went out, in one message, while the source waits for more
        await client.until(lambda: len(client.bodies) == 1)
        assert client.bodies[0] == {
            "type": "http.response.body",
            "body": b"data: a\n\ndata: b\n\ndata: c\n\n",
            "more_body": True,
        }
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
            (b"data: d\n\n", True),  # sent as soon as the source had to wait again
            (b"data: e\n\ndata: [DONE]\n\n", False),  # the last frames end the body
        ]
        assert source.closed

    asyncio.run(scenario())


def test_a_client_that_leaves_stops_the_stream_and_the_response_ends_normally() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        response = SseResponse(source.frames())

        async def serve() -> int:
            await response(SCOPE, client.receive, client.send)
            task = asyncio.current_task()
            assert task is not None
            return task.cancelling()  # nothing left over to cancel what the server does next

        task = asyncio.create_task(serve())
        await client.until(lambda: source.waiting and len(client.bodies) == 1)
        client.left.set()
        assert await task == 0
        assert source.closed  # the source stopped where it waited
        assert len(client.bodies) == 1

    asyncio.run(scenario())


def test_a_failed_send_stops_the_source() -> None:
    async def scenario() -> None:
        client, source = Client(fail_on_body=1), Source()
        task = asyncio.create_task(SseResponse(source.frames())(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        source.gate.set()
        await task  # an ASGI 2.4 server reports a gone client by raising OSError from send
        assert source.closed
        assert [body["body"] for body in client.bodies] == [b"data: a\n\ndata: b\n\ndata: c\n\n"]

    asyncio.run(scenario())


def test_cancelling_the_request_still_cancels_it() -> None:
    async def scenario() -> None:
        client, source = Client(), Source()
        task = asyncio.create_task(SseResponse(source.frames())(SCOPE, client.receive, client.send))
        await client.until(lambda: source.waiting)
        task.cancel()  # e.g. the server shuts down
        with pytest.raises(asyncio.CancelledError):
            await task
        assert source.closed

    asyncio.run(scenario())

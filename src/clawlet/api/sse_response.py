"""The streamed HTTP response of every SSE edge: :class:`SseResponse`.

It sends what starlette's ``StreamingResponse`` sends (the headers at once, then the frames as
they come), with less work per frame and fewer writes:

* the frames that are ready together (one run event that becomes several frames, the events
  that piled up while the client's socket was busy, the finish chunk and ``[DONE]`` after the
  last event) go out as one ``http.response.body`` message, so one socket write; a frame is never
  held back: the frames so far are sent the moment the source would have to wait for the next
  one (:func:`ready_batches`; no timer anywhere);
* the last frames and the end of the body are one message;
* a client that disconnects stops the stream at once, as with ``StreamingResponse``: the source
  is closed (a run keeps running; only this watcher stops) and the response ends normally.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Generator, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""What every event stream adds to its headers: never cached, never buffered by a proxy."""


class _Resumed:
    """Awaits an awaitable that was stepped by hand until it suspended on ``pending`` (what it
    yielded for the event loop): ``yield from`` for an awaitable that already yielded once.
    With ``error``, that is thrown into it first (to stop it where it waits)."""

    def __init__(self, step: Generator[Any, Any, Any], pending: Any, error: BaseException | None = None):
        self.step = step
        self.pending = pending
        self.error = error

    def __await__(self) -> Generator[Any, Any, Any]:
        step, pending, error = self.step, self.pending, self.error
        sent: Any = None
        while True:
            if error is None:
                try:
                    sent = yield pending
                except BaseException as thrown:  # cancellation: it goes on to the step
                    error = thrown
            try:
                if error is None:
                    pending = step.send(sent)
                else:
                    pending, error = step.throw(error), None
            except StopIteration as done:
                return done.value


class SseResponse(Response):
    """The SSE response for ``frames`` (see the module docstring)."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[str], headers: Mapping[str, str] | None = None) -> None:
        self.frames = frames
        self.status_code = 200
        self.background = None
        self.init_headers({**(headers or {}), **SSE_HEADERS})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = asyncio.current_task()
        assert current is not None
        streaming = True
        client_left = False

        def stop_streaming(_: asyncio.Task[None]) -> None:
            nonlocal client_left
            if streaming:
                client_left = True
                current.cancel()

        watcher = asyncio.create_task(_disconnected(receive))
        watcher.add_done_callback(stop_streaming)
        try:
            await self._stream(send)
        except asyncio.CancelledError:
            if not client_left or current.uncancel() > 0:
                raise
        except OSError:  # an ASGI 2.4 server says so on send: the client is gone
            pass
        else:
            if client_left:  # it left as the stream ended: its cancellation must not hit later awaits
                current.uncancel()
        finally:
            streaming = False
            watcher.remove_done_callback(stop_streaming)
            watcher.cancel()

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        frames = aiter(self.frames)
        ready: list[str] = []
        while True:
            step = anext(frames).__await__()
            try:
                pending = step.send(None)
            except StopIteration as done:  # the next frame was ready: it joins the batch
                ready.append(done.value)
                continue
            except StopAsyncIteration:
                break
            except BaseException:
                if ready:
                    await _send_body(send, ready, more=True)
                raise
            if ready:  # the source has to wait: what is ready goes out now
                try:
                    await _send_body(send, ready, more=True)
                except BaseException:
                    with contextlib.suppress(BaseException):  # stop the source where it waits
                        await _Resumed(step, pending, asyncio.CancelledError())
                    raise
                ready = []
            try:
                ready.append(await _Resumed(step, pending))
            except StopAsyncIteration:
                break
        await _send_body(send, ready, more=False)


async def _send_body(send: Send, frames: list[str], *, more: bool) -> None:
    body = (frames[0] if len(frames) == 1 else "".join(frames)).encode()
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass

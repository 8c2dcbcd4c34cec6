"""The streamed HTTP response of every SSE edge: :class:`SseResponse`.

It sends what starlette's ``StreamingResponse`` sends (the headers at once, then the body as it
comes), with less work per request and fewer writes:

* its body comes in chunks, each a frame or a list of frames that are ready together (one run
  event that becomes several frames; the run's last event with the stream's closing frames:
  :meth:`clawlet.event_stream.EventStream.batches`), and each chunk is one ``http.response.body``
  message, so one socket write; nothing is held back for a later chunk (no timer anywhere);
* a client that disconnects stops the stream at once, as with ``StreamingResponse``: the source is
  closed (a run keeps running; only this watcher stops) and the response ends normally — without
  an anyio task group per request, and with the source closed there and then, not at GC.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""What every event stream adds to its headers: never cached, never buffered by a proxy."""

Chunks = AsyncIterator[str] | AsyncIterator[list[str]]
"""An SSE body: frames, or lists of frames that are ready together."""


class SseResponse(Response):
    """The SSE response for ``chunks`` (see the module docstring)."""

    media_type = "text/event-stream"

    def __init__(self, chunks: Chunks, headers: Mapping[str, str] | None = None) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers({**(headers or {}), **SSE_HEADERS})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = asyncio.current_task()
        assert current is not None
        streaming = True
        client_left = False

        def stop_streaming(watcher: asyncio.Task[None]) -> None:
            nonlocal client_left
            if not watcher.cancelled() and watcher.exception() is not None:  # no more receiving
                log.warning("SSE response: receive failed", exc_info=watcher.exception())
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
        chunks = self.chunks
        try:
            async for chunk in chunks:
                body = chunk if isinstance(chunk, str) else "".join(chunk)
                await send({"type": "http.response.body", "body": body.encode(), "more_body": True})
        finally:  # stopped early: the source cleans up now
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass

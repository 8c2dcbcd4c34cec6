"""A recording WebSocket proxy: a real client talks to a real gateway through it, every frame kept.

``FrameProxy(upstream_url)`` listens on a free loopback port (its own thread and event loop); each
connection to it opens one to ``upstream_url`` and relays text frames both ways unchanged, noting
``("in", frame)`` for what the upstream sent and ``("out", frame)`` for what the client sent, the
direction convention of :class:`tests.test_openclaw_interop.FrameLog` (seen from the client).
Used to check that every frame clawlet's gateway sends to the real OpenClaw CLI/TUI validates
against the protocol schema, and to see the exact method sequence a client sends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

Recorder = Callable[[str, dict[str, Any]], None]


class FrameProxy:
    """Relay ``ws://127.0.0.1:<port>/…`` to ``upstream_url``; use it as a context manager."""

    def __init__(self, upstream_url: str, record: Recorder) -> None:
        self.upstream_url = upstream_url
        self.record = record
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="frame-proxy", daemon=True)
        self._stop: asyncio.Event | None = None
        self._served: concurrent.futures.Future[None] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def _note(self, direction: str, text: str | bytes) -> None:
        with contextlib.suppress(ValueError):
            frame = json.loads(text)
            if isinstance(frame, dict):
                self.record(direction, frame)

    async def _relay(self, client: ServerConnection) -> None:
        async with connect(self.upstream_url, max_size=None, open_timeout=30) as upstream:

            async def pump(source: Any, sink: Any, direction: str) -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for message in source:
                        self._note(direction, message)
                        await sink.send(message)
                with contextlib.suppress(ConnectionClosed):
                    await sink.close()

            await asyncio.gather(pump(client, upstream, "out"), pump(upstream, client, "in"))

    async def _serve(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with serve(self._relay, "127.0.0.1", 0, max_size=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            ready.set()
            await self._stop.wait()

    def start(self) -> FrameProxy:
        self._thread.start()
        ready = threading.Event()
        self._served = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        if not ready.wait(30):
            raise RuntimeError("the frame proxy did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._served is not None:
            with contextlib.suppress(Exception):
                self._served.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FrameProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

"""Helpers for the inbox tests: a real SSE client collecting events, and polling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from httpx_sse import aconnect_sse


def wait_until(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {check}")
        time.sleep(interval)


class SseClient:
    """Follows one SSE endpoint with httpx-sse on its own event loop in a background thread,
    keeping every event; ``close()`` cancels the stream at once, like a browser closing a tab."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.events: list[tuple[str, Any]] = []
        self.retry: int | None = None
        self.status: int | None = None
        self.error: BaseException | None = None
        self._opened = threading.Event()
        self._lock = threading.RLock()  # `of()` inside a `wait_for` check re-enters it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SseClient:
        self._thread.start()
        if not self._opened.wait(15):
            raise AssertionError(f"SSE stream {self.url} did not open")
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self._follow())
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            loop.close()
            self._opened.set()

    async def _follow(self) -> None:
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client,
                aconnect_sse(client, "GET", self.url, headers=self.headers) as source,
            ):
                self.status = source.response.status_code
                if self.status != 200:
                    self._opened.set()
                    return
                async for event in source.aiter_sse():
                    if event.retry is not None and not event.data:
                        self.retry = event.retry
                        self._opened.set()  # the server sends the retry hint once subscribed
                        continue
                    with self._lock:
                        self.events.append((event.event, json.loads(event.data)))
        except httpx.HTTPError as exc:
            self.error = exc

    def close(self) -> None:
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished meanwhile
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the SSE client did not stop"

    def names(self, *, skip: tuple[str, ...] = ("heartbeat", "message.delta")) -> list[str]:
        with self._lock:
            return [name for name, _ in self.events if name not in skip]

    def of(self, name: str) -> list[Any]:
        with self._lock:
            return [data for event, data in self.events if event == name]

    def wait_for(self, check: Callable[[list[tuple[str, Any]]], Any], timeout: float = 15.0) -> Any:
        def probe() -> Any:
            with self._lock:
                return check(list(self.events))

        return wait_until(probe, timeout)

"""The execution plane's end of the HTTP tunnel: the control plane's ``http_request`` frames run
through the user's own local-mode app (:attr:`clawlet.execplane.daemon.ExecPlane.api_app`).

Cluster mode's API is not a second implementation: a request a user sends to any control-plane
instance (``/api/*``, ``/v1/*``, ``/process``) travels over ``/ws/vm`` as an ``http_request`` frame
(:mod:`clawlet.cluster.protocol`) and :class:`TunnelServer` runs it through the ASGI app, exactly as a
browser on the user's machine would; the response goes back as ``http_response`` and numbered
``http_body`` frames, as they are produced (SSE streams stay streams).

Nothing is lost to a dropped connection: each request's frames are kept (its :class:`_Exchange`) until
``keep_seconds`` after the response ended, so ``http_resume {after}`` — sent by the control plane after
a reconnect, or by another control-plane instance that took the connection over — sends again every
frame after ``n = after``. Frames produced while disconnected are simply kept (``send`` says it could
not send them). A response larger than ``max_kept_bytes`` keeps only its newest frames; a resume that
needs a dropped one ends the response (the client sees a cut stream, never a corrupted one).

``http_cancel`` (the client went away) tells the app ``http.disconnect``, as a closed browser tab
would: a chat turn keeps running (local mode's rule), a stream stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from starlette.types import ASGIApp, Message

from clawlet.cluster.protocol import (
    HTTP_CANCEL,
    HTTP_REQUEST,
    HTTP_RESUME,
    Header,
    HttpBodyFrame,
    HttpFrame,
    HttpRequestFrame,
    frame_body,
    http_body_frame,
    http_lost_frame,
    http_response_frame,
)
from clawlet.logs import swallowed

log = logging.getLogger(__name__)

KEEP_SECONDS: Final = 120.0
"""How long a finished response's frames are kept for a resume."""
MAX_KEPT_BYTES: Final = 8 * 1024 * 1024
"""Per request: the frames kept for a resume (the newest ones)."""
TUNNEL_HOST: Final = "localhost"
"""The ``Host`` the app sees: the control plane has checked the client's Host and Origin already."""
DROPPED_HEADERS: Final = frozenset({"authorization", "host", "cookie", "connection", "proxy-authorization"})
"""Not passed on: the control plane's credentials and hop-by-hop headers."""

SendFrame = Callable[[Mapping[str, Any]], Awaitable[bool]]
"""Sends a frame to the control plane; ``False`` when not connected (the frame stays kept)."""


@dataclass
class _Exchange:
    """One request in flight (or recently finished) and the frames of its response."""

    request_id: str
    frames: list[HttpFrame] = field(default_factory=list)
    kept_bytes: int = 0
    first_kept: int = 0
    """``n`` of the oldest kept frame (0 is ``http_response``)."""
    finished_at: float | None = None
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def keep(self, frame: HttpFrame, size: int, limit: int) -> None:
        self.frames.append(frame)
        self.kept_bytes += size
        while self.kept_bytes > limit and len(self.frames) > 1:
            dropped = self.frames.pop(0)
            self.kept_bytes -= len(dropped.get("body", "")) if dropped["type"] == "http_body" else 0
            self.first_kept += 1

    def after(self, n: int) -> list[HttpFrame] | None:
        """The kept frames after ``n``; ``None`` when some of them were dropped."""
        if n + 1 < self.first_kept:
            return None
        return self.frames[n + 1 - self.first_kept :]


class TunnelServer:
    """Runs ``http_request`` frames through ``app``; see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        send: SendFrame,
        *,
        keep_seconds: float = KEEP_SECONDS,
        max_kept_bytes: int = MAX_KEPT_BYTES,
    ) -> None:
        self.app = app
        self.send = send
        self.keep_seconds = keep_seconds
        self.max_kept_bytes = max_kept_bytes
        self._exchanges: dict[str, _Exchange] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def running(self) -> int:
        """Requests whose response has not ended."""
        return sum(1 for each in self._exchanges.values() if each.finished_at is None)

    def handle(self, frame: Mapping[str, Any]) -> None:
        """Act on an ``http_request``, ``http_cancel`` or ``http_resume`` frame, in arrival order
        (called by the client's reader: what must wait runs as a task)."""
        kind, request_id = frame["type"], str(frame["id"])
        if kind == HTTP_REQUEST:
            self._forget_old()
            if request_id in self._exchanges:  # sent again (another instance took over): resend
                self._spawn(self.resume(request_id, -1))
                return
            exchange = _Exchange(request_id)
            self._exchanges[request_id] = exchange
            exchange.task = self._spawn(self._run(exchange, cast(HttpRequestFrame, frame)))
        elif kind == HTTP_CANCEL:
            running = self._exchanges.get(request_id)
            if running is not None:
                running.disconnected.set()
        elif kind == HTTP_RESUME:
            self._spawn(self.resume(request_id, int(frame["after"])))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name="tunnel")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def resume(self, request_id: str, after: int) -> None:
        """Send again the frames of ``request_id`` after ``n = after``."""
        exchange = self._exchanges.get(request_id)
        frames = exchange.after(after) if exchange is not None else None
        if frames is None:
            # unknown (never seen, or forgotten) or partly dropped: the control plane ends the response
            log.info("tunnel: cannot resume request %s after %d", request_id, after)
            await self.send(http_lost_frame(request_id, max(after, 0) + 1))
            return
        for frame in frames:
            if not await self.send(frame):
                return

    async def aclose(self) -> None:
        for each in self._exchanges.values():
            each.disconnected.set()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError), swallowed(log, "tunnel: a request task failed"):
                await task

    def _forget_old(self) -> None:
        now = time.monotonic()
        for request_id, exchange in list(self._exchanges.items()):
            if exchange.finished_at is not None and now - exchange.finished_at > self.keep_seconds:
                del self._exchanges[request_id]

    async def _emit(self, exchange: _Exchange, frame: HttpFrame, size: int) -> None:
        exchange.keep(frame, size, self.max_kept_bytes)
        await self.send(frame)

    async def _run(self, exchange: _Exchange, frame: HttpRequestFrame) -> None:
        body = frame_body(frame)
        body_sent = False
        started = False
        n = 0

        async def receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await exchange.disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal started, n
            if message["type"] == "http.response.start":
                started = True
                headers = header_pairs(message.get("headers", []))
                await self._emit(
                    exchange, http_response_frame(exchange.request_id, int(message["status"]), headers), 0
                )
            elif message["type"] == "http.response.body":
                chunk = bytes(message.get("body", b""))
                more = bool(message.get("more_body", False))
                if not chunk and more:
                    return
                n += 1
                await self._emit(exchange, http_body_frame(exchange.request_id, n, chunk, more), len(chunk))

        try:
            await self.app(asgi_scope(frame), receive, send)
        except Exception:
            log.exception("tunnel: %s %s failed", frame["method"], frame["path"])
            if not started:
                await self._emit(
                    exchange,
                    http_response_frame(exchange.request_id, 500, [("content-type", "application/json")]),
                    0,
                )
            n += 1
            error = b'{"error":{"code":"internal_error","message":"the execution plane failed to answer"}}'
            await self._emit(
                exchange,
                http_body_frame(exchange.request_id, n, error if not started else b"", more=False),
                0,
            )
        else:
            last: HttpBodyFrame | None = None
            if exchange.frames and exchange.frames[-1]["type"] == "http_body":
                last = exchange.frames[-1]
            if last is None or last["more"]:  # an app that ended without a final body message
                n += 1
                await self._emit(exchange, http_body_frame(exchange.request_id, n, b"", more=False), 0)
        finally:
            exchange.finished_at = time.monotonic()


def asgi_scope(frame: HttpRequestFrame) -> dict[str, Any]:
    """The ASGI HTTP scope of a tunnelled request."""
    headers: list[tuple[bytes, bytes]] = [(b"host", TUNNEL_HOST.encode())]
    headers += [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in frame["headers"]
        if name.lower() not in DROPPED_HEADERS
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": frame["method"],
        "scheme": "http",
        "path": frame["path"],
        "raw_path": frame["path"].encode("utf-8"),
        "query_string": frame["query"].encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": (TUNNEL_HOST, 80),
        "state": {},
    }


def header_pairs(raw: list[tuple[bytes, bytes]] | Any) -> list[Header]:
    """ASGI headers as the tunnel's ``[name, value]`` strings."""
    return [(bytes(name).decode("latin-1"), bytes(value).decode("latin-1")) for name, value in raw]

"""Simulated execution planes: light ``/ws/vm`` clients for scale tests and benchmarks.

A :class:`SimExecPlane` speaks :mod:`clawlet.cluster.protocol` over a real WebSocket the way
``clawlet exec-plane`` does — ``auth`` with the user's VM token (JWT), the one-time ticket in the
URL, ``init`` (its event encoding checked), a ``heartbeat {id}`` every ``heartbeat_interval``
seconds — but runs no agent and keeps no state on disk, so one process can hold a thousand of
them. What it measures:

* the round trip of every heartbeat the control plane acknowledges (``heartbeat_ack`` in ``init``:
  the control plane answers ``heartbeat {id}`` once everything sent before it is handled);
* whether it is still connected (a drop is not retried: it counts as a lost connection);
* the HTTP requests it answered.

HTTP over the WebSocket (cluster mode v2, "tunnel"): the ``http_request``, ``http_cancel`` and
``http_resume`` frames go to a real :class:`clawlet.execplane.tunnel.TunnelServer`, the execution
plane's own end of the tunnel, so they are answered exactly as ``clawlet exec-plane`` answers them
(numbering, a repeated request resending what was answered, ``http_resume {after}`` resending the
frames numbered above ``after``, a lost ``http_body`` for what it cannot resume, ``http_cancel``
telling the app the client went away); only the app differs: instead of the user's local-mode API,
``handler`` (default :func:`default_handler`) answers each request with one :class:`HttpReply`.
Anything else the control plane sends (``start_session``, …) is counted in
:attr:`SimExecPlane.ignored` and otherwise ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from clawlet.cluster.protocol import (
    ERROR,
    HEARTBEAT,
    HEARTBEAT_INTERVAL,
    HTTP_CANCEL,
    HTTP_REQUEST,
    HTTP_RESUME,
    INIT,
    INIT_HEARTBEAT_ACK,
    MAX_FRAME_BYTES,
    FrameError,
    auth_frame,
    encode,
    frame_body,
    heartbeat_frame,
    parse_frame,
)
from clawlet.execplane.client import check_event_encoding, connect_url
from clawlet.execplane.tunnel import TunnelServer
from clawlet.logs import swallowed

log = logging.getLogger(__name__)

SIMULATED_HEADER: Final = "x-clawlet-simulated-exec-plane"
"""Header of :func:`default_handler`'s answers: the user id of the plane that answered."""


class SimRefused(Exception):
    """The control plane refused the connection (an ``error`` frame, or a close, before ``init``)."""


@dataclass(frozen=True)
class HttpRequest:
    """One ``http_request`` frame, its body decoded."""

    id: str
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class HttpReply:
    """What a handler answers: ``http_response`` (status, headers) and the body of one ``http_body``."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


HttpHandler = Callable[[str, HttpRequest], HttpReply | Awaitable[HttpReply]]
"""``(user_id, request) -> reply`` (sync or async)."""


def json_reply(status: int, data: Any, user_id: str) -> HttpReply:
    """A JSON answer marked with :data:`SIMULATED_HEADER`."""
    body = json.dumps(data).encode()
    headers = [("content-type", "application/json"), (SIMULATED_HEADER, user_id)]
    return HttpReply(status, headers, body)


def default_handler(user_id: str, request: HttpRequest) -> HttpReply:
    """``GET /api/sessions``: one session, as local mode lists them; anything else: 404."""
    if request.method == "GET" and request.path == "/api/sessions":
        session = {
            "id": f"sim-{user_id}",
            "title": "simulated",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "message_count": 0,
            "waiting": False,
        }
        return json_reply(200, [session], user_id)
    error = {"code": "not_found", "message": f"the simulated exec plane has no {request.path}"}
    return json_reply(404, {"error": error}, user_id)


def parse_http_request(frame: Mapping[str, Any]) -> HttpRequest:
    """An ``http_request`` frame as :class:`HttpRequest`; ``ValueError`` when it is malformed."""
    try:
        parsed = parse_frame(frame)
    except FrameError as exc:
        raise ValueError(str(exc)) from None
    if parsed["type"] != HTTP_REQUEST:
        raise ValueError(f"not an http_request frame: {parsed['type']}")
    headers = [(name, value) for name, value in parsed["headers"]]
    return HttpRequest(
        parsed["id"], parsed["method"], parsed["path"], parsed["query"], headers, frame_body(parsed)
    )


_REQUEST: contextvars.ContextVar[HttpRequest] = contextvars.ContextVar("sim_http_request")
"""The request the tunnel's task for it is running (set before the task is made; tasks copy it)."""


@dataclass
class SimExecPlane:
    """One simulated execution plane (see the module docstring). :meth:`connect`, then
    :meth:`close`; the counters are read as it runs."""

    ws_url: str
    user_id: str
    token: str
    ticket: str | None = None
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    first_heartbeat: float | None = None
    """Seconds before the first heartbeat (default: random within one interval, so a thousand
    planes do not beat in step)."""
    handler: HttpHandler = default_handler
    init: dict[str, Any] = field(default_factory=dict)
    heartbeat_rtts: list[float] = field(default_factory=list)
    """Seconds from sending each acknowledged heartbeat to its acknowledgement."""
    heartbeats_sent: int = 0
    http_served: int = 0
    http_cancelled: int = 0
    http_resumed: int = 0
    errors: list[str] = field(default_factory=list)
    """``error`` frames the control plane sent, and frames that could not be handled."""
    ignored: dict[str, int] = field(default_factory=dict)
    close_code: int | None = None
    _ws: ClientConnection | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _tunnel: TunnelServer | None = None
    _answering: set[str] = field(default_factory=set)
    _pending_beats: dict[str, float] = field(default_factory=dict)
    _send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _closed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def connected(self) -> bool:
        """``init`` came and the socket has not closed since."""
        return bool(self.init) and not self._closed.is_set()

    @property
    def acknowledged(self) -> int:
        return len(self.heartbeat_rtts)

    async def connect(self, timeout: float = 30.0) -> dict[str, Any]:
        """Open the socket (the ticket in the URL), send ``auth``, wait for ``init``; start the
        heartbeats and the reader. Raises :class:`SimRefused` or ``OSError``/``TimeoutError``."""
        url = connect_url(self.ws_url, self.user_id, self.ticket)
        self.ticket = None  # single use
        ws = await connect(url, open_timeout=timeout, max_size=MAX_FRAME_BYTES)
        try:
            await ws.send(encode(auth_frame(self.token)))
            raw = await asyncio.wait_for(ws.recv(), timeout)
            frame = json.loads(raw)
            if not isinstance(frame, dict) or frame.get("type") != INIT:
                raise SimRefused(f"{self.user_id}: expected init, got {str(raw)[:200]}")
            data = frame.get("data")
            self.init = data if isinstance(data, dict) else {}
            check_event_encoding(self.init)
        except ConnectionClosed as exc:
            raise SimRefused(f"{self.user_id}: closed before init ({exc.rcvd})") from None
        except BaseException:
            with swallowed(log, "%s: closing the socket failed", self.user_id):
                await ws.close()
            raise
        self._ws = ws
        self._tunnel = TunnelServer(self._app, self._send_frame)
        self._spawn(self._read())
        if self.init.get(INIT_HEARTBEAT_ACK):
            self._spawn(self._beat())
        return self.init

    async def close(self) -> None:
        """Close the socket and stop every task."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if self._tunnel is not None:
            await self._tunnel.aclose()
        if self._ws is not None:
            with swallowed(log, "%s: closing the socket failed", self.user_id):
                await self._ws.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _send(self, frame: Mapping[str, Any]) -> None:
        assert self._ws is not None
        async with self._send_lock:
            await self._ws.send(encode(frame))

    async def _send_frame(self, frame: Mapping[str, Any]) -> bool:
        """The tunnel's sender: ``False`` once the socket is closed."""
        try:
            await self._send(frame)
        except ConnectionClosed:
            return False
        return True

    async def _beat(self) -> None:
        delay = self.first_heartbeat
        if delay is None:
            delay = random.uniform(0, self.heartbeat_interval)  # noqa: S311 (spreading load)
        with contextlib.suppress(ConnectionClosed):
            await asyncio.sleep(delay)
            while True:
                beat_id = uuid.uuid4().hex
                self._pending_beats[beat_id] = time.perf_counter()
                self.heartbeats_sent += 1
                await self._send(heartbeat_frame(time.time(), beat_id))
                await asyncio.sleep(self.heartbeat_interval)

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                try:
                    frame = json.loads(raw)
                    if not isinstance(frame, dict):
                        raise ValueError("a frame that is not an object")
                    await self._on_frame(frame)
                except ValueError as exc:
                    self.errors.append(f"bad frame: {exc}")
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self._ws.close_code
            self._closed.set()

    async def _on_frame(self, frame: dict[str, Any]) -> None:
        kind = str(frame.get("type"))
        if kind == HEARTBEAT:
            sent = self._pending_beats.pop(str(frame.get("id")), None)
            if sent is not None:
                self.heartbeat_rtts.append(time.perf_counter() - sent)
        elif kind == HTTP_REQUEST:
            assert self._tunnel is not None
            request = parse_http_request(frame)
            token = _REQUEST.set(request)
            try:
                self._tunnel.handle(frame)
            finally:
                _REQUEST.reset(token)
        elif kind in (HTTP_CANCEL, HTTP_RESUME):
            assert self._tunnel is not None
            try:
                parsed = parse_frame(frame)
            except FrameError as exc:
                raise ValueError(str(exc)) from None
            if kind == HTTP_RESUME:
                self.http_resumed += 1
            elif str(frame["id"]) in self._answering:
                self.http_cancelled += 1
            self._tunnel.handle(parsed)
        elif kind == ERROR:
            self.errors.append(json.dumps(frame.get("error"))[:300])
        else:
            self.ignored[kind] = self.ignored.get(kind, 0) + 1

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app the tunnel runs a request through: ``handler``'s answer, in one body."""
        request = _REQUEST.get()
        self._answering.add(request.id)
        try:
            reply = self.handler(self.user_id, request)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:  # the tunnel answers 500, as for a failing app
            self.errors.append(f"answering {request.method} {request.path}: {type(exc).__name__}: {exc}")
            raise
        finally:
            self._answering.discard(request.id)
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body, "more_body": False})
        self.http_served += 1

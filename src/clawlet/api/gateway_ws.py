"""The OpenClaw Gateway WebSocket endpoint: ``/gateway`` on the main app, and optionally its own port.

``router`` adds ``/gateway`` to the FastAPI app (the server is ``app.state.gateway``);
:func:`build_gateway_app` serves the same handler at ``/`` and ``/gateway`` as a separate
Starlette app for ``--gateway-port`` (OpenClaw clients expect ``ws://host:18789`` with no path);
:func:`serve_with_gateway_port` runs both in one event loop (:func:`serve_together`: one signal
handler for every uvicorn server).
The HTTP token middleware does not cover WebSockets: the gateway checks its token in ``connect``;
Host and Origin are checked before the upgrade (:class:`~clawlet.api.origin_guard.OriginGuard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

import uvicorn
from fastapi import APIRouter, FastAPI, WebSocket
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from clawlet import aio
from clawlet.api.origin_guard import OriginGuard, OriginPolicy
from clawlet.config import Settings
from clawlet.gateway.asgi import serve_websocket
from clawlet.gateway.server import GatewayServer
from clawlet.serving import uvicorn_options

router = APIRouter()


@router.websocket("/gateway")
async def gateway_socket(websocket: WebSocket) -> None:
    server: GatewayServer = websocket.app.state.gateway
    await serve_websocket(server, websocket)


def build_gateway_app(server: GatewayServer) -> Starlette:
    """A WebSocket-only app serving the gateway at ``/`` and ``/gateway``, with the main app's Host
    and Origin checks (:mod:`clawlet.api.origin_guard`)."""

    async def endpoint(websocket: WebSocket) -> None:
        await serve_websocket(server, websocket)

    app = Starlette(routes=[WebSocketRoute("/", endpoint), WebSocketRoute("/gateway", endpoint)])
    app.add_middleware(OriginGuard, policy=OriginPolicy.from_settings(server.settings))
    app.state.gateway = server
    return app


class _SharedSignalServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :func:`serve_together`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def shared_signal_server(config: uvicorn.Config) -> uvicorn.Server:
    return _SharedSignalServer(config)


async def serve_together(servers: list[uvicorn.Server]) -> None:
    """Run the servers until a signal (or one of them) stops them; then stop them all.

    Each uvicorn server would install its own SIGINT/SIGTERM handler and the last one would win,
    leaving the others running; build them with :func:`shared_signal_server` instead."""

    def stop(signum: int, frame: FrameType | None) -> None:
        for server in servers:
            if server.should_exit and signum == signal.SIGINT:
                server.force_exit = True  # a second Ctrl+C
            server.should_exit = True

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            previous[signum] = signal.signal(signum, stop)
    try:
        tasks = [asyncio.create_task(server.serve()) for server in servers]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def serve_with_gateway_port(app: FastAPI, settings: Settings, graceful_seconds: int) -> None:
    """Serve ``app`` on ``settings.port`` and its gateway alone on ``settings.gateway_port``."""
    assert settings.gateway_port is not None
    main = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=graceful_seconds,
        **uvicorn_options(),
    )
    gateway = uvicorn.Config(
        build_gateway_app(app.state.gateway),
        host=settings.host,
        port=settings.gateway_port,
        log_config=None,
        lifespan="off",  # the main app's lifespan owns the services and closes the gateway
        timeout_graceful_shutdown=graceful_seconds,
        **uvicorn_options(),
    )
    aio.run(serve_together([shared_signal_server(main), shared_signal_server(gateway)]))

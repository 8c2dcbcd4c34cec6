"""The lifecycle the scripted WebSocket servers share (the fake control plane,
:mod:`tests.support.scripted_control_plane`, and the fake OpenClaw gateway,
:mod:`tests.support.scripted_gateway`): a real ``websockets`` server on 127.0.0.1 whose ephemeral
port is kept across :meth:`stop`/:meth:`start`, used as ``async with``; leaving the block checks
that the server's own scripted handlers raised nothing."""

from __future__ import annotations

import asyncio
from typing import Any, Self

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response


class ScriptedWsServer:
    """Subclasses set :attr:`noun`, handle each connection in :meth:`_handle` (appending it to
    :attr:`connections`; each has a set of ``tasks`` cancelled on stop) and may refuse openings in
    :meth:`_process_request`."""

    noun = "scripted server"

    def __init__(self) -> None:
        self.port = 0
        self.connections: list[Any] = []
        self.errors: list[BaseException | None] = []
        """Exceptions raised by scripted handlers (a test helper bug, not client behaviour)."""
        self._server: Server | None = None

    async def _handle(self, ws: ServerConnection) -> None:
        raise NotImplementedError

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        return None  # every opening handshake goes ahead

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await serve(
            self._handle, "127.0.0.1", self.port, ping_interval=None, process_request=self._process_request
        )
        self.port = int(next(iter(self._server.sockets)).getsockname()[1])

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        await server.wait_closed()
        for conn in self.connections:
            task: asyncio.Task[Any]
            for task in list(conn.tasks):
                task.cancel()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, *exc_info: object) -> None:
        await self.stop()
        if exc_type is None:
            assert self.errors == [], f"the {self.noun} itself failed: {self.errors!r}"

"""Starlette/FastAPI WebSockets as gateway transports.

:func:`serve_websocket` accepts the socket and hands it to
:meth:`GatewayServer.handle`; :class:`StarletteTransport` is the small
:class:`~clawlet.gateway.server.Transport` over a Starlette ``WebSocket``.
"""

from __future__ import annotations

import logging

from starlette.websockets import WebSocket, WebSocketState

from clawlet.gateway.server import CLOSE_NORMAL, GatewayServer
from clawlet.logs import swallowed

log = logging.getLogger(__name__)


class StarletteTransport:
    """A Starlette ``WebSocket`` as a gateway transport."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def send_text(self, text: str) -> None:
        await self.websocket.send_text(text)

    async def receive_text(self) -> str | bytes | None:
        try:
            message = await self.websocket.receive()
        except (RuntimeError, OSError):
            return None
        if message.get("type") == "websocket.disconnect":
            return None
        text = message.get("text")
        if isinstance(text, str):
            return text
        data = message.get("bytes")
        if isinstance(data, bytes | bytearray):
            return bytes(data)  # decoded (strictly, as UTF-8) with the frame
        return ""

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if self.websocket.application_state == WebSocketState.DISCONNECTED:
            return
        with swallowed(log, "gateway: closing the WebSocket failed"):
            await self.websocket.close(code=code, reason=reason)


async def serve_websocket(server: GatewayServer, websocket: WebSocket) -> None:
    """Serve one gateway connection on a Starlette WebSocket (not yet accepted; its Host and Origin
    were checked by :class:`~clawlet.api.origin_guard.OriginGuard`)."""
    remote = websocket.client.host if websocket.client else "?"
    await websocket.accept()
    await server.handle(StarletteTransport(websocket), remote=remote)

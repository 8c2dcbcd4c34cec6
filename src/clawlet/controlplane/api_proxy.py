"""Cluster mode's API: every guarded request of a signed-in user, answered by that user's execution plane.

:class:`TunnelProxy` is the ASGI app the cluster front door (:mod:`clawlet.controlplane.frontend`) hands
``/api/*``, ``/v1/*``, ``/process`` and the API docs to once the bearer token named the user
(``scope["state"]["user_id"]``). It reads the request (at most ``max_body`` bytes: 413 beyond), sends
it through the tunnel (:class:`~clawlet.controlplane.routing.TunnelRouter`) and streams the execution
plane's answer back as it comes, status and headers included: the workbench, the inbox, ``/v1`` and
``/process`` behave exactly as they do against ``clawlet serve`` on the user's machine, because that
is what answers them.

When the user's execution plane is not connected to any instance, ``GET /api/sessions`` and ``GET
/api/sessions/{id}/history`` are answered read-only from the transcripts the execution plane synced
after each turn (:class:`OfflineTranscripts`), with the header ``X-Clawlet-Exec-Plane: offline`` (and
``"offline": true`` in a history); every other request gets 503 ``exec_plane_offline`` in its
surface's error format. An answer cut by a lost execution plane ends the stream where it was (502
``exec_plane_lost`` if nothing had been sent yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from clawlet.api.origin_guard import refusal
from clawlet.cluster.protocol import HttpFrame, frame_body, http_request_frame
from clawlet.controlplane.routing import ExecPlaneOffline, TunnelRouter
from clawlet.execplane.tunnel import header_pairs

log = logging.getLogger(__name__)

MAX_BODY: Final = 32 * 1024 * 1024
"""The largest request body passed through (base64 in one frame)."""
OFFLINE_HEADER: Final = "x-clawlet-exec-plane"
SESSIONS_PATH: Final = "/api/sessions"
HISTORY_PATH: Final = re.compile(r"^/api/sessions/(?P<session_id>[^/]+)/history$")
DROPPED_RESPONSE_HEADERS: Final = frozenset(
    {"set-cookie", "connection", "keep-alive", "transfer-encoding", "upgrade", "x-content-type-options"}
)
TOO_LARGE: Final = b"\0too large"
"""What :meth:`TunnelProxy._read_body` returns for a body over the limit (compared by identity)."""


class OfflineTranscripts(Protocol):
    """The transcripts execution planes synced to the control plane (``transcript_sync``)."""

    def list_transcripts(self, user_id: str, workspace: str) -> list[dict[str, Any]]: ...

    def get_transcript(self, user_id: str, workspace: str, session_id: str) -> dict[str, Any] | None: ...


class TunnelProxy:
    """See the module docstring."""

    def __init__(
        self, router: TunnelRouter, transcripts: OfflineTranscripts | None = None, *, max_body: int = MAX_BODY
    ) -> None:
        self.router = router
        self.transcripts = transcripts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user_id: str = scope["state"]["user_id"]
        path: str = scope.get("path", "")
        body = await self._read_body(receive)
        if body is None:
            return  # the client went away
        if body is TOO_LARGE:
            limit = f"{self.max_body // (1024 * 1024)} MiB"
            await refusal(path, 413, "payload_too_large", f"the request body is larger than {limit}")(
                scope, receive, send
            )
            return
        headers = header_pairs(scope.get("headers", []))
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        frame = http_request_frame(uuid.uuid4().hex, scope["method"], path, query, headers, body)
        frames = self.router.exchange(user_id, frame)
        relay = asyncio.ensure_future(self._relay(frames, scope, receive, send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not relay.done():  # the client went away: stop (the tunnel cancels on the exec plane)
                relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay
            await frames.aclose()

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body; :data:`TOO_LARGE` beyond ``max_body``; ``None`` if the client went away."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size <= self.max_body:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks) if size <= self.max_body else TOO_LARGE

    async def _relay(
        self, frames: AsyncIterator[HttpFrame], scope: Scope, receive: Receive, send: Send
    ) -> None:
        path: str = scope.get("path", "")
        started = False
        try:
            async for frame in frames:
                if frame["type"] == "http_response":
                    if started:
                        continue
                    started = True
                    raw = response_headers(frame["headers"])
                    await send({"type": "http.response.start", "status": frame["status"], "headers": raw})
                    continue
                if not started:
                    message = "the execution plane lost this request (it restarted); send it again"
                    await refusal(path, 502, "exec_plane_lost", message)(scope, receive, send)
                    return
                await send(
                    {"type": "http.response.body", "body": frame_body(frame), "more_body": frame["more"]}
                )
        except ExecPlaneOffline:
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await (await self._offline(scope))(scope, receive, send)
            return
        if not started:  # the exchange ended without an answer
            await refusal(path, 502, "exec_plane_lost", "the execution plane did not answer")(
                scope, receive, send
            )

    async def _offline(self, scope: Scope) -> Response:
        """The answer while the user's execution plane is not connected."""
        path: str = scope.get("path", "")
        user_id: str = scope["state"]["user_id"]
        transcripts = self.transcripts
        if scope["method"] == "GET" and transcripts is not None:
            if path == SESSIONS_PATH:
                listed = await asyncio.to_thread(transcripts.list_transcripts, user_id, "")
                return offline_json([session_summary(item) for item in listed])
            match = HISTORY_PATH.match(path)
            if match:
                found = await asyncio.to_thread(transcripts.get_transcript, user_id, "", match["session_id"])
                if found is not None:
                    return offline_json({**found, "running": False, "waiting": False, "offline": True})
        message = (
            "your execution plane is not connected: start `clawlet exec-plane` on your machine "
            "(the session list and histories are readable meanwhile)"
        )
        return refusal(path, 503, "exec_plane_offline", message)


def response_headers(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """The execution plane's response headers as this server sends them: no cookies (the control
    plane's origin is shared by every user), no hop-by-hop headers, and ``nosniff`` always, so an
    answer is never taken for a page to run."""
    kept = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
        if name.lower() not in DROPPED_RESPONSE_HEADERS
    ]
    return [*kept, (b"x-content-type-options", b"nosniff")]


def session_summary(item: dict[str, Any]) -> dict[str, Any]:
    """A synced transcript's entry as ``GET /api/sessions`` lists sessions."""
    return {
        "id": item["session_id"],
        "title": item.get("title", ""),
        "created_at": item.get("updated_at"),
        "updated_at": item.get("updated_at"),
        "message_count": item.get("message_count", 0),
        "waiting": False,
    }


def offline_json(content: Any) -> JSONResponse:
    return JSONResponse(content, headers={OFFLINE_HEADER: "offline", "Cache-Control": "no-store"})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass

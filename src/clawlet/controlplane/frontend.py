"""Cluster mode's front door: the HTTP API and UIs of local mode, one per user, in the control plane.

:func:`create_cluster_app` serves, on one port:

* ``/ws/vm`` and ``/healthz`` — the execution planes' side (:mod:`clawlet.controlplane.server`);
* ``/health`` — public: the control plane's health and how many execution planes are connected;
  ``/auth`` — public: ``{"required": true, "authenticated": <is the bearer token a user's>}``, what
  the UIs ask before showing their sign-in screen;
* ``/api/*``, ``/v1/*``, ``/process`` — the local-mode API (workbench, inbox, OpenAI-compatible,
  native agent, Open WebUI loader) of the user the bearer token belongs to (tokens are made with
  ``clawlet control-plane add-user`` / ``token``), answered by **that user's execution plane**: the
  request goes through the HTTP tunnel (:mod:`clawlet.controlplane.api_proxy`,
  :mod:`clawlet.controlplane.routing`) to the local-mode app the execution plane runs over its own
  home, from whichever control-plane instance holds its socket. The conversation, the workspace files,
  memory, approvals and the inbox live on the user's machine and nowhere else, so no request can
  name another user's sessions, files or tasks: they do not exist there. A missing or unknown token
  gets the surface's 401; a user whose execution plane is offline gets their session list and
  histories read-only and 503 ``exec_plane_offline`` for anything else;
* ``/api/cluster/*`` — what only cluster mode has, for the token's user: ``GET /api/cluster/me``
  (the user, whether their execution plane is connected) and ``GET
  /api/cluster/sessions/{session_id}/events?workspace=&after=`` — the session's events as the
  execution plane sent them, in the seed's vocabulary (seed 001 §7.4: ``text_chunk``,
  ``tool_call_start``, …, each with the ``seq`` the execution plane gave it): the one place where
  clawlet's events get the seed's names (:class:`clawlet.controlplane.seed_events.SeedEventStream`; events
  without one are left out), as SSE until the session stops; 404 for a session the user never
  started. The events come from the control plane's durable event log
  (:mod:`clawlet.controlplane.event_log`); the SSE ``id`` is the event's ``n`` in that log, so
  ``after=n`` or ``Last-Event-ID: n`` resumes after it, across restarts of the control plane.
  Whichever instance the stream is on, it gets the events live, wherever they are stored
  (:mod:`clawlet.controlplane.event_feed`); its headers go out once that holds;
* the UI (workbench at ``/``, inbox at ``/inbox``) — public static files, as in local mode.

The OpenClaw gateway WebSocket (``/gateway``) of local mode is not served in cluster mode.

The control plane keeps no copy of a user's home: only users, tokens, the event log and the
transcripts the execution planes sync for offline reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from clawlet.api.auth import is_guarded, refuse
from clawlet.api.errors import install_error_handlers
from clawlet.api.origin_guard import OriginGuard, OriginPolicy
from clawlet.api.sse_response import SseResponse
from clawlet.api.static import install_static
from clawlet.config import Settings
from clawlet.controlplane.api_proxy import TunnelProxy
from clawlet.controlplane.seed_events import SeedEventStream
from clawlet.controlplane.server import (
    ControlPlane,
    ControlPlaneConfig,
    SessionForbidden,
    SessionNotFound,
    create_control_plane_app,
)
from clawlet.errors import ApiError

log = logging.getLogger(__name__)

CLUSTER_API: Final = "/api/cluster/"


def bearer_token(scope: Scope) -> str | None:
    authorization = Headers(scope=scope).get("authorization") or ""
    if not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip() or None


class ClusterFrontend:
    """ASGI: every request passes the Host and Origin checks of ``policy`` (``/ws/vm`` too); then
    guarded paths go to the token's user's app, everything else to the control plane's."""

    def __init__(self, control_app: FastAPI, plane: ControlPlane, policy: OriginPolicy) -> None:
        self.control_app = control_app
        self.plane = plane
        self.proxy = TunnelProxy(plane.tunnel, plane.event_log)
        self.cluster_api = cluster_api(plane)
        self.checked = OriginGuard(self.route, policy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.checked(scope, receive, send)

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_guarded(scope):
            await self.control_app(scope, receive, send)
            return
        token = bearer_token(scope)
        user = await asyncio.to_thread(self.plane.authenticate_user, token) if token else None
        if user is None:
            await refuse(scope, receive, send)
            return
        scope.setdefault("state", {})["user_id"] = user.id
        if scope.get("path", "").startswith(CLUSTER_API):
            await self.cluster_api(scope, receive, send)
            return
        await self.proxy(scope, receive, send)


def cluster_api(plane: ControlPlane) -> FastAPI:
    """``/api/cluster/*`` for the authenticated user (``request.state.user_id``)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    install_error_handlers(app)

    @app.get("/api/cluster/me")
    async def me(request: Request) -> dict[str, Any]:
        user_id: str = request.state.user_id
        return {"user_id": user_id, "exec_plane_connected": await plane.exec_plane_online(user_id)}

    @app.get("/api/cluster/sessions/{session_id}/events")
    async def session_events(
        request: Request,
        session_id: str,
        workspace: Annotated[str, Query(max_length=64)] = "",
        after: Annotated[int | None, Query(ge=0)] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> SseResponse:
        user_id: str = request.state.user_id
        if last_event_id:
            after = resume_after(last_event_id, after)
        remote_id = session_id
        try:
            subscription = plane.subscribe(user_id, remote_id, after=after)
        except (SessionNotFound, SessionForbidden):
            raise ApiError(404, "not_found", f"no session {session_id!r} in this cluster") from None
        try:  # the stream is live, on every instance, when its headers arrive
            await subscription.ready()
        except BaseException:
            subscription.close()
            raise

        stream = SeedEventStream()
        return stream.response(stream.follow(subscription), {})

    return app


def resume_after(last_event_id: str, default: int | None) -> int | None:
    """Where a stream resumes for ``Last-Event-ID``: ``n`` (up to 19 digits: a BIGINT) → after
    ``n``; anything else → ``default`` (the ``after`` parameter)."""
    number = last_event_id.strip()
    return int(number) if number.isascii() and number.isdigit() and len(number) <= 19 else default


def create_cluster_app(config: ControlPlaneConfig, settings: Settings | None = None) -> ClusterFrontend:
    """The control plane with every user's HTTP API and the UIs (see the module docstring).
    ``settings`` supplies the model used here for titles and compression (default: the environment's)."""
    plane = ControlPlane(config)
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        plane.close()

    control_app = create_control_plane_app(plane=plane)
    control_app.router.lifespan_context = _chain(lifespan, control_app.router.lifespan_context)

    @control_app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "mode": "cluster",
            "connected_exec_planes": len(plane.connected_users()),
            "instance_id": plane.broker.instance_id,
        }

    @control_app.get("/auth")
    async def auth_status(request: Request) -> JSONResponse:
        # what the UIs ask before showing the sign-in screen (as clawlet.api.auth in local mode):
        # cluster mode always wants a token; is this one a user's?
        token = bearer_token(request.scope)
        user = await asyncio.to_thread(plane.authenticate_user, token) if token else None
        return JSONResponse(
            {"required": True, "authenticated": user is not None},
            headers={"Cache-Control": "no-store"},
        )

    install_static(control_app)
    # execution planes connect to the public URL, so its host name is one this server answers to
    policy = OriginPolicy.from_settings(settings, also_hosts=[urlsplit(config.public_url).netloc])
    return ClusterFrontend(control_app, plane, policy)


def _chain(outer: Any, inner: Any) -> Any:
    """A lifespan that runs ``inner`` inside ``outer``."""

    @contextlib.asynccontextmanager
    async def both(app: FastAPI) -> AsyncIterator[None]:
        async with outer(app), inner(app):
            yield

    return both

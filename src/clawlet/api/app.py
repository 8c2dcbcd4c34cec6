"""The FastAPI app factory: services, auth, error format, and the routers of each surface."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from clawlet import __version__
from clawlet.api import auth, gateway_ws, health, native, process
from clawlet.api.errors import OPENAI_PREFIX, error_body, install_error_handlers
from clawlet.api.inbox import install_inbox
from clawlet.api.openai import chat as openai_chat
from clawlet.api.openai import responses as openai_responses
from clawlet.api.openai.errors import openai_error
from clawlet.api.openapi_errors import document_errors
from clawlet.api.origin_guard import OriginGuard, OriginPolicy
from clawlet.api.static import install_static
from clawlet.api.unicode_guard import RefuseLoneSurrogates
from clawlet.api.workbench import chat, compress, config_api, files, sessions, skills, tokens
from clawlet.config import Settings
from clawlet.gateway.server import AgentLister, GatewayServer, ModelLister
from clawlet.home import init_home
from clawlet.inbox.service import build_inbox
from clawlet.logs import RequestLogging
from clawlet.runtime.engine_pool import EnginePool, engine_spec
from clawlet.services import (
    RuntimeTable,
    Services,
    WorkspaceRunObserver,
    Workspaces,
    build_services,
    local_runtimes,
    pooled_runtimes,
)

log = logging.getLogger(__name__)


def token_matches(accepted: list[str], authorization: str | None) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header against every accepted
    token (all are compared, so timing does not tell which one nearly matched)."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return False
    supplied = authorization[7:].strip().encode()
    matched = False
    for token in accepted:
        matched |= hmac.compare_digest(supplied, token.encode())
    return matched


class TokenGuard:
    """ASGI middleware: ``/api/*``, ``/v1/*``, ``/process`` and the API docs need ``Authorization:
    Bearer <token>`` (each surface answers 401 in its own error format); other paths pass. Plain ASGI, so
    streamed responses are not copied through an extra stream."""

    def __init__(self, app: ASGIApp, tokens: list[str]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_guarded(scope) or token_matches(self.tokens, Headers(scope=scope).get("authorization")):
            await self.app(scope, receive, send)
            return
        await refuse(scope, receive, send)


async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
    """Log an auth failure and answer 401 in the format of the surface the path belongs to."""
    path = scope.get("path", "")
    client = scope.get("client")
    log.warning(
        "auth failure: %s %s from %s",
        scope.get("method", ""),
        path,
        client[0] if client else "?",
        extra={"event": "auth_failure", "path": path},
    )
    await unauthorized(path)(scope, receive, send)


#: FastAPI's API documentation: it describes every guarded route, so it is guarded too
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


def is_guarded(scope: Scope) -> bool:
    """Whether a request needs a bearer token: HTTP requests to ``/api/*``, ``/v1/*``, ``/process``
    and the API documentation."""
    path: str = scope.get("path", "")
    return scope["type"] == "http" and (
        path.startswith(("/api/", OPENAI_PREFIX)) or path == "/process" or path in DOCS_PATHS
    )


def unauthorized(path: str) -> Response:
    """The 401 of the surface ``path`` belongs to (OpenAI's error shape or the workbench's)."""
    if path.startswith(OPENAI_PREFIX) or path == "/process":
        return openai_error("missing or invalid API key", 401, code="invalid_api_key")
    return JSONResponse(
        error_body("unauthorized", "missing or wrong bearer token"),
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def create_app(
    settings: Settings | None = None,
    *,
    demo_token_delay: float = 0.0,
    list_agents: AgentLister | None = None,
    list_models: ModelLister | None = None,
    runtimes: RuntimeTable = local_runtimes,
    check_origins: bool = True,
    on_run: WorkspaceRunObserver | None = None,
) -> FastAPI:
    """The app of one clawlet home. ``runtimes`` says where sessions run (default: in this process;
    cluster mode's exec plane passes its own, see :mod:`clawlet.execplane.daemon`). ``check_origins=False``
    when an outer app already checks Host and Origin (:mod:`clawlet.api.origin_guard`). ``on_run``
    is told of every run any workspace starts (the exec plane forwards their events)."""
    settings = settings or Settings()
    pool = None
    if settings.engine_workers and runtimes is local_runtimes:  # turns run on engine worker processes
        pool = EnginePool(settings.engine_workers)
        runtimes = pooled_runtimes(pool)
    services: Services = build_services(
        settings, demo_token_delay=demo_token_delay, runtimes=runtimes, on_run=on_run
    )
    workspaces = Workspaces(services, demo_token_delay=demo_token_delay, runtimes=runtimes, on_run=on_run)
    if pool is not None:  # each worker builds the default workspace's engine before it is ready
        pool.warm = engine_spec(services.engine_handle)
    inbox = build_inbox(settings, workspaces)
    # OpenClaw clients drive clawlet's agents over WebSocket at /gateway (and --gateway-port); the
    # agents are the inbox's (openclaw.json), each running in the clawlet workspace of its name
    gateway = GatewayServer(
        settings, workspaces, list_agents=list_agents or inbox.gateway_agents, list_models=list_models
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        init_home(settings.paths)
        services.sessions.mark_interrupted_turns()  # turns the last run was stopped in, unanswered
        app.state.started_at = time.time()  # uptime and /health/ready
        await inbox.start()  # recovers tasks a previous run left running or pending
        warming = None if pool is None else asyncio.create_task(pool.start(), name="engine-workers")
        yield
        await inbox.close()  # before the sessions, so interrupted tasks say why they failed
        for each in workspaces.all():
            await each.sessions.shutdown()
        if pool is not None and warming is not None:
            await asyncio.gather(warming, return_exceptions=True)
            await pool.stop()
        await gateway.close()  # after the sessions: clients hear their runs end, then shutdown

    app = FastAPI(title="clawlet", version=__version__, lifespan=lifespan)
    app.state.services = services
    app.state.workspaces = workspaces
    app.state.gateway = gateway
    app.state.inbox = inbox
    app.state.engine_pool = pool
    install_error_handlers(app)
    document_errors(app)  # /openapi.json lists every error answer of each operation
    # Inside the token check (added later, so outer): only authorised bodies are read and checked.
    app.add_middleware(RefuseLoneSurrogates)

    if settings.accepted_tokens:
        app.add_middleware(TokenGuard, tokens=settings.accepted_tokens)
    if check_origins:  # outside the token check: a request for another Host is refused first
        app.add_middleware(OriginGuard, policy=OriginPolicy.from_settings(settings))

    for module in (chat, sessions, compress, skills, files, tokens, config_api):
        app.include_router(module.router, prefix="/api")
    app.include_router(native.router, prefix="/api")
    install_inbox(app)  # /api/v1: the task inbox
    app.include_router(openai_chat.router, prefix="/v1")
    app.include_router(openai_responses.router, prefix="/v1")
    app.include_router(process.router)  # Open WebUI's external document loader
    app.include_router(gateway_ws.router)  # the OpenClaw gateway protocol; checks its own token
    app.include_router(health.router)  # public, like the seed's; /health/live never needs a token
    app.include_router(auth.router)  # public: GET /auth, whether the UIs must ask for a token
    install_static(app)
    # Added last, so it wraps everything above: every request (auth failures included) gets an id.
    app.add_middleware(RequestLogging)
    return app

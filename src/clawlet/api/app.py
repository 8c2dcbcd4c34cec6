"""The FastAPI app factory: services, auth, error format, and the routers of each surface."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from clawlet import __version__
from clawlet.api import auth, gateway_ws, health, native, process
from clawlet.api.auth import TokenGuard
from clawlet.api.errors import install_error_handlers
from clawlet.api.inbox import install_inbox
from clawlet.api.openai import chat as openai_chat
from clawlet.api.openai import responses as openai_responses
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

    # A request is matched against the routes in this order (about 1.5 µs each, several times per
    # request): the turn endpoints first (no two of these paths overlap, so the order is free).
    app.include_router(chat.router, prefix="/api")
    app.include_router(openai_chat.router, prefix="/v1")
    app.include_router(native.router, prefix="/api")
    for module in (sessions, compress, skills, files, tokens, config_api):
        app.include_router(module.router, prefix="/api")
    install_inbox(app)  # /api/v1: the task inbox
    app.include_router(openai_responses.router, prefix="/v1")
    app.include_router(process.router)  # Open WebUI's external document loader
    app.include_router(gateway_ws.router)  # the OpenClaw gateway protocol; checks its own token
    app.include_router(health.router)  # public, like the seed's; /health/live never needs a token
    app.include_router(auth.router)  # public: GET /auth, whether the UIs must ask for a token
    install_static(app)
    # Added last, so it wraps everything above: every request (auth failures included) gets an id.
    app.add_middleware(RequestLogging)
    return app

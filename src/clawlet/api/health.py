"""``GET /health``, ``/health/live`` and ``/health/ready``.

``/health`` follows the UniAiAgent seed's shape — ``status``, ``timestamp``, ``uptime``,
``version`` and ``checks`` whose entries each carry ``status``, ``message``, ``details`` and
``timestamp`` — with clawlet's own checks:

* ``llm``: the provider and model; the demo model is healthy (with a note that it is offline);
  a real provider is probed with ``GET {base_url}/models`` (2 s timeout, cached briefly), and an
  unreachable or key-rejecting provider makes the service ``degraded``, never ``unhealthy``;
* ``workspace``: the home exists and is writable (a temp file is written and deleted); if not,
  the service is ``unhealthy``;
* ``mcp``: ``mcp.json`` in the home: ``not_configured`` when absent, the server count when it
  parses, ``degraded`` when it does not;
* ``inbox``: the task inbox's database answers; with the ``gateway`` backend, whether the OpenClaw
  gateway is connected (not yet connected is fine; a failed connection makes it ``degraded``);
* ``openclaw_runtime``: whether the ``openclaw`` runtime of cluster mode can run here — the
  bridge's own probe (:func:`~clawlet.runtime.openclaw_bridge.probe_openclaw`: Node.js in OpenClaw's
  range ``>=24.16.0 <25 || >=26.1.0``, the ``openclaw`` CLI, the bridge; ``CLAWLET_OPENCLAW_NODE``,
  ``CLAWLET_OPENCLAW_BIN``). It is optional: ``unavailable`` is reported but does not change the
  overall status;
* ``sandbox``: whether terminal, python_repl and MCP servers run in bubblewrap (also the top-level
  ``sandbox``: ``bubblewrap`` or ``none (<reason>)``): ``unavailable`` without it, ``not_configured``
  with ``CLAWLET_SANDBOX=off``, ``degraded`` when it is required and missing (those tools refuse).

The checks but ``inbox`` live in :mod:`clawlet.runtime.health_checks` (the gateway's ``status``
method shows them too). HTTP 200 for ``healthy`` and ``degraded``, 503 for ``unhealthy``.
``/health`` is public like the seed's; with a token configured, callers without it get the
statuses and messages but not the details that name paths or URLs. ``/health/live`` always
answers 200 without running any check; ``/health/ready`` answers 200 once the app has started and
the home is writable, else 503.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from clawlet import __version__
from clawlet.api.auth import token_matches
from clawlet.config import Settings
from clawlet.inbox.backends import GatewayBackend
from clawlet.inbox.service import InboxService
from clawlet.runtime.health_checks import (
    check_llm,
    check_mcp,
    check_sandbox,
    check_workspace,
    home_writable,
    make_check,
    now_timestamp,
    overall_status,
    probe_openclaw_runtime,
)
from clawlet.tools.sandbox import sandbox_status

router = APIRouter()

#: Details that may name local paths or internal hosts: hidden from unauthenticated callers.
SENSITIVE_DETAILS = ("path", "base_url", "config_path", "node_path", "openclaw_path", "gateway_url")
PROCESS_STARTED = time.time()

# -- inbox ---------------------------------------------------------------------------------------


def check_inbox(inbox: InboxService) -> dict[str, Any]:
    """The inbox database answers, and (gateway backend) whether the gateway is connected."""
    try:
        counts = inbox.repository.count_by_agent()
    except SQLAlchemyError as exc:
        return make_check("unhealthy", f"the inbox database cannot be read: {type(exc).__name__}")
    common = {"backend": inbox.executor.backend.name, "tasks": sum(counts.values())}
    backend = inbox.executor.backend
    if not isinstance(backend, GatewayBackend):
        return make_check("healthy", "inbox tasks run on clawlet's own engine", **common)
    client = backend.client
    common["gateway_url"] = client.url
    if client.connected:
        return make_check(
            "healthy", f"connected to the OpenClaw gateway (protocol {client.protocol})", **common
        )
    if client.last_error is None:
        return make_check("healthy", "the OpenClaw gateway connects when the first task runs", **common)
    return make_check("degraded", f"the OpenClaw gateway is not connected: {client.last_error}", **common)


# -- endpoints -----------------------------------------------------------------------------------


def _authenticated(request: Request, settings: Settings) -> bool:
    tokens = settings.accepted_tokens
    return not tokens or token_matches(tokens, request.headers.get("authorization"))


def _redact(checks: dict[str, dict[str, Any]]) -> None:
    for check in checks.values():
        details = check["details"]
        for key in SENSITIVE_DETAILS:
            details.pop(key, None)


def _uptime(request: Request) -> float:
    started = getattr(request.app.state, "started_at", None) or PROCESS_STARTED
    return round(time.time() - float(started), 3)


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.services.settings
    root = settings.paths.root
    llm, workspace, mcp, runtime, inbox, sandbox = await asyncio.gather(
        check_llm(settings),
        asyncio.to_thread(check_workspace, root),
        asyncio.to_thread(check_mcp, root),
        asyncio.to_thread(probe_openclaw_runtime),
        asyncio.to_thread(check_inbox, request.app.state.inbox),
        asyncio.to_thread(sandbox_status, settings.sandbox),
    )
    checks = {
        "llm": llm,
        "workspace": workspace,
        "mcp": mcp,
        "openclaw_runtime": runtime,
        "inbox": inbox,
        "sandbox": check_sandbox(sandbox),
    }
    checks = {name: {**check, "details": dict(check["details"])} for name, check in checks.items()}
    if not _authenticated(request, settings):
        _redact(checks)
    status = overall_status(checks)
    uptime = _uptime(request)
    body = {
        "status": status,
        "version": __version__,
        "timestamp": now_timestamp(),
        "uptime": uptime,
        "uptime_seconds": uptime,
        # seed 001: whether sessions with runtime_type "openclaw" can run on this machine
        "openclaw_available": checks["openclaw_runtime"]["status"] == "healthy",
        # issue 14: whether the tools' subprocesses run sandboxed: "bubblewrap" or "none (<reason>)"
        "sandbox": sandbox.describe(),
        "checks": checks,
    }
    return JSONResponse(body, status_code=503 if status == "unhealthy" else 200)


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.services.settings
    started = getattr(request.app.state, "started_at", None) is not None
    writable, reason = await asyncio.to_thread(home_writable, settings.paths.root)
    if started and writable:
        return JSONResponse({"status": "ready"})
    return JSONResponse(
        {"status": "not_ready", "reason": reason if started else "the app has not finished starting"},
        status_code=503,
    )

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

HTTP 200 for ``healthy`` and ``degraded``, 503 for ``unhealthy``. ``/health`` is public like the
seed's; with a token configured, callers without it get the statuses and messages but not the
details that name paths or URLs. ``/health/live`` always answers 200 without running any check;
``/health/ready`` answers 200 once the app has started and the home is writable, else 503.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from clawlet import __version__
from clawlet.api.auth import token_matches
from clawlet.config import Settings
from clawlet.inbox.backends import GatewayBackend
from clawlet.inbox.service import InboxService
from clawlet.llm.providers import ProviderConfigError, describe_model
from clawlet.runtime.openclaw_bridge import NODE_RANGE, OpenClawProbe, probe_openclaw
from clawlet.tools.mcp import MCP_CONFIG_FILE, McpConfigError, read_mcp_config
from clawlet.tools.sandbox import SandboxStatus, sandbox_status

router = APIRouter()

CheckStatus = Literal["healthy", "degraded", "unhealthy", "not_configured", "unavailable"]

LLM_PROBE_TIMEOUT = 2.0
LLM_PROBE_TTL = 10.0  # seconds a probe result is reused (health checks are polled)
RUNTIME_PROBE_TTL = 300.0
ANTHROPIC_BASE_URL = "https://api.anthropic.com/v1"
#: Details that may name local paths or internal hosts: hidden from unauthenticated callers.
SENSITIVE_DETAILS = ("path", "base_url", "config_path", "node_path", "openclaw_path", "gateway_url")

PROCESS_STARTED = time.time()

_cache_lock = threading.Lock()
_llm_cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
_runtime_cache: list[tuple[float, dict[str, Any]]] = []


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _check(status: CheckStatus, message: str, **details: Any) -> dict[str, Any]:
    return {"status": status, "message": message, "details": details, "timestamp": _now()}


# -- llm -----------------------------------------------------------------------------------------


def _probe_target(settings: Settings, provider: str) -> tuple[str, dict[str, str]]:
    """The models URL and auth headers for a real provider."""
    if provider == "anthropic":
        base = settings.llm_base_url or ANTHROPIC_BASE_URL
        key = settings.llm_api_key or settings.anthropic_api_key or ""
        return base, {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if provider == "deepseek":
        base = settings.llm_base_url or settings.deepseek_base_url
        key = settings.llm_api_key or settings.deepseek_api_key or ""
    else:
        base = settings.llm_base_url or settings.openai_base_url or ""
        key = settings.llm_api_key or settings.openai_api_key or ""
    return base, ({"Authorization": f"Bearer {key}"} if key else {})


async def check_llm(settings: Settings) -> dict[str, Any]:
    try:
        info = describe_model(settings)
    except ProviderConfigError as exc:
        return _check("unhealthy", f"the LLM provider is misconfigured: {exc}", provider=settings.provider)
    if info.is_demo:
        return _check(
            "healthy",
            "offline demo model (no LLM): deterministic answers, no network needed",
            provider="demo",
            model=info.name,
        )
    base, headers = _probe_target(settings, info.provider)
    if not base:
        return _check("unhealthy", "no base URL configured", provider=info.provider, model=info.name)
    url = base.rstrip("/") + "/models"
    key = (info.provider, url)
    with _cache_lock:
        cached = _llm_cache.get(key)
    if cached and time.monotonic() - cached[0] < LLM_PROBE_TTL:
        return cached[1]
    import httpx  # (with its command line's rich and pygments): not at server start, see clawlet.cli

    started = time.perf_counter()
    common = {"provider": info.provider, "model": info.name, "base_url": base}
    try:
        async with httpx.AsyncClient(timeout=LLM_PROBE_TIMEOUT) as client:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        result = _check(
            "degraded",
            f"the LLM endpoint is unreachable ({type(exc).__name__})",
            reachable=False,
            **common,
        )
    else:
        latency = round((time.perf_counter() - started) * 1000, 1)
        code = response.status_code
        if code in (401, 403):
            status: CheckStatus = "degraded"
            message = f"the LLM endpoint rejected the API key (HTTP {code})"
        elif code >= 500:
            status, message = "degraded", f"the LLM endpoint answered HTTP {code}"
        else:
            status, message = "healthy", f"the LLM endpoint is reachable (GET /models: HTTP {code})"
        result = _check(status, message, reachable=code < 500, http_status=code, latency_ms=latency, **common)
    with _cache_lock:
        _llm_cache[key] = (time.monotonic(), result)
    return result


# -- workspace -----------------------------------------------------------------------------------


def home_writable(root: Path) -> tuple[bool, str]:
    """Whether a file can be created and deleted in ``root`` (and why not)."""
    if not root.is_dir():
        return (
            False,
            "the home directory does not exist" if not root.exists() else "the home is not a directory",
        )
    try:
        fd, name = tempfile.mkstemp(prefix=".health-", suffix=".tmp", dir=root)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return False, f"the home is not writable ({exc.strerror or exc})"
    return True, ""


def check_workspace(root: Path) -> dict[str, Any]:
    writable, reason = home_writable(root)
    readable = root.is_dir() and os.access(root, os.R_OK | os.X_OK)
    if writable and readable:
        return _check(
            "healthy",
            "the home directory is accessible and writable",
            path=str(root),
            readable=True,
            writable=True,
        )
    return _check(
        "unhealthy",
        reason or "the home is not readable",
        path=str(root),
        readable=readable,
        writable=writable,
    )


# -- mcp -----------------------------------------------------------------------------------------


def check_mcp(root: Path) -> dict[str, Any]:
    path = root / MCP_CONFIG_FILE
    if not path.exists():
        return _check(
            "not_configured",
            f"MCP is off (no {MCP_CONFIG_FILE} in the home)",
            enabled=False,
            config_path=None,
        )
    try:
        servers = read_mcp_config(root)
    except McpConfigError as exc:
        return _check("degraded", str(exc), enabled=False, config_path=str(path))
    except OSError as exc:
        return _check(
            "degraded", f"{MCP_CONFIG_FILE} cannot be read: {exc}", enabled=False, config_path=str(path)
        )
    return _check(
        "healthy",
        f"{len(servers)} MCP server(s) configured",
        enabled=bool(servers),
        config_path=str(path),
        servers=len(servers),
        server_names=sorted(servers),
    )


# -- openclaw runtime ----------------------------------------------------------------------------


def openclaw_runtime_check(probe: OpenClawProbe) -> dict[str, Any]:
    """The ``openclaw_runtime`` check of what :func:`~clawlet.runtime.openclaw_bridge.probe_openclaw`
    found: the same probe (and the same Node.js range) the bridge runs before a session starts."""
    details = {
        "optional": True,
        "node_path": str(probe.node) if probe.node else None,
        "node_version": probe.node_version,
        "node_required": NODE_RANGE,
        "openclaw_path": str(probe.openclaw_entry) if probe.openclaw_entry else None,
        "openclaw_version": probe.openclaw_version,
    }
    if probe.available:
        return _check("healthy", f"the OpenClaw runtime is available: {probe.summary}", **details)
    return _check(
        "unavailable",
        f"optional OpenClaw runtime unavailable (the built-in engine is used): {probe.summary}",
        **details,
    )


def probe_openclaw_runtime() -> dict[str, Any]:
    """The ``openclaw_runtime`` check (cached: Node.js and OpenClaw rarely change while serving)."""
    with _cache_lock:
        if _runtime_cache and time.monotonic() - _runtime_cache[0][0] < RUNTIME_PROBE_TTL:
            return _runtime_cache[0][1]
    result = openclaw_runtime_check(probe_openclaw())
    with _cache_lock:
        _runtime_cache[:] = [(time.monotonic(), result)]
    return result


# -- sandbox -------------------------------------------------------------------------------------


def check_sandbox(status: SandboxStatus) -> dict[str, Any]:
    details = {"sandbox": status.describe(), "mode": status.mode}
    if status.active:
        return _check(
            "healthy", "terminal, python_repl and MCP servers run in a bubblewrap sandbox", **details
        )
    if status.mode == "off":
        return _check("not_configured", "the tool sandbox is off (CLAWLET_SANDBOX=off)", **details)
    if status.refused:
        return _check("degraded", f"the required tool sandbox is unavailable: {status.reason}", **details)
    return _check("unavailable", f"tools run unsandboxed: {status.reason}", **details)


# -- inbox ---------------------------------------------------------------------------------------


def check_inbox(inbox: InboxService) -> dict[str, Any]:
    """The inbox database answers, and (gateway backend) whether the gateway is connected."""
    try:
        counts = inbox.repository.count_by_agent()
    except SQLAlchemyError as exc:
        return _check("unhealthy", f"the inbox database cannot be read: {type(exc).__name__}")
    common = {"backend": inbox.executor.backend.name, "tasks": sum(counts.values())}
    backend = inbox.executor.backend
    if not isinstance(backend, GatewayBackend):
        return _check("healthy", "inbox tasks run on clawlet's own engine", **common)
    client = backend.client
    common["gateway_url"] = client.url
    if client.connected:
        return _check("healthy", f"connected to the OpenClaw gateway (protocol {client.protocol})", **common)
    if client.last_error is None:
        return _check("healthy", "the OpenClaw gateway connects when the first task runs", **common)
    return _check("degraded", f"the OpenClaw gateway is not connected: {client.last_error}", **common)


# -- endpoints -----------------------------------------------------------------------------------


def overall_status(checks: dict[str, dict[str, Any]]) -> Literal["healthy", "degraded", "unhealthy"]:
    """``unhealthy`` if any check is; ``degraded`` if any is; optional, unconfigured and
    unavailable parts do not count."""
    statuses = {check["status"] for check in checks.values()}
    if "unhealthy" in statuses:
        return "unhealthy"
    if "degraded" in statuses:
        return "degraded"
    return "healthy"


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
        "timestamp": _now(),
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

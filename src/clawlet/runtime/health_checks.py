"""The checks ``GET /health`` reports and the gateway's ``status`` method shows: the model
provider (``llm``), the home (``workspace``), ``mcp.json`` (``mcp``), the optional OpenClaw runtime
(``openclaw_runtime``) and the tool sandbox (``sandbox``), each ``{status, message, details,
timestamp}``, and :func:`overall_status` over them. What each means is in :mod:`clawlet.api.health`.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from clawlet.config import Settings
from clawlet.llm.providers import ProviderConfigError, describe_model
from clawlet.runtime.openclaw_bridge import NODE_RANGE, OpenClawProbe, probe_openclaw
from clawlet.tools.mcp import MCP_CONFIG_FILE, McpConfigError, read_mcp_config
from clawlet.tools.sandbox import SandboxStatus

CheckStatus = Literal["healthy", "degraded", "unhealthy", "not_configured", "unavailable"]

LLM_PROBE_TIMEOUT = 2.0
LLM_PROBE_TTL = 10.0  # seconds a probe result is reused (health checks are polled)
RUNTIME_PROBE_TTL = 300.0
ANTHROPIC_BASE_URL = "https://api.anthropic.com/v1"


_cache_lock = threading.Lock()
_llm_cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
_runtime_cache: list[tuple[float, dict[str, Any]]] = []


def now_timestamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def make_check(status: CheckStatus, message: str, **details: Any) -> dict[str, Any]:
    return {"status": status, "message": message, "details": details, "timestamp": now_timestamp()}


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
        return make_check(
            "unhealthy", f"the LLM provider is misconfigured: {exc}", provider=settings.provider
        )
    if info.is_demo:
        return make_check(
            "healthy",
            "offline demo model (no LLM): deterministic answers, no network needed",
            provider="demo",
            model=info.name,
        )
    base, headers = _probe_target(settings, info.provider)
    if not base:
        return make_check("unhealthy", "no base URL configured", provider=info.provider, model=info.name)
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
        result = make_check(
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
        result = make_check(
            status, message, reachable=code < 500, http_status=code, latency_ms=latency, **common
        )
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
        return make_check(
            "healthy",
            "the home directory is accessible and writable",
            path=str(root),
            readable=True,
            writable=True,
        )
    return make_check(
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
        return make_check(
            "not_configured",
            f"MCP is off (no {MCP_CONFIG_FILE} in the home)",
            enabled=False,
            config_path=None,
        )
    try:
        servers = read_mcp_config(root)
    except McpConfigError as exc:
        return make_check("degraded", str(exc), enabled=False, config_path=str(path))
    except OSError as exc:
        return make_check(
            "degraded", f"{MCP_CONFIG_FILE} cannot be read: {exc}", enabled=False, config_path=str(path)
        )
    return make_check(
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
        return make_check("healthy", f"the OpenClaw runtime is available: {probe.summary}", **details)
    return make_check(
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
        return make_check(
            "healthy", "terminal, python_repl and MCP servers run in a bubblewrap sandbox", **details
        )
    if status.mode == "off":
        return make_check("not_configured", "the tool sandbox is off (CLAWLET_SANDBOX=off)", **details)
    if status.refused:
        return make_check("degraded", f"the required tool sandbox is unavailable: {status.reason}", **details)
    return make_check("unavailable", f"tools run unsandboxed: {status.reason}", **details)


def overall_status(checks: dict[str, dict[str, Any]]) -> Literal["healthy", "degraded", "unhealthy"]:
    """``unhealthy`` if any check is; ``degraded`` if any is; optional, unconfigured and
    unavailable parts do not count."""
    statuses = {check["status"] for check in checks.values()}
    if "unhealthy" in statuses:
        return "unhealthy"
    if "degraded" in statuses:
        return "degraded"
    return "healthy"

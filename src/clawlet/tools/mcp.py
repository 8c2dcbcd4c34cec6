"""MCP tools: STDIO Model Context Protocol servers listed in ``<home>/mcp.json`` become agent tools.

The file uses the common ``mcpServers`` form::

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "some-mcp-server"], "env": {}}}}

Tools are named ``<server>_<tool>`` and obey the same allowed/disallowed lists as the core tools.
Servers run with the clawlet home as working directory and a scrubbed environment (plus the
``env`` given for them), in the tools' sandbox (:mod:`clawlet.tools.sandbox`), where the files
and directories that ``command`` and ``args`` name (absolute, or relative to the home) are mounted
read-only besides the usual ones. A server that fails to start is reported and skipped, never fatal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawlet.paths import UnsafePath, read_text_inside
from clawlet.tools.base import scrubbed_environment
from clawlet.tools.sandbox import WRITABLE_HOME_DIRS, SandboxUnavailable, ToolSandbox

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

log = logging.getLogger(__name__)

MCP_CONFIG_FILE = "mcp.json"
LOAD_TIMEOUT_SECONDS = 20.0


class McpConfigError(ValueError):
    """``mcp.json`` exists but cannot be used."""


@dataclass
class McpTools:
    tools: list[BaseTool] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    servers: list[str] = field(default_factory=list)


def read_mcp_config(home: Path) -> dict[str, dict[str, Any]]:
    """The configured servers (empty when there is no ``mcp.json``)."""
    path = home / MCP_CONFIG_FILE
    try:
        raw = json.loads(read_text_inside(home, path))
    except FileNotFoundError:
        return {}
    except UnsafePath as exc:
        raise McpConfigError(f"{MCP_CONFIG_FILE} is refused: {exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{MCP_CONFIG_FILE} is not valid JSON: {exc}") from exc
    servers = raw.get("mcpServers") if isinstance(raw, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f"{MCP_CONFIG_FILE} needs an object 'mcpServers'")
    for name, spec in servers.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            raise McpConfigError(f"MCP server {name!r} needs a 'command' string")
        if not isinstance(spec.get("args", []), list):
            raise McpConfigError(f"MCP server {name!r}: 'args' must be a list")
    return servers


def config_fingerprint(home: Path) -> str:
    try:
        stat = (home / MCP_CONFIG_FILE).stat()
    except FileNotFoundError:
        return ""
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def paths_named_by(words: list[str], home: Path) -> list[Path]:
    """The existing files and directories a server's command line names, to mount read-only into its
    sandbox: absolute paths, and paths relative to the home (outside its writable directories,
    which are mounted anyway). ``/`` is never one of them."""
    named: list[Path] = []
    for word in words:
        path = Path(word) if os.path.isabs(word) else home / word
        try:
            exists = word not in ("", ".") and path.exists() and path.resolve() != Path("/")
        except (OSError, ValueError):
            continue
        relative = path.absolute().relative_to(home) if path.absolute().is_relative_to(home) else None
        if exists and (relative is None or relative.parts[0] not in WRITABLE_HOME_DIRS):
            named.append(path)
    return named


async def load_mcp_tools(home: Path, sandbox: ToolSandbox | None = None) -> McpTools:
    """Start each configured server once to list its tools (calls start it again, per call), in
    ``sandbox`` (default: the home's, ``CLAWLET_SANDBOX=auto``)."""
    result = McpTools()
    try:
        servers = read_mcp_config(home)
    except McpConfigError as exc:
        result.errors[MCP_CONFIG_FILE] = str(exc)
        log.warning("%s", exc)
        return result
    if not servers:
        return result
    from langchain_mcp_adapters.client import MultiServerMCPClient

    sandbox = sandbox or ToolSandbox(home)
    base_env = scrubbed_environment(home)
    connections: dict[str, Any] = {}
    for name, spec in servers.items():
        words = [spec["command"], *(str(arg) for arg in spec.get("args", []))]
        try:
            command, *args = sandbox.wrap(words, read_only=paths_named_by(words, home))
        except SandboxUnavailable as exc:
            log.warning("MCP server %r not started: %s", name, exc)
            result.errors[name] = str(exc)
            continue
        connections[name] = {
            "transport": "stdio",
            "command": command,
            "args": args,
            "env": {**base_env, **{str(k): str(v) for k, v in (spec.get("env") or {}).items()}},
            "cwd": str(home),
        }
    client = MultiServerMCPClient(connections, tool_name_prefix=True)
    for name in connections:
        try:
            tools = await asyncio.wait_for(client.get_tools(server_name=name), LOAD_TIMEOUT_SECONDS)
        except Exception as exc:  # one broken server must not take the agent down
            message = f"{type(exc).__name__}: {exc}"
            log.warning("MCP server %r unavailable: %s", name, message)
            result.errors[name] = message
            continue
        result.servers.append(name)
        result.tools.extend(tools)
    return result

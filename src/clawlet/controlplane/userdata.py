"""What the control plane keeps per user on disk: long-term memory and the remote MCP servers.

Every user has a directory ``<data_dir>/users/<user_id>/`` (the id is checked to be a plain name,
so no user's directory can be, contain or escape into another's)::

    users/<user_id>/memory/MEMORY.md          long-term memory, one entry per paragraph
    users/<user_id>/memory_index/index.sqlite3 its hybrid index (clawlet.memory.index)
    users/<user_id>/mcp.json                   {"mcpServers": {...}} (clawlet.tools.mcp's format)

**Memory** (``memory_search``): each paragraph of the user's ``MEMORY.md`` is one source of a
:class:`~clawlet.memory.index.HybridIndex` keyed by its content hash, so adding an entry indexes
just that entry, and a hit is one memory rather than a chunk of several. Keyword search (FTS5 BM25,
CJK characters and bigrams) works offline and for Chinese; vectors are added when an embeddings
client is given. A search only ever opens that user's index.

**MCP** (``mcp_call``): the servers in the user's ``mcp.json`` are STDIO servers started per call
(like :mod:`clawlet.tools.mcp`) with the user's directory as working directory and ``HOME`` and a
scrubbed environment; the tool's ``CallToolResult`` is returned as JSON (``content``,
``structuredContent``, ``isError``: a tool's own failure is a result, as MCP defines it).
Configuration and transport failures raise :class:`McpCallError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from clawlet.memory.embeddings import EmbeddingClient
from clawlet.memory.index import HybridIndex, SearchResult, SourceLoader
from clawlet.storage import atomic_write_json, atomic_write_text, file_lock
from clawlet.tools.base import scrubbed_environment
from clawlet.tools.mcp import MCP_CONFIG_FILE, McpConfigError, read_mcp_config

log = logging.getLogger(__name__)

USER_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
"""A user id is a plain directory name: letters, digits, ``._@-``, not starting with a dot."""
MEMORY_FILE: Final = "MEMORY.md"
MAX_TOP_K: Final = 50
_PARAGRAPH_BREAK: Final = re.compile(r"\n[ \t]*\n+")

ERR_NOT_FOUND: Final = "not_found"
ERR_INVALID_PARAMS: Final = "invalid_params"
ERR_UNAVAILABLE: Final = "unavailable"


class InvalidUserId(ValueError):
    """A user id that cannot name a directory safely."""


def check_user_id(user_id: str) -> str:
    if not isinstance(user_id, str) or not USER_ID_PATTERN.fullmatch(user_id) or ".." in user_id:
        raise InvalidUserId(
            f"invalid user id {user_id!r}: use 1-128 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit, without '..'"
        )
    return user_id


def user_dir(root: Path, user_id: str) -> Path:
    """``<root>/<user_id>`` for a valid user id."""
    return root / check_user_id(user_id)


# -- long-term memory ----------------------------------------------------------------------------


class UserMemory:
    """One user's long-term memory: ``memory/MEMORY.md`` and its index."""

    def __init__(self, directory: Path, embedder: EmbeddingClient | None = None) -> None:
        self.memory_file = directory / "memory" / MEMORY_FILE
        self.index = HybridIndex(directory / "memory_index" / "index.sqlite3", embedder)

    def entries(self) -> list[str]:
        try:
            text = self.memory_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [part.strip() for part in _PARAGRAPH_BREAK.split(text) if part.strip()]

    def add(self, text: str) -> None:
        """Append one entry (blank lines inside it are folded so it stays one entry)."""
        entry = _PARAGRAPH_BREAK.sub("\n", text.strip())
        if not entry:
            raise ValueError("a memory entry needs some text")
        with file_lock(self.memory_file):
            try:
                current = self.memory_file.read_text(encoding="utf-8").rstrip()
            except FileNotFoundError:
                current = ""
            atomic_write_text(self.memory_file, (current + "\n\n" if current else "") + entry + "\n")

    def refresh(self) -> int:
        sources: dict[str, tuple[str, SourceLoader]] = {}
        for entry in self.entries():
            digest = hashlib.sha256(entry.encode("utf-8")).hexdigest()
            sources[f"{MEMORY_FILE}#{digest[:16]}"] = (digest, _constant(entry))
        return self.index.sync(sources)

    def search(self, query: str, top_k: int = 5) -> list[SearchResult]:
        self.refresh()
        return self.index.search(query, top_k)


def _constant(text: str) -> SourceLoader:
    return lambda: text


class LongTermMemory:
    """Every user's :class:`UserMemory`, opened on first use (thread-safe)."""

    def __init__(self, root: Path, embedder: EmbeddingClient | None = None) -> None:
        self.root = root
        self.embedder = embedder
        self._memories: dict[str, UserMemory] = {}
        self._lock = threading.Lock()

    def for_user(self, user_id: str) -> UserMemory:
        with self._lock:
            memory = self._memories.get(user_id)
            if memory is None:
                memory = UserMemory(user_dir(self.root, user_id), self.embedder)
                self._memories[user_id] = memory
            return memory

    def add(self, user_id: str, text: str) -> None:
        self.for_user(user_id).add(text)

    def search(self, user_id: str, query: str, top_k: int = 5) -> list[SearchResult]:
        return self.for_user(user_id).search(query, max(1, min(top_k, MAX_TOP_K)))


# -- remote MCP ----------------------------------------------------------------------------------


class McpCallError(Exception):
    """An ``mcp_call`` that cannot be carried out (``code`` is the error response's code)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class UserMcpServers:
    """The remote MCP servers of every user (``<root>/<user_id>/mcp.json``)."""

    def __init__(self, root: Path, timeout: float = 50.0) -> None:
        self.root = root
        self.timeout = timeout

    def servers(self, user_id: str) -> dict[str, dict[str, Any]]:
        return read_mcp_config(user_dir(self.root, user_id))

    def configure(self, user_id: str, servers: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the user's server list (``{name: {command, args?, env?}}``)."""
        directory = user_dir(self.root, user_id)
        config = {"mcpServers": {str(name): dict(spec) for name, spec in servers.items()}}
        for name, spec in config["mcpServers"].items():
            if not isinstance(spec.get("command"), str) or not isinstance(spec.get("args", []), list):
                raise McpConfigError(f"MCP server {name!r} needs a 'command' string and a list 'args'")
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(directory / MCP_CONFIG_FILE, config)

    async def call(
        self, user_id: str, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run ``tool`` of the user's ``server`` once and return its result as JSON."""
        directory = user_dir(self.root, user_id)
        try:
            servers = await asyncio.to_thread(read_mcp_config, directory)
        except McpConfigError as exc:
            raise McpCallError(ERR_UNAVAILABLE, f"the MCP configuration is unusable: {exc}") from None
        if not servers:
            raise McpCallError(ERR_NOT_FOUND, "no MCP servers configured")
        spec = servers.get(server)
        if spec is None:
            raise McpCallError(
                ERR_NOT_FOUND, f"no MCP server {server!r} (configured: {', '.join(sorted(servers))})"
            )
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        env = scrubbed_environment(directory)
        env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        parameters = StdioServerParameters(
            command=spec["command"],
            args=[str(arg) for arg in spec.get("args", [])],
            env=env,
            cwd=str(directory),
        )
        try:
            async with asyncio.timeout(self.timeout):
                async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool(
                        tool, dict(arguments), read_timeout_seconds=timedelta(seconds=self.timeout)
                    )
        except TimeoutError:
            raise McpCallError(
                ERR_UNAVAILABLE, f"MCP server {server!r} did not answer {tool!r} within {self.timeout:g}s"
            ) from None
        except Exception as exc:  # a server that fails to start or breaks the protocol
            log.warning("MCP call %s/%s for user %s failed: %s", server, tool, user_id, exc)
            raise McpCallError(
                ERR_UNAVAILABLE, f"MCP server {server!r} failed: {type(exc).__name__}: {exc}"
            ) from None
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped

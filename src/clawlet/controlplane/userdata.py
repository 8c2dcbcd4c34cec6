"""What the control plane keeps per user besides its tables: long-term memory and remote MCP servers.

Both live in the control plane's database (:mod:`clawlet.controlplane.db`: ``user_memories``,
``user_mcp_servers``), so every control-plane instance serves every user: an entry added through
one instance is found by a ``memory_search`` another answers. What an instance keeps on its own
disk is derived and disposable, under ``<data_dir>/cache/<user_id>/`` (the id is checked to be a
plain name, so no user's directory can be, contain or escape into another's)::

    cache/<user_id>/memory_index/index.sqlite3   the hybrid index of the user's memory (a cache)
    cache/<user_id>/mcp/                         working directory and HOME of the user's MCP servers

**Memory** (``memory_search``): each entry of the user's memory is one source of a
:class:`~clawlet.memory.index.HybridIndex` keyed by its content hash. The index is this instance's
cache of the database rows: before each search it is synced with them by hash (only entries it
lacks are read and indexed, entries gone from the database are dropped), so a hit is one memory
rather than a chunk of several. Keyword search (FTS5 BM25, CJK characters and bigrams) works
offline and for Chinese; vectors are added when an embeddings client is given. A search only ever
opens that user's index.

**MCP** (``mcp_call``): the user's servers are STDIO servers started per call (like
:mod:`clawlet.tools.mcp`) with the user's scratch directory as working directory and ``HOME`` and a
scrubbed environment; the tool's ``CallToolResult`` is returned as JSON (``content``,
``structuredContent``, ``isError``: a tool's own failure is a result, as MCP defines it).
Configuration and transport failures raise :class:`McpCallError`.

**Older data directories** kept both as files (``users/<id>/memory/MEMORY.md``, one entry per
paragraph, and ``users/<id>/mcp.json``): :func:`import_legacy_files` moves them into the database
once, at start, and renames each file it imported to ``<name>.imported``.
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

from sqlalchemy.exc import SQLAlchemyError

from clawlet.controlplane.db import ControlPlaneStore
from clawlet.memory.embeddings import EmbeddingClient
from clawlet.memory.index import HybridIndex, SearchResult, SourceLoader
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
    """One user's long-term memory: rows of ``user_memories``, searched through this instance's index."""

    def __init__(
        self, store: ControlPlaneStore, user_id: str, directory: Path, embedder: EmbeddingClient | None = None
    ) -> None:
        self.store = store
        self.user_id = user_id
        self.index = HybridIndex(directory / "memory_index" / "index.sqlite3", embedder)

    def refresh(self) -> int:
        """Sync the index with the database: returns how many entries were (re)indexed."""
        digests = {_source(digest): digest for digest in self.store.memory_digests(self.user_id)}
        known = self.index.fingerprints()
        texts = self.store.memory_texts(
            self.user_id, [digest for name, digest in digests.items() if known.get(name) != digest]
        )
        sources: dict[str, tuple[str, SourceLoader]] = {
            name: (digest, _constant(texts.get(digest, "")))
            for name, digest in digests.items()
            if known.get(name) == digest or digest in texts  # not one deleted meanwhile
        }
        return self.index.sync(sources)

    def search(self, query: str, top_k: int = 5) -> list[SearchResult]:
        self.refresh()
        return self.index.search(query, top_k)


def entry_text(text: str) -> str:
    """A memory entry as stored: stripped, blank lines folded (``ValueError`` when empty)."""
    entry = _PARAGRAPH_BREAK.sub("\n", text.strip())
    if not entry:
        raise ValueError("a memory entry needs some text")
    return entry


def entry_digest(entry: str) -> str:
    return hashlib.sha256(entry.encode("utf-8")).hexdigest()


def _source(digest: str) -> str:
    """A hit's ``source``: the entry's short hash (named as the memory file's paragraphs were)."""
    return f"{MEMORY_FILE}#{digest[:16]}"


def _constant(text: str) -> SourceLoader:
    return lambda: text


class LongTermMemory:
    """Every user's :class:`UserMemory`, opened on first use (thread-safe)."""

    def __init__(
        self, store: ControlPlaneStore, cache_root: Path, embedder: EmbeddingClient | None = None
    ) -> None:
        self.store = store
        self.cache_root = cache_root
        self.embedder = embedder
        self._memories: dict[str, UserMemory] = {}
        self._lock = threading.Lock()

    def for_user(self, user_id: str) -> UserMemory:
        with self._lock:
            memory = self._memories.get(user_id)
            if memory is None:
                memory = UserMemory(self.store, user_id, user_dir(self.cache_root, user_id), self.embedder)
                self._memories[user_id] = memory
            return memory

    def add(self, user_id: str, text: str) -> None:
        """Store one entry (blank lines inside it are folded so it stays one entry)."""
        check_user_id(user_id)
        entry = entry_text(text)
        self.store.add_memory(user_id, entry_digest(entry), entry)

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
    """The remote MCP servers of every user (rows of ``user_mcp_servers``), run in
    ``<scratch_root>/<user_id>/``."""

    def __init__(self, store: ControlPlaneStore, scratch_root: Path, timeout: float = 50.0) -> None:
        self.store = store
        self.scratch_root = scratch_root
        self.timeout = timeout

    def servers(self, user_id: str) -> dict[str, dict[str, Any]]:
        return self.store.mcp_servers(check_user_id(user_id))

    def configure(self, user_id: str, servers: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the user's server list (``{name: {command, args?, env?}}``; ``McpConfigError``
        when a server's spec is not one)."""
        check_user_id(user_id)
        if not isinstance(servers, Mapping):
            raise McpConfigError("the MCP servers must be an object {name: {command, args?, env?}}")
        config = {str(name): dict(spec) for name, spec in servers.items() if isinstance(spec, Mapping)}
        if len(config) != len(servers):
            raise McpConfigError("every MCP server needs an object {command, args?, env?}")
        for name, spec in config.items():
            if not isinstance(spec.get("command"), str) or not isinstance(spec.get("args", []), list):
                raise McpConfigError(f"MCP server {name!r} needs a 'command' string and a list 'args'")
            if not isinstance(spec.get("env", {}), Mapping):
                raise McpConfigError(f"MCP server {name!r}: 'env' must be an object")
        self.store.set_mcp_servers(user_id, config)

    async def call(
        self, user_id: str, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run ``tool`` of the user's ``server`` once and return its result as JSON."""
        directory = user_dir(self.scratch_root, user_id) / "mcp"
        try:
            servers = await asyncio.to_thread(self.store.mcp_servers, user_id)
        except SQLAlchemyError as exc:
            raise McpCallError(ERR_UNAVAILABLE, f"the MCP configuration cannot be read now: {exc}") from None
        if not servers:
            raise McpCallError(ERR_NOT_FOUND, "no MCP servers configured")
        spec = servers.get(server)
        if spec is None:
            raise McpCallError(
                ERR_NOT_FOUND, f"no MCP server {server!r} (configured: {', '.join(sorted(servers))})"
            )
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
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


# -- data directories of older versions ----------------------------------------------------------

IMPORTED_SUFFIX: Final = ".imported"


def import_legacy_files(store: ControlPlaneStore, data_dir: Path) -> int:
    """Move what older versions kept in ``<data_dir>/users/<id>/`` (``memory/MEMORY.md``, one entry
    per paragraph, and ``mcp.json``) into the database, once: each file imported is renamed to
    ``<name>.imported``. MCP servers replace none the database has for the user; files of users
    the database does not know are left alone (and logged). Returns the files imported."""
    root = data_dir / "users"
    if not root.is_dir():
        return 0
    imported = 0
    for directory in sorted(root.iterdir()):
        memory_file = directory / "memory" / MEMORY_FILE
        mcp_file = directory / MCP_CONFIG_FILE
        if not (memory_file.is_file() or mcp_file.is_file()):
            continue
        user_id = directory.name
        if not USER_ID_PATTERN.fullmatch(user_id) or store.get_user(user_id) is None:
            log.warning("not importing %s: no user %r in the database", directory, user_id)
            continue
        if memory_file.is_file():
            text = memory_file.read_text(encoding="utf-8")
            for paragraph in _PARAGRAPH_BREAK.split(text):
                if paragraph.strip():
                    entry = entry_text(paragraph)
                    store.add_memory(user_id, entry_digest(entry), entry)
            imported += _mark_imported(memory_file)
        if mcp_file.is_file():
            try:
                servers = read_mcp_config(directory)
            except McpConfigError as exc:
                log.warning("not importing %s: %s", mcp_file, exc)
            else:
                if not store.mcp_servers(user_id):
                    store.set_mcp_servers(user_id, servers)
                imported += _mark_imported(mcp_file)
    if imported:
        log.info("imported %d long-term memory and MCP files of %s into the database", imported, root)
    return imported


def _mark_imported(path: Path) -> int:
    try:
        path.replace(path.with_name(path.name + IMPORTED_SUFFIX))
    except FileNotFoundError:  # another instance sharing the directory imported it meanwhile
        return 0
    return 1

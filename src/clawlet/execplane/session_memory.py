"""``SessionMemory``: one session's short-term memory as plain files (the seed's section 3.2).

Layout under the session directory (for the exec plane: ``<sessions dir>/<session id>``)::

    memory/
      conversation.md   the conversation, one ``## [role] <ISO timestamp>`` section per message
      context.json      key -> {"value": <JSON value>, "updated_at": <ISO timestamp>}
      scratchpad.md     the agent's scratchpad, replaced as a whole

Every write goes through ``clawlet.storage`` (temp file + fsync + rename), so a process killed at
any moment leaves each file either as it was or as it should become, never half-written. This
includes appends to ``conversation.md``: an append rewrites the file atomically instead of
appending in place, because an in-place append that is interrupted (a crash, a full disk) leaves a
torn section at the end that every later reader would have to detect and repair. The rewrite costs
O(size of the conversation) per message, which is small for one session's history (a few hundred
kilobytes) next to the model call that produced the message. The rewrite works on raw bytes, so it
never alters what is already in the file, even if that is not valid UTF-8.

Writers of one file are serialised by ``clawlet.storage.file_lock`` (threads of this process; callers
in asyncio use ``asyncio.to_thread``). A session's memory belongs to the one process that runs the
session, so there is no cross-process lock.

A ``context.json`` that cannot be parsed is never overwritten: it is renamed to
``context.json.corrupt-<UTC timestamp>`` (kept for inspection), a warning is logged, the kept
copy is listed in ``SessionMemory.quarantined``, and the context starts empty. Losing the context
of one session is recoverable (it is also part of the periodic snapshot sent to the control plane);
refusing every later read and write would stop the session instead.

``snapshot()`` returns all three as JSON-safe data for the periodic sync to the control plane and
``restore(snapshot)`` writes such a snapshot back (lossless: context entries keep ``updated_at``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from clawlet.storage import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    file_lock,
    remove_stale_temp_files,
)

log = logging.getLogger(__name__)

MEMORY_DIR = "memory"
CONVERSATION_FILE = "conversation.md"
CONTEXT_FILE = "context.json"
SCRATCHPAD_FILE = "scratchpad.md"


class ContextEntry(TypedDict):
    value: Any
    updated_at: str


class MemorySnapshot(TypedDict):
    conversation: str
    context: dict[str, ContextEntry]
    scratchpad: str


class InvalidSnapshot(ValueError):
    """A snapshot given to ``restore`` does not have the shape ``snapshot()`` produces."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _check_json_value(value: Any, what: str) -> None:
    """Require ``value`` to survive a JSON round trip (no NaN/Infinity, no foreign objects)."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from exc


def _parse_context(data: Any) -> dict[str, ContextEntry]:
    """The entries of a ``context.json`` document; ValueError when it has another shape."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    entries: dict[str, ContextEntry] = {}
    for key, entry in data.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"key {key!r} is not a non-empty string")
        if not isinstance(entry, dict) or "value" not in entry:
            raise ValueError(f"entry {key!r} is not an object with a 'value'")
        updated_at = entry.get("updated_at", "")
        if not isinstance(updated_at, str):
            raise ValueError(f"entry {key!r} has a non-string 'updated_at'")
        entries[key] = {"value": entry["value"], "updated_at": updated_at}
    return entries


class SessionMemory:
    """Short-term memory of one session: conversation, key-value context and scratchpad."""

    def __init__(self, session_dir: Path, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self.session_dir = Path(session_dir)
        self.memory_dir = self.session_dir / MEMORY_DIR
        self.conversation_path = self.memory_dir / CONVERSATION_FILE
        self.context_path = self.memory_dir / CONTEXT_FILE
        self.scratchpad_path = self.memory_dir / SCRATCHPAD_FILE
        self.quarantined: list[Path] = []
        """Copies of corrupt ``context.json`` files this instance moved aside."""
        self._clock = clock
        if self.memory_dir.is_dir():
            remove_stale_temp_files(self.memory_dir)

    def _timestamp(self) -> str:
        return self._clock().isoformat()

    # -- conversation.md -------------------------------------------------------------------------

    def append_message(self, role: str, content: str) -> None:
        """Append a ``## [role] <timestamp>`` section (atomically; see the module docstring)."""
        if not role or any(char in role for char in "\r\n]"):
            raise ValueError(f"invalid role {role!r}: must be non-empty, one line, without ']'")
        section = f"\n## [{role}] {self._timestamp()}\n\n{content}\n".encode()
        with file_lock(self.conversation_path):
            try:
                current = self.conversation_path.read_bytes()
            except FileNotFoundError:
                current = b""
            atomic_write_bytes(self.conversation_path, current + section)

    def read_conversation(self) -> str:
        """The whole ``conversation.md`` ("" before the first message)."""
        try:
            data = self.conversation_path.read_bytes()
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", errors="replace")

    # -- context.json ----------------------------------------------------------------------------

    def _quarantine_context(self, reason: str) -> None:
        stamp = self._clock().astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        kept = self.context_path.with_name(f"{CONTEXT_FILE}.corrupt-{stamp}")
        counter = 1
        while kept.exists():
            kept = self.context_path.with_name(f"{CONTEXT_FILE}.corrupt-{stamp}-{counter}")
            counter += 1
        os.rename(self.context_path, kept)
        self.quarantined.append(kept)
        log.warning(
            "session memory: %s is corrupt (%s); kept it as %s and started an empty context",
            self.context_path,
            reason,
            kept.name,
        )

    def _load_context(self) -> dict[str, ContextEntry]:
        """Read the entries; call with the file lock held (a corrupt file is moved aside)."""
        try:
            raw = self.context_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            return _parse_context(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            self._quarantine_context(str(exc))
            return {}

    def context_entries(self) -> dict[str, ContextEntry]:
        """Every context entry with its ``updated_at``."""
        with file_lock(self.context_path):
            return self._load_context()

    def get_context(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        entry = self.context_entries().get(key)
        return default if entry is None else entry["value"]

    def get_all_context(self) -> dict[str, Any]:
        """Every context key with its value."""
        return {key: entry["value"] for key, entry in self.context_entries().items()}

    def set_context(self, key: str, value: Any) -> None:
        """Store a JSON value under ``key`` (replacing any earlier one)."""
        if not isinstance(key, str) or not key:
            raise ValueError("context key must be a non-empty string")
        _check_json_value(value, f"context value for {key!r}")
        with file_lock(self.context_path):
            entries = self._load_context()
            entries[key] = {"value": value, "updated_at": self._timestamp()}
            atomic_write_json(self.context_path, entries)

    def delete_context(self, key: str) -> bool:
        """Remove ``key``; False when it was not there."""
        with file_lock(self.context_path):
            entries = self._load_context()
            if key not in entries:
                return False
            del entries[key]
            atomic_write_json(self.context_path, entries)
            return True

    # -- scratchpad.md ---------------------------------------------------------------------------

    def write_scratchpad(self, text: str) -> None:
        """Replace the scratchpad."""
        with file_lock(self.scratchpad_path):
            atomic_write_text(self.scratchpad_path, text)

    def read_scratchpad(self) -> str:
        """The scratchpad ("" when never written)."""
        try:
            data = self.scratchpad_path.read_bytes()
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", errors="replace")

    # -- snapshot / restore ----------------------------------------------------------------------

    def snapshot(self) -> MemorySnapshot:
        """All three parts as JSON-safe data (for the periodic control-plane sync)."""
        return {
            "conversation": self.read_conversation(),
            "context": self.context_entries(),
            "scratchpad": self.read_scratchpad(),
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace the memory with ``snapshot`` (as ``snapshot()`` returns it; a missing part is empty).

        The whole snapshot is validated before anything is written.
        """
        if not isinstance(snapshot, Mapping):
            raise InvalidSnapshot(f"snapshot must be an object, got {type(snapshot).__name__}")
        conversation = snapshot.get("conversation", "")
        scratchpad = snapshot.get("scratchpad", "")
        for name, text in (("conversation", conversation), ("scratchpad", scratchpad)):
            if not isinstance(text, str):
                raise InvalidSnapshot(f"snapshot {name} must be a string, got {type(text).__name__}")
        try:
            context = _parse_context(snapshot.get("context", {}))
            for key, entry in context.items():
                _check_json_value(entry["value"], f"context value for {key!r}")
        except ValueError as exc:
            raise InvalidSnapshot(f"snapshot context: {exc}") from exc
        with file_lock(self.context_path):
            atomic_write_json(self.context_path, context)
        with file_lock(self.scratchpad_path):
            atomic_write_text(self.scratchpad_path, scratchpad)
        with file_lock(self.conversation_path):
            atomic_write_text(self.conversation_path, conversation)

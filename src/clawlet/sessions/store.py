"""``TranscriptStore``: session transcripts as ``sessions/{id}.json`` in the seed's v2 format.

v2 file: ``{title, created_at, updated_at, compressed_context, messages}``; a message is
``{role, content}`` and an assistant segment may carry ``tool_calls: [{tool, input, output, call_id,
is_error}]``.
A v1 file (a bare array of messages) is migrated to v2 when read. A user message a stopped server
never answered gets a marker after it on the next start (:meth:`TranscriptStore.mark_interrupted`):
``{"role": "assistant", "content": INTERRUPTED_NOTE, "interrupted": true}``; the model sees it as
that short note. Every write is atomic and serialised per file, so a crash never leaves a corrupt
session and turns on different sessions never wait for each other. Reads, writes and the listing
go through the path guard (``clawlet.paths``) with the home as root: a session file that is a
symlink out of the home or has more than one hard link is neither listed nor read (it counts as
not found) nor written through.

A store keeps the transcripts it read or wrote last, parsed (:class:`clawlet.filememo.FileMemo`):
appending to a long session writes it whole (the format is one JSON object) but does not read and
parse it again, unless another writer changed the file.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import orjson

from clawlet.filememo import FileMemo
from clawlet.paths import UnsafePath, is_safe_entry, read_text_inside
from clawlet.storage import atomic_write_bytes, atomic_write_json, file_lock

log = logging.getLogger(__name__)

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
SUMMARY_PREFIX = "[以下是之前对话的摘要]"
INTERRUPTED_NOTE = "[interrupted: the server stopped before answering this message]"
"""The text of the marker after an unanswered user message (also what the model sees of it)."""


class ToolCallRecord(TypedDict):
    """One tool call of an assistant segment. ``call_id`` (the model's id for the call) pairs it with
    its events and with an approval it waits for; ``is_error`` says the output is the tool's error.
    Both are written for every call; transcripts from before they existed lack them."""

    tool: str
    input: str
    output: str
    call_id: NotRequired[str]
    is_error: NotRequired[bool]


class StoredMessage(TypedDict):
    role: str
    content: str
    tool_calls: NotRequired[list[ToolCallRecord]]
    interrupted: NotRequired[bool]
    """Only on the marker of a turn the server stopped before answering (``INTERRUPTED_NOTE``)."""


class SessionData(TypedDict):
    title: str
    created_at: float
    updated_at: float
    compressed_context: str
    messages: list[StoredMessage]


class SessionNotFound(KeyError):
    """No transcript exists for this id."""


class SessionCorrupt(ValueError):
    """The session file exists but is not a readable v1/v2 transcript; it is left untouched."""


class InvalidSessionId(ValueError):
    """The id could not be a file name (traversal, odd characters, too long)."""


def validate_session_id(session_id: str) -> str:
    if not SESSION_ID_PATTERN.fullmatch(session_id) or ".." in session_id:
        raise InvalidSessionId("session id must be 1-128 characters of letters, digits, '_', '-', '.', ':'")
    return session_id


def _new_session(now: float) -> SessionData:
    return {
        "title": "",
        "created_at": now,
        "updated_at": now,
        "compressed_context": "",
        "messages": [],
    }


def _tool_call(raw: dict[str, Any]) -> ToolCallRecord:
    """One stored tool call, with its fields coerced to their types."""
    call: ToolCallRecord = {
        "tool": str(raw.get("tool", "")),
        "input": str(raw.get("input", "")),
        "output": str(raw.get("output", "")),
    }
    if "call_id" in raw:
        call["call_id"] = str(raw["call_id"])
    if "is_error" in raw:
        call["is_error"] = raw["is_error"] is True
    return call


def _message(raw: dict[str, Any]) -> StoredMessage:
    """One stored message, with its fields coerced to the v2 types."""
    message: StoredMessage = {
        "role": str(raw.get("role") or ""),
        "content": str(raw.get("content") or ""),
    }
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        message["tool_calls"] = [_tool_call(call) for call in calls if isinstance(call, dict)]
    if raw.get("interrupted") is True:
        message["interrupted"] = True
    return message


def transcript_json(data: SessionData) -> bytes:
    """The transcript file's text: JSON indented by two spaces, non-ASCII as it is, a final newline
    (what ``json.dumps(data, ensure_ascii=False, indent=2)`` writes, but for an exponent's zero
    padding). orjson writes it: the store rewrites the file twice a turn on a worker thread, and the
    standard library's indenting encoder is pure Python (~1 ms for a 50-turn session), holding the
    GIL the event loop needs meanwhile to start the model call."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def _copy(data: SessionData) -> SessionData:
    """A copy its holder may change (messages included) without touching the original."""
    copied = data.copy()
    copied["messages"] = [message.copy() for message in data["messages"]]
    return copied


def _coerce(raw: Any, fallback_time: float) -> SessionData:
    """Read v1 (bare list) or v2 (object) content into a v2 ``SessionData``."""
    if isinstance(raw, list):
        data = _new_session(fallback_time)
        data["messages"] = [_message(m) for m in raw if isinstance(m, dict)]
        return data
    if not isinstance(raw, dict):
        raise ValueError("session file is neither a v1 array nor a v2 object")
    data = _new_session(fallback_time)
    data["title"] = str(raw.get("title") or "")
    data["created_at"] = float(raw.get("created_at") or fallback_time)
    data["updated_at"] = float(raw.get("updated_at") or data["created_at"])
    data["compressed_context"] = str(raw.get("compressed_context") or "")
    messages = raw.get("messages") or []
    data["messages"] = [_message(m) for m in messages if isinstance(m, dict)]
    return data


def _not_found(path: Path) -> tuple[SessionData, bool]:
    """No file for the session (a new one: not looked for through the path guard)."""
    raise SessionNotFound(path.stem)


class _NotKept(Exception):
    """The session's file is not the one the store keeps parsed (:meth:`TranscriptStore.kept_for_agent`)."""


def _not_kept(path: Path) -> tuple[SessionData, bool]:
    raise _NotKept(path.stem)


CACHED_TRANSCRIPTS = 256
"""How many parsed transcripts a store keeps at most (the most recently used)."""

CACHED_TRANSCRIPT_BYTES = 16 * 1024 * 1024
"""At most this many bytes of transcript files are kept parsed (parsed, they take a few times
more): a few very long sessions cannot make the cache hold hundreds of MB."""


class TranscriptStore:
    """Reads and writes session transcripts under one ``sessions/`` directory; ``home`` is the
    root the path guard keeps them in (the directory itself when not given)."""

    def __init__(self, directory: Path, home: Path | None = None) -> None:
        self.directory = directory
        self.home = home if home is not None else directory
        self.archive_directory = directory / "archive"
        self.real_directory = directory.resolve()
        """``directory``'s real path, resolved once: what each file's lock is named by."""
        self.parsed: FileMemo[tuple[SessionData, bool]] = FileMemo(
            max_entries=CACHED_TRANSCRIPTS, max_bytes=CACHED_TRANSCRIPT_BYTES
        )
        """The transcripts as last read or written, parsed (and whether the file is still v1)."""

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{validate_session_id(session_id)}.json"

    def locked(self, path: Path) -> AbstractContextManager[None]:
        """The lock every read-modify-write of the session file ``path`` (a :meth:`path_for`) holds."""
        return file_lock(self.real_directory / path.name, resolved=True)

    def exists(self, session_id: str) -> bool:
        path = self.path_for(session_id)
        return path.is_file() and is_safe_entry(self.home, path)

    def _parse(self, path: Path) -> Any:
        try:
            return json.loads(self._raw_text(path))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SessionCorrupt(path.stem) from exc

    def _read_file(self, path: Path) -> tuple[SessionData, bool]:
        """The session in ``path`` parsed, and whether the file is still in the v1 format."""
        raw = self._parse(path)
        try:
            return _coerce(raw, path.stat().st_mtime), isinstance(raw, list)
        except ValueError as exc:
            raise SessionCorrupt(path.stem) from exc

    def _read_versioned(self, path: Path) -> tuple[SessionData, bool]:
        data, legacy = self.parsed.get(path, self._read_file, absent=_not_found)
        return _copy(data), legacy

    def _read(self, path: Path) -> SessionData:
        """The session in ``path`` (a copy of the parsed one when the file did not change)."""
        return self._read_versioned(path)[0]

    def _write(self, path: Path, data: SessionData) -> None:
        """Write ``data`` atomically and keep it as the parsed copy of what the file now holds."""
        status = atomic_write_bytes(path, transcript_json(data), root=self.home)
        self.parsed.remember(path, status, (_copy(data), False))

    def load(self, session_id: str) -> SessionData:
        """The whole session; a v1 file is migrated to v2 on disk the first time it is read."""
        path = self.path_for(session_id)
        with self.locked(path):
            data, legacy = self._read_versioned(path)
            if legacy:
                self._write(path, data)
            return data

    def _raw_text(self, path: Path) -> str:
        try:
            return read_text_inside(self.home, path)
        except FileNotFoundError as exc:
            raise SessionNotFound(path.stem) from exc
        except UnsafePath as exc:
            log.warning("session file %s refused: %s", path, exc)
            raise SessionNotFound(path.stem) from exc

    def load_messages(self, session_id: str) -> list[StoredMessage]:
        return self.load(session_id)["messages"]

    def create(self, session_id: str | None = None, title: str = "") -> tuple[str, SessionData]:
        session_id = validate_session_id(session_id or uuid.uuid4().hex)
        path = self.path_for(session_id)
        with self.locked(path):
            if path.exists():
                return session_id, self._read(path)
            data = _new_session(time.time())
            data["title"] = title
            self._write(path, data)
            return session_id, data

    def list_sessions(self) -> list[dict[str, Any]]:
        """All sessions, most recently updated first (unreadable files are skipped)."""
        items: list[dict[str, Any]] = []
        if not self.directory.is_dir():
            return items
        for path in self.directory.glob("*.json"):
            if not SESSION_ID_PATTERN.fullmatch(path.stem) or not is_safe_entry(self.home, path):
                continue
            try:  # the parsed copy, not changed here; a session not kept is not added for this
                data, _legacy = self.parsed.get(path, self._read_file, keep=False)
            except (ValueError, OSError, SessionNotFound):
                continue
            items.append(
                {
                    "id": path.stem,
                    "title": data["title"],
                    "created_at": data["created_at"],
                    "updated_at": data["updated_at"],
                    "message_count": len(data["messages"]),
                }
            )
        items.sort(key=lambda item: item["updated_at"], reverse=True)
        return items

    def _update(self, session_id: str, create: bool, change: Any) -> SessionData:
        path = self.path_for(session_id)
        with self.locked(path):
            try:
                data = self._read(path)
            except SessionNotFound:
                if not create:
                    raise
                data = _new_session(time.time())
            change(data)
            data["updated_at"] = time.time()
            self._write(path, data)
            return data

    def append(
        self,
        session_id: str,
        role: str,
        content: str,
        tool_calls: list[ToolCallRecord] | None = None,
    ) -> None:
        """Append one message (the session is created if needed)."""
        message: StoredMessage = {"role": role, "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls

        def change(data: SessionData) -> None:
            data["messages"].append(message)

        self._update(session_id, True, change)

    def replace_last(self, session_id: str, expected: StoredMessage, message: StoredMessage) -> bool:
        """Replace the last message with ``message`` if it still is ``expected`` (a segment that is
        being continued, e.g. after a tool approval); otherwise append ``message``. True if replaced."""
        replaced = False

        def change(data: SessionData) -> None:
            nonlocal replaced
            if data["messages"] and data["messages"][-1] == expected:
                data["messages"][-1] = message
                replaced = True
            else:
                data["messages"].append(message)

        self._update(session_id, True, change)
        return replaced

    def mark_interrupted(self, session_id: str) -> bool:
        """If the session's last message is a user message with no answer, add the interrupted
        marker after it (atomically); True if added. Only for a session no turn runs in."""
        marked = False

        def change(data: SessionData) -> None:
            nonlocal marked
            if data["messages"] and data["messages"][-1]["role"] == "user":
                data["messages"].append(
                    {"role": "assistant", "content": INTERRUPTED_NOTE, "interrupted": True}
                )
                marked = True

        path = self.path_for(session_id)
        with self.locked(path):  # the same lock _update takes: a check and a write with nothing between
            last = self._read(path)["messages"][-1:]
            if last and last[0]["role"] == "user":
                self._update(session_id, False, change)
        return marked

    def rename(self, session_id: str, title: str) -> SessionData:
        def change(data: SessionData) -> None:
            data["title"] = title

        return self._update(session_id, False, change)

    def delete(self, session_id: str) -> None:
        path = self.path_for(session_id)
        with self.locked(path):
            try:
                path.unlink()
            except FileNotFoundError as exc:
                raise SessionNotFound(session_id) from exc

    def load_for_agent(self, session_id: str) -> list[dict[str, str]]:
        """History shaped for an LLM: consecutive assistant segments merged, summary first."""
        try:
            data = self.load(session_id)
        except SessionNotFound:
            return []
        return _for_agent(data)

    def kept_for_agent(self, session_id: str) -> list[dict[str, str]] | None:
        """:meth:`load_for_agent` when nothing has to be read, for a caller on the event loop (one
        ``stat``): ``[]`` for a session with no file, the history from the parsed copy when the
        file is the one this store last wrote or read; ``None`` when it must be read (another
        writer changed it, it was never read here, or it is still in the v1 format)."""
        path = self.path_for(session_id)
        try:
            data, legacy = self.parsed.get(path, _not_kept, absent=_not_found)
        except SessionNotFound:
            return []
        except _NotKept:
            return None
        return None if legacy else _for_agent(data)


def _for_agent(data: SessionData) -> list[dict[str, str]]:
    """The session's messages as :meth:`TranscriptStore.load_for_agent` gives them (``data`` is read,
    not changed)."""
    merged: list[dict[str, str]] = []
    if data["compressed_context"]:
        merged.append({"role": "assistant", "content": f"{SUMMARY_PREFIX}\n{data['compressed_context']}"})
    for message in data["messages"]:
        role = message.get("role")
        content = str(message.get("content") or "")
        if role not in ("user", "assistant"):
            continue
        if merged and role == "assistant" and merged[-1]["role"] == "assistant":
            joined = "\n\n".join(part for part in (merged[-1]["content"], content) if part)
            merged[-1]["content"] = joined
        else:
            merged.append({"role": str(role), "content": content})
    return merged


class CompressionConflict(Exception):
    """The session changed under a compression (its first messages are not the ones summarised)."""


def archive_and_summarise(
    store: TranscriptStore, session_id: str, archived: list[StoredMessage], summary: str
) -> tuple[int, int]:
    """Move ``archived`` (the session's first messages) to ``sessions/archive/`` and add ``summary``
    to ``compressed_context``. The archive is written before the session, so a crash in between
    duplicates messages at worst and never loses one. Returns (archived_count, remaining_count)."""
    path = store.path_for(session_id)
    with store.locked(path):
        data = store._read(path)
        count = len(archived)
        if data["messages"][:count] != archived:
            raise CompressionConflict(session_id)
        stamp = time.strftime("%Y%m%d_%H%M%S")
        archive_path = store.archive_directory / f"{session_id}_{stamp}.json"
        suffix = 1
        while archive_path.exists():
            suffix += 1
            archive_path = store.archive_directory / f"{session_id}_{stamp}_{suffix}.json"
        atomic_write_json(
            archive_path,
            {"session_id": session_id, "archived_at": time.time(), "messages": archived},
            root=store.home,
        )
        data["messages"] = data["messages"][count:]
        previous = data["compressed_context"]
        data["compressed_context"] = f"{previous}\n---\n{summary}" if previous else summary
        data["updated_at"] = time.time()
        store._write(path, data)
        return count, len(data["messages"])

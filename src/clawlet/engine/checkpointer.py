"""``LocalCheckpointer``: LangGraph's checkpoint saver on local JSON files (the seed's section 3.3).

It implements ``langgraph.checkpoint.base.BaseCheckpointSaver`` (sync and async, plus the optional
``delete_for_runs`` / ``copy_thread`` / ``prune``) and passes the public conformance suite
``langgraph-checkpoint-conformance`` (see tests/test_checkpointer.py).

Layout under ``root`` (for the exec plane: ``<session dir>/checkpoints``)::

    <root>/
      t_<thread>/                         one directory per thread
        ns_<namespace>/                   one per checkpoint namespace ("" — the root graph — is "ns_")
          <checkpoint id>.json            one checkpoint: header, checkpoint, metadata, channel values
          <checkpoint id>.writes.json     its pending writes (only once ``put_writes`` was called)

Names are encoded so any thread id, namespace or checkpoint id is safe: ``[a-z0-9_-]`` stay as
they are, every other character becomes ``%XX`` per UTF-8 byte (so ``.``, ``/`` and upper-case
letters can never form ``..``, a path separator, or a clash on a case-insensitive file system), and
a name longer than ``_MAX_NAME`` is shortened to a prefix plus its SHA-256. LangGraph's checkpoint
ids (uuid6: lower-case hex and dashes) are therefore their own file names, and sorting the files
sorts the checkpoints oldest to newest.

Values go through the saver's serializer (``self.serde``, ``JsonPlusSerializer`` by default):
each is stored as ``{"type": ..., "data": <base64>}`` so arbitrary channel values round-trip. Each
checkpoint file is self-contained (it holds every channel value of that checkpoint, not only the
changed ones), so retention may delete any older file without breaking newer ones.

Every write is atomic (``clawlet.storage.atomic_write_json``, kept inside ``root`` by the path guard
``clawlet.paths``, which reads go through as well) and writers of one thread are
serialised by ``clawlet.storage.file_lock`` on the thread directory. Readers take no lock: they
only ever see whole files, and a file that cannot be parsed (corrupt, truncated, foreign) is
skipped with a logged warning instead of failing the read.

Retention: after every ``put`` only the newest ``keep`` checkpoints (default
``CHECKPOINT_KEEP_COUNT`` = 10) of that (thread, namespace) are kept; older ones are deleted with
their writes. ``keep=None`` keeps everything. The conformance suite never stores more than four
checkpoints per (thread, namespace), so it passes with the default ``keep=10`` as well as with
``keep=None``. Retention is skipped for a checkpoint whose metadata shows LangGraph's (beta)
``DeltaChannel`` in use (``counters_since_delta_snapshot``), because such channels are rebuilt by
walking the ancestor chain, which retention would cut.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import hashlib
import json
import logging
import os
import random
import shutil
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from clawlet.paths import UnsafePath, read_text_inside
from clawlet.storage import atomic_write_json, file_lock, remove_stale_temp_files

log = logging.getLogger(__name__)

CHECKPOINT_KEEP_COUNT = 10
"""Checkpoints kept per (thread, namespace) by default (the seed's ``_cleanup_old(keep=10)``)."""

RECORD_FORMAT = "clawlet-checkpoint"
WRITES_FORMAT = "clawlet-checkpoint-writes"
SNAPSHOT_FORMAT = "clawlet-checkpoint-snapshot"
FORMAT_VERSION = 1

_THREAD_PREFIX = "t_"
_NS_PREFIX = "ns_"
_CHECKPOINT_SUFFIX = ".json"
_WRITES_SUFFIX = ".writes.json"
_SAFE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_NAME = 120
_HASH_MARK = "~"  # never produced by the %XX encoding, so it marks a shortened (hashed) name


# -- names -----------------------------------------------------------------------------------


def encode_name(value: str) -> str:
    """A file-name-safe, injective encoding of ``value`` (see the module docstring)."""
    raw = value.encode("utf-8", "surrogatepass")
    parts: builtins.list[str] = []
    for char in value:
        if char in _SAFE_CHARS:
            parts.append(char)
        else:
            parts.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    encoded = "".join(parts)
    if len(encoded) > _MAX_NAME:
        digest = hashlib.sha256(raw).hexdigest()
        encoded = f"{encoded[:48]}{_HASH_MARK}{digest}"
    return encoded


def decode_name(name: str) -> str | None:
    """The value ``encode_name`` turned into ``name``; None for hashed or foreign names."""
    if _HASH_MARK in name:
        return None
    try:
        value = urllib.parse.unquote(name, errors="strict")
    except UnicodeDecodeError:
        return None
    return value if encode_name(value) == name else None


def thread_directory(root: Path, thread_id: str) -> Path:
    """Where the saver rooted at ``root`` keeps ``thread_id``'s checkpoints."""
    return root / f"{_THREAD_PREFIX}{encode_name(str(thread_id))}"


# -- typed values ----------------------------------------------------------------------------


def _typed_to_json(typed: tuple[str, bytes]) -> dict[str, str]:
    kind, data = typed
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def _typed_from_json(value: Any) -> tuple[str, bytes]:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError("not a typed value")
    data = value.get("data")
    if not isinstance(data, str):
        raise ValueError("typed value without data")
    try:
        return value["type"], base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"bad base64: {exc}") from exc


def _is_typed(value: Any) -> bool:
    return (
        isinstance(value, dict) and isinstance(value.get("type"), str) and isinstance(value.get("data"), str)
    )


@dataclass(frozen=True)
class _Record:
    """A parsed checkpoint file (values still serialised)."""

    path: Path
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    raw: dict[str, Any]


def _validate_record(data: Any) -> None:
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise ValueError("not a clawlet checkpoint file")
    for key in ("thread_id", "checkpoint_ns", "checkpoint_id"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"missing {key}")
    parent = data.get("parent_checkpoint_id")
    if parent is not None and not isinstance(parent, str):
        raise ValueError("bad parent_checkpoint_id")
    if not _is_typed(data.get("checkpoint")) or not _is_typed(data.get("metadata")):
        raise ValueError("missing checkpoint or metadata")
    values = data.get("channel_values")
    if not isinstance(values, dict) or not all(_is_typed(v) for v in values.values()):
        raise ValueError("bad channel_values")


def _validate_writes(data: Any) -> None:
    if not isinstance(data, dict) or data.get("format") != WRITES_FORMAT:
        raise ValueError("not a clawlet checkpoint writes file")
    writes = data.get("writes")
    if not isinstance(writes, builtins.list):
        raise ValueError("missing writes")
    for entry in writes:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("task_id"), str)
            and isinstance(entry.get("channel"), str)
            and isinstance(entry.get("idx"), int)
            and isinstance(entry.get("task_path", ""), str)
            and _is_typed(entry.get("value"))
        ):
            raise ValueError("bad write entry")


def _read_json(root: Path, path: Path) -> Any:
    """The parsed JSON in ``path``; None if missing (silently) or unreadable or refused by the path
    guard (a link out of ``root``, several hard links) (with a warning)."""
    try:
        text = read_text_inside(root, path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, UnsafePath) as exc:
        log.warning("checkpointer: skipping unreadable file %s: %s", path, exc)
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        log.warning("checkpointer: skipping corrupt file %s: %s", path, exc)
        return None


def _uses_delta_channels(metadata: CheckpointMetadata) -> bool:
    return bool(metadata.get("counters_since_delta_snapshot"))


class LocalCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver storing checkpoints as JSON files under ``root``.

    Args:
        root: the directory holding all threads (created on the first write).
        keep: checkpoints kept per (thread, namespace) after each ``put``; ``None`` keeps all.
        serde: the serializer (default: LangGraph's ``JsonPlusSerializer``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep: int | None = CHECKPOINT_KEEP_COUNT,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if keep is not None and keep < 1:
            raise ValueError("keep must be at least 1 (or None to keep every checkpoint)")
        self.root = Path(root)
        self.keep = keep

    def _write_json(self, path: Path, data: Any) -> None:
        atomic_write_json(path, data, root=self.root)

    # -- paths ---------------------------------------------------------------------------------

    def thread_dir(self, thread_id: str) -> Path:
        return thread_directory(self.root, thread_id)

    def _ns_dir(self, thread_id: str, checkpoint_ns: str) -> Path:
        return self.thread_dir(thread_id) / f"{_NS_PREFIX}{encode_name(checkpoint_ns)}"

    @staticmethod
    def _checkpoint_path(ns_dir: Path, checkpoint_id: str) -> Path:
        return ns_dir / f"{encode_name(checkpoint_id)}{_CHECKPOINT_SUFFIX}"

    @staticmethod
    def _writes_path(ns_dir: Path, checkpoint_id: str) -> Path:
        return ns_dir / f"{encode_name(checkpoint_id)}{_WRITES_SUFFIX}"

    def _thread_dirs(self) -> builtins.list[Path]:
        try:
            entries = sorted(self.root.iterdir())
        except FileNotFoundError:
            return []
        return [p for p in entries if p.name.startswith(_THREAD_PREFIX) and p.is_dir()]

    @staticmethod
    def _ns_dirs(thread_dir: Path) -> builtins.list[Path]:
        try:
            entries = sorted(thread_dir.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [p for p in entries if p.name.startswith(_NS_PREFIX) and p.is_dir()]

    def _checkpoint_files(self, ns_dir: Path) -> dict[str, Path]:
        """Checkpoint id → file, for every checkpoint file in ``ns_dir``."""

        def id_inside(path: Path) -> str | None:
            record = self._read_record(path)
            return None if record is None else record.checkpoint_id

        return self._files_by_id(ns_dir, _CHECKPOINT_SUFFIX, id_inside, not_ending=_WRITES_SUFFIX)

    def _writes_files(self, ns_dir: Path) -> dict[str, Path]:
        """Checkpoint id → writes file, for every writes file in ``ns_dir``."""

        def id_inside(path: Path) -> str | None:
            data = _read_json(self.root, path)
            if not isinstance(data, dict) or not isinstance(data.get("checkpoint_id"), str):
                return None
            return str(data["checkpoint_id"])

        return self._files_by_id(ns_dir, _WRITES_SUFFIX, id_inside)

    @staticmethod
    def _files_by_id(
        ns_dir: Path, suffix: str, id_inside: Callable[[Path], str | None], *, not_ending: str = ""
    ) -> dict[str, Path]:
        """Checkpoint id → file, for every file in ``ns_dir`` named ``<id><suffix>`` but not ending
        in ``not_ending`` (a shortened name holds no id: ``id_inside`` reads it from the file; None
        skips the file)."""
        found: dict[str, Path] = {}
        try:
            names = os.listdir(ns_dir)
        except (FileNotFoundError, NotADirectoryError):
            return found
        for name in names:
            if name.startswith(".") or not name.endswith(suffix):
                continue
            if not_ending and name.endswith(not_ending):
                continue
            path = ns_dir / name
            checkpoint_id = decode_name(name[: -len(suffix)])
            if checkpoint_id is None:
                checkpoint_id = id_inside(path)
                if checkpoint_id is None:
                    continue
            found[checkpoint_id] = path
        return found

    # -- reading -------------------------------------------------------------------------------

    def _read_record(self, path: Path) -> _Record | None:
        data = _read_json(self.root, path)
        if data is None:
            return None
        try:
            _validate_record(data)
        except ValueError as exc:
            log.warning("checkpointer: skipping invalid checkpoint file %s: %s", path, exc)
            return None
        return _Record(
            path=path,
            thread_id=data["thread_id"],
            checkpoint_ns=data["checkpoint_ns"],
            checkpoint_id=data["checkpoint_id"],
            parent_checkpoint_id=data.get("parent_checkpoint_id"),
            raw=data,
        )

    def _read_writes_entries(self, path: Path) -> builtins.list[dict[str, Any]]:
        data = _read_json(self.root, path)
        if data is None:
            return []
        try:
            _validate_writes(data)
        except ValueError as exc:
            log.warning("checkpointer: ignoring invalid writes file %s: %s", path, exc)
            return []
        entries: builtins.list[dict[str, Any]] = data["writes"]
        return entries

    def _load_metadata(self, record: _Record) -> CheckpointMetadata | None:
        try:
            metadata: CheckpointMetadata = self.serde.loads_typed(_typed_from_json(record.raw["metadata"]))
        except Exception as exc:
            log.warning("checkpointer: skipping checkpoint file %s (bad metadata): %s", record.path, exc)
            return None
        return metadata

    def _load_pending_writes(self, ns_dir: Path, checkpoint_id: str) -> builtins.list[PendingWrite]:
        path = self._writes_path(ns_dir, checkpoint_id)
        entries = self._read_writes_entries(path)
        entries = sorted(
            entries, key=lambda e: writes_sort_key(e.get("task_path", ""), e["task_id"], e["idx"])
        )
        try:
            return [
                (e["task_id"], e["channel"], self.serde.loads_typed(_typed_from_json(e["value"])))
                for e in entries
            ]
        except Exception as exc:
            log.warning("checkpointer: ignoring undecodable writes file %s: %s", path, exc)
            return []

    def _to_tuple(
        self, record: _Record, metadata: CheckpointMetadata | None = None
    ) -> CheckpointTuple | None:
        """Deserialise ``record``; None (with a warning) when its contents cannot be decoded."""
        if metadata is None:
            metadata = self._load_metadata(record)
            if metadata is None:
                return None
        try:
            checkpoint: Checkpoint = self.serde.loads_typed(_typed_from_json(record.raw["checkpoint"]))
            versions = checkpoint["channel_versions"]
            blobs: dict[str, Any] = record.raw["channel_values"]
            channel_values = {
                name: self.serde.loads_typed(_typed_from_json(blobs[name]))
                for name in versions
                if name in blobs
            }
        except Exception as exc:
            log.warning("checkpointer: skipping undecodable checkpoint file %s: %s", record.path, exc)
            return None
        ns_dir = record.path.parent
        thread_id, checkpoint_ns = record.thread_id, record.checkpoint_ns
        parent_id = record.parent_checkpoint_id
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": record.checkpoint_id,
                }
            },
            checkpoint={**checkpoint, "channel_values": channel_values},
            metadata=metadata,
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "checkpoint_id": parent_id,
                    }
                }
                if parent_id
                else None
            ),
            pending_writes=self._load_pending_writes(ns_dir, record.checkpoint_id),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), or the thread's newest one."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        ns_dir = self._ns_dir(thread_id, checkpoint_ns)
        if checkpoint_id := get_checkpoint_id(config):
            path = self._checkpoint_path(ns_dir, checkpoint_id)
            record = self._read_record(path)
            if record is None or record.checkpoint_id != checkpoint_id:
                return None
            return self._to_tuple(record)
        files = self._checkpoint_files(ns_dir)
        for candidate in sorted(files, reverse=True):  # newest first; skip unreadable files
            record = self._read_record(files[candidate])
            if record is not None and (tup := self._to_tuple(record)) is not None:
                return tup
        return None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread (all threads if ``config`` is None) and namespace.

        ``filter`` keeps checkpoints whose metadata has all the given key/values, ``before`` keeps
        those with an id lower than its ``checkpoint_id``, ``limit`` caps the number yielded.
        """
        if config is not None:
            configurable = config["configurable"]
            thread_dirs = [self.thread_dir(str(configurable["thread_id"]))]
            config_ns: str | None = configurable.get("checkpoint_ns")
            config_checkpoint_id = get_checkpoint_id(config)
        else:
            thread_dirs = self._thread_dirs()
            config_ns = None
            config_checkpoint_id = None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_dir in thread_dirs:
            if config_ns is not None:
                ns_dirs = [thread_dir / f"{_NS_PREFIX}{encode_name(config_ns)}"]
            else:
                ns_dirs = self._ns_dirs(thread_dir)
            for ns_dir in ns_dirs:
                files = self._checkpoint_files(ns_dir)
                for checkpoint_id in sorted(files, reverse=True):
                    if config_checkpoint_id and checkpoint_id != config_checkpoint_id:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    if remaining is not None and remaining <= 0:
                        return
                    record = self._read_record(files[checkpoint_id])
                    if record is None:
                        continue
                    metadata = self._load_metadata(record)
                    if metadata is None:
                        continue
                    if filter and not all(metadata.get(key) == value for key, value in filter.items()):
                        continue
                    tup = self._to_tuple(record, metadata)
                    if tup is None:
                        continue
                    if remaining is not None:
                        remaining -= 1
                    yield tup

    # -- writing -------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (a child of ``config``'s ``checkpoint_id``, if any), then apply retention."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        parent_id = configurable.get("checkpoint_id")
        if not checkpoint["id"]:
            raise ValueError("a checkpoint needs a non-empty id")
        skeleton = checkpoint.copy()
        values: dict[str, Any] = skeleton.pop("channel_values")  # type: ignore[misc]
        full_metadata = get_checkpoint_metadata(config, metadata)
        source, step = full_metadata.get("source"), full_metadata.get("step")
        thread_dir = self.thread_dir(thread_id)
        ns_dir = self._ns_dir(thread_id, checkpoint_ns)
        with file_lock(thread_dir):
            blobs: dict[str, dict[str, str]] = {}
            unchanged: dict[str, Any] = {}
            for name, version in checkpoint["channel_versions"].items():
                if name in values:
                    blobs[name] = _typed_to_json(self.serde.dumps_typed(values[name]))
                elif name not in new_versions:
                    # Not given and not new: the value stored with this version earlier (like
                    # InMemorySaver's blobs). A new channel without a value is empty.
                    unchanged[name] = version
            if unchanged:
                self._copy_stored_blobs(ns_dir, parent_id, checkpoint["id"], unchanged, blobs)
            record: dict[str, Any] = {
                "format": RECORD_FORMAT,
                "version": FORMAT_VERSION,
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
                "parent_checkpoint_id": parent_id,
                # informational only (the typed fields below are authoritative)
                "ts": checkpoint.get("ts"),
                "source": source if isinstance(source, str) else None,
                "step": step if isinstance(step, int) else None,
                "checkpoint": _typed_to_json(self.serde.dumps_typed(skeleton)),
                "metadata": _typed_to_json(self.serde.dumps_typed(full_metadata)),
                "channel_values": blobs,
            }
            self._write_json(self._checkpoint_path(ns_dir, checkpoint["id"]), record)
            if self.keep is not None and not _uses_delta_channels(full_metadata):
                self._retain(ns_dir, self.keep)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _copy_stored_blobs(
        self,
        ns_dir: Path,
        parent_id: str | None,
        own_id: str,
        wanted: dict[str, Any],
        blobs: dict[str, dict[str, str]],
    ) -> None:
        """Fill ``blobs`` with the stored values of channels at the versions in ``wanted``.

        Looks at the parent checkpoint first, then at the others newest first; a channel whose
        version is found without a value stays empty.
        """
        files = self._checkpoint_files(ns_dir)
        order = sorted((cid for cid in files if cid not in (own_id, parent_id)), reverse=True)
        if parent_id and parent_id in files:
            order.insert(0, parent_id)
        remaining = dict(wanted)
        for candidate in order:
            if not remaining:
                return
            record = self._read_record(files[candidate])
            if record is None:
                continue
            try:
                stored: Checkpoint = self.serde.loads_typed(_typed_from_json(record.raw["checkpoint"]))
                versions = stored["channel_versions"]
            except Exception as exc:
                log.warning("checkpointer: skipping undecodable checkpoint file %s: %s", record.path, exc)
                continue
            for name, version in builtins.list(remaining.items()):
                if name in versions and versions[name] == version:
                    if name in record.raw["channel_values"]:
                        blobs[name] = record.raw["channel_values"][name]
                    del remaining[name]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names.

        A regular write is stored once per (task_id, index): repeating it is a no-op. The special
        channels (error, interrupt, ...) map to fixed negative indexes and are replaced.
        """
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        checkpoint_id: str = configurable["checkpoint_id"]
        thread_dir = self.thread_dir(thread_id)
        ns_dir = self._ns_dir(thread_id, checkpoint_ns)
        path = self._writes_path(ns_dir, checkpoint_id)
        with file_lock(thread_dir):
            entries = self._read_writes_entries(path)
            position = {(e["task_id"], e["idx"]): i for i, e in enumerate(entries)}
            changed = False
            for idx, (channel, value) in enumerate(writes):
                write_idx = WRITES_IDX_MAP.get(channel, idx)
                key = (task_id, write_idx)
                if write_idx >= 0 and key in position:
                    continue
                entry = {
                    "task_id": task_id,
                    "idx": write_idx,
                    "channel": channel,
                    "task_path": task_path,
                    "value": _typed_to_json(self.serde.dumps_typed(value)),
                }
                if key in position:
                    entries[position[key]] = entry
                else:
                    position[key] = len(entries)
                    entries.append(entry)
                changed = True
            if changed:
                self._write_json(
                    path,
                    {
                        "format": WRITES_FORMAT,
                        "version": FORMAT_VERSION,
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "checkpoint_id": checkpoint_id,
                        "writes": entries,
                    },
                )

    # -- deleting, retention ---------------------------------------------------------------------

    def _retain(self, ns_dir: Path, keep: int) -> None:
        """Keep the newest ``keep`` checkpoints in ``ns_dir``; delete the rest with their writes."""
        files = self._checkpoint_files(ns_dir)
        ordered = sorted(files, reverse=True)
        for old in ordered[keep:]:
            self._delete_checkpoint(ns_dir, old, files[old])
        kept = ordered[:keep]
        if kept:
            oldest_kept = kept[-1]
            for checkpoint_id, path in self._writes_files(ns_dir).items():
                if checkpoint_id < oldest_kept and checkpoint_id not in files:
                    path.unlink(missing_ok=True)  # writes of a checkpoint that no longer exists
        remove_stale_temp_files(ns_dir)

    def _delete_checkpoint(self, ns_dir: Path, checkpoint_id: str, path: Path | None = None) -> None:
        (path or self._checkpoint_path(ns_dir, checkpoint_id)).unlink(missing_ok=True)
        self._writes_path(ns_dir, checkpoint_id).unlink(missing_ok=True)

    def _remove_thread_dir(self, thread_dir: Path) -> None:
        # Rename first (atomic), so a reader sees the whole thread or nothing, then delete.
        tombstone = self.root / f".deleted-{uuid.uuid4().hex}"
        try:
            thread_dir.rename(tombstone)
        except FileNotFoundError:
            return
        shutil.rmtree(tombstone, ignore_errors=True)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of ``thread_id`` (all namespaces)."""
        thread_dir = self.thread_dir(str(thread_id))
        with file_lock(thread_dir):
            self._remove_thread_dir(thread_dir)

    def delete_other_threads(self, keep: str) -> int:
        """Delete every thread but ``keep`` (a runtime that only ever continues its newest turn
        keeps that one); returns how many were deleted. Reads no checkpoint."""
        kept = self.thread_dir(str(keep))
        removed = 0
        for thread_dir in self._thread_dirs():
            if thread_dir != kept:
                with file_lock(thread_dir):
                    self._remove_thread_dir(thread_dir)
                removed += 1
        return removed

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is in ``run_ids``."""
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_dir in self._thread_dirs():
            with file_lock(thread_dir):
                for ns_dir in self._ns_dirs(thread_dir):
                    for checkpoint_id, path in self._checkpoint_files(ns_dir).items():
                        record = self._read_record(path)
                        if record is None:
                            continue
                        metadata = self._load_metadata(record)
                        if metadata is not None and metadata.get("run_id") in wanted:
                            self._delete_checkpoint(ns_dir, checkpoint_id, path)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (merging into the target)."""
        source_dir = self.thread_dir(str(source_thread_id))
        target_dir = self.thread_dir(str(target_thread_id))
        if source_dir == target_dir:
            return
        first, second = sorted((source_dir, target_dir))
        with file_lock(first), file_lock(second):
            for ns_dir in self._ns_dirs(source_dir):
                target_ns_dir = target_dir / ns_dir.name
                copied = False
                for checkpoint_id, path in self._checkpoint_files(ns_dir).items():
                    record = self._read_record(path)
                    if record is None:
                        continue
                    self._write_json(
                        target_ns_dir / path.name, {**record.raw, "thread_id": str(target_thread_id)}
                    )
                    copied = True
                    writes_path = self._writes_path(ns_dir, checkpoint_id)
                    writes = _read_json(self.root, writes_path)
                    if writes is None:
                        continue
                    try:
                        _validate_writes(writes)
                    except ValueError as exc:
                        log.warning("checkpointer: not copying invalid writes file %s: %s", writes_path, exc)
                        continue
                    self._write_json(
                        target_ns_dir / writes_path.name, {**writes, "thread_id": str(target_thread_id)}
                    )
                if copied and self.keep is not None:
                    self._retain(target_ns_dir, self.keep)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's newest checkpoint; ``delete``: drop the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r} (use 'keep_latest' or 'delete')")
        for thread_id in thread_ids:
            thread_dir = self.thread_dir(str(thread_id))
            with file_lock(thread_dir):
                if strategy == "delete":
                    self._remove_thread_dir(thread_dir)
                    continue
                for ns_dir in self._ns_dirs(thread_dir):
                    self._retain(ns_dir, 1)

    # -- versions ------------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Like ``InMemorySaver``: a zero-padded counter plus a random tie-breaker, as a string."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"  # noqa: S311 - a tie-breaker, not a secret

    # -- snapshot for the control plane ----------------------------------------------------------

    def get_all_for_snapshot(self) -> dict[str, Any]:
        """The newest readable checkpoint of every (thread, namespace), as JSON-safe data.

        For the exec plane's periodic sync to the control plane (seed §3.3). Each entry holds the
        checkpoint file's contents (``checkpoint``) and its pending writes (``writes``), so
        ``restore_snapshot`` on another machine resumes the thread where it stopped.
        """
        entries: builtins.list[dict[str, Any]] = []
        for thread_dir in self._thread_dirs():
            for ns_dir in self._ns_dirs(thread_dir):
                files = self._checkpoint_files(ns_dir)
                for checkpoint_id in sorted(files, reverse=True):
                    record = self._read_record(files[checkpoint_id])
                    if record is None:
                        continue
                    entries.append(
                        {
                            "thread_id": record.thread_id,
                            "checkpoint_ns": record.checkpoint_ns,
                            "checkpoint_id": record.checkpoint_id,
                            "checkpoint": record.raw,
                            "writes": self._read_writes_entries(self._writes_path(ns_dir, checkpoint_id)),
                        }
                    )
                    break
        return {
            "format": SNAPSHOT_FORMAT,
            "version": FORMAT_VERSION,
            "created_at": datetime.now(UTC).isoformat(),
            "checkpoints": entries,
        }

    def restore_snapshot(self, snapshot: dict[str, Any]) -> int:
        """Write the checkpoints of a ``get_all_for_snapshot`` result back; returns how many."""
        if not isinstance(snapshot, dict) or snapshot.get("format") != SNAPSHOT_FORMAT:
            raise ValueError("not a clawlet checkpoint snapshot")
        entries = snapshot.get("checkpoints")
        if not isinstance(entries, builtins.list):
            raise ValueError("snapshot without checkpoints")
        for entry in entries:  # validate everything before writing anything
            if not isinstance(entry, dict):
                raise ValueError("bad snapshot entry")
            _validate_record(entry.get("checkpoint"))
            _validate_writes({"format": WRITES_FORMAT, "writes": entry.get("writes")})
        for entry in entries:
            record: dict[str, Any] = entry["checkpoint"]
            thread_id, checkpoint_ns = record["thread_id"], record["checkpoint_ns"]
            checkpoint_id = record["checkpoint_id"]
            thread_dir = self.thread_dir(thread_id)
            ns_dir = self._ns_dir(thread_id, checkpoint_ns)
            with file_lock(thread_dir):
                self._write_json(self._checkpoint_path(ns_dir, checkpoint_id), record)
                if entry["writes"]:
                    self._write_json(
                        self._writes_path(ns_dir, checkpoint_id),
                        {
                            "format": WRITES_FORMAT,
                            "version": FORMAT_VERSION,
                            "thread_id": thread_id,
                            "checkpoint_ns": checkpoint_ns,
                            "checkpoint_id": checkpoint_id,
                            "writes": entry["writes"],
                        },
                    )
                if self.keep is not None:
                    self._retain(ns_dir, self.keep)
        return len(entries)

    # -- async variants (the sync methods in a worker thread) -------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self._no_thread(config["configurable"]["thread_id"]):  # a fresh turn's: no thread hop
            return None
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        iterator = self.list(config, filter=filter, before=before, limit=limit)

        def advance() -> CheckpointTuple | None:
            return next(iterator, None)

        while (item := await asyncio.to_thread(advance)) is not None:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        if self._no_thread(thread_id):  # a session's first turn: nothing to delete, no thread hop
            return
        await asyncio.to_thread(self.delete_thread, thread_id)

    def _no_thread(self, thread_id: object) -> bool:
        """Whether ``thread_id`` has no directory (one ``stat``): it holds nothing to read or
        delete. A thread that has one is read and deleted by a worker thread."""
        return not self.thread_dir(str(thread_id)).exists()

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

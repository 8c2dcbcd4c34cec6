"""The one way clawlet writes user data: atomic file writes, serialised per file.

A write goes to a temporary file in the same directory, is flushed and fsynced, then renamed over
the target, so a process killed at any moment leaves either the old file or the new one, never a
half-written one.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

_locks_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise read-modify-write cycles on one file within this process."""
    key = str(path.resolve())
    with _locks_guard:
        lock = _locks.setdefault(key, threading.RLock())
    with lock:
        yield


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temp_files(directory: Path, older_than: float = 60.0) -> int:
    """Delete temp files an interrupted atomic write left behind (``.<name>.*.tmp``)."""
    removed = 0
    cutoff = time.time() - older_than
    for leftover in directory.glob(".*.tmp"):
        try:
            if leftover.is_file() and leftover.stat().st_mtime < cutoff:
                leftover.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    return removed


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with pretty-printed JSON (non-ASCII kept readable) atomically."""
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")

"""The one way clawlet writes user data: atomic file writes, serialised per file.

A write goes to a temporary file in the same directory, is flushed and fsynced, then renamed over
the target, so a process killed at any moment leaves either the old file or the new one, never a
half-written one.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from clawlet.paths import open_directory_inside, resolve_inside

_locks_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise read-modify-write cycles on one file within this process."""
    key = str(path.resolve())
    with _locks_guard:
        lock = _locks.setdefault(key, threading.RLock())
    with lock:
        yield


def atomic_write_bytes(path: Path, data: bytes, *, root: Path | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (temp file + fsync + rename).

    With ``root`` (the clawlet home), the write goes through the path guard: the target and every
    directory on the way must stay inside ``root`` and the target must not be multiply linked
    (``clawlet.paths``); the temp file and the rename then work relative to the checked
    directory's descriptor, so a symlink planted meanwhile cannot redirect them.
    """
    if root is not None:
        path = resolve_inside(root, path, single_link=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if root is not None:
        dir_fd = open_directory_inside(root, path.parent)
    else:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _write_and_rename(dir_fd, path.name, data)
    finally:
        os.close(dir_fd)


def _write_and_rename(dir_fd: int, name: str, data: bytes) -> None:
    stem = name if len(name.encode("utf-8")) <= 200 else name[:50]
    while True:
        tmp_name = f".{stem}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp_name, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        break
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=dir_fd)
        raise
    with suppress(OSError):
        os.fsync(dir_fd)


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


def atomic_write_text(path: Path, text: str, *, root: Path | None = None) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically (guarded inside ``root`` when given)."""
    atomic_write_bytes(path, text.encode("utf-8"), root=root)


def atomic_write_json(path: Path, data: Any, *, root: Path | None = None) -> None:
    """Replace ``path`` with pretty-printed JSON (non-ASCII kept readable) atomically (guarded
    inside ``root`` when given)."""
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n", root=root)

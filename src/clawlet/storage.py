"""The one way clawlet writes user data: atomic file writes, serialised per file.

A write goes to a temporary file in the same directory, is flushed and fsynced, then renamed over
the target, so a process killed at any moment leaves either the old file or the new one, never a
half-written one.

A temp file is named ``.<name>.<writer pid>.<random>.tmp``. One a killed writer left behind is
removed by :func:`remove_stale_temp_files` (start-up runs it over the whole home): once its writer
is gone, or after an hour if the writer cannot be told; never while it may be a write going on.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from clawlet.paths import open_directory_inside, resolve_inside

PROCESS_STARTED = time.time()
"""When this process started writing (this module is imported before any write)."""
TEMP_NAME = re.compile(r"\.(?P<target>.+?)\.(?:(?P<pid>\d+)\.)?[a-z0-9_]{8}\.tmp")
"""An atomic write's temp file: ``.<name>.<pid>.<8 random characters>.tmp`` (no pid: older)."""
WRITE_IN_PROGRESS_FOR = 2.0
"""A temp younger than this (seconds) may be a write going on, even of a process in another pid
namespace (whose pid means nothing here); a restart takes longer than this."""
ABANDONED_AFTER = 3600.0
"""A temp older than this (seconds) is abandoned even if a process with its writer's pid lives."""
SKIPPED_DIRECTORIES = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__"})
"""Trees clawlet never writes into, not searched for temp files."""

_locks_guard = threading.Lock()
_locks: dict[str, tuple[threading.RLock, list[int]]] = {}
"""The lock of each file some thread holds or waits for, and how many do (the entry goes with the last)."""
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def file_lock(path: Path, *, resolved: bool = False) -> Iterator[None]:
    """Serialise read-modify-write cycles on one file within this process. Only files in use have
    a lock: a server that has written thousands of sessions does not keep one for each. The lock is
    the real path's (``resolved``: ``path`` is one already, not resolved again)."""
    key = str(path if resolved else path.resolve())
    with _locks_guard:
        lock, users = _locks.setdefault(key, (threading.RLock(), [0]))
        users[0] += 1
    try:
        with lock:
            yield
    finally:
        with _locks_guard:
            users[0] -= 1
            if not users[0]:
                del _locks[key]


def atomic_write_bytes(path: Path, data: bytes, *, root: Path | None = None) -> os.stat_result:
    """Replace ``path`` with ``data`` atomically (temp file + fsync + rename); returns the written
    file's status (from its descriptor: no later writer's, see :class:`clawlet.filememo.FileMemo`).

    With ``root`` (the clawlet home), the write goes through the path guard: the target and every
    directory on the way must stay inside ``root`` and the target must not be multiply linked
    (``clawlet.paths``); the temp file and the rename then work relative to the checked
    directory's descriptor, so a symlink planted meanwhile cannot redirect them.
    """
    if root is not None:
        path = resolve_inside(root, path, single_link=True)
    dir_fd = _open_directory(path.parent, root)
    try:
        return _write_and_rename(dir_fd, path.name, data)
    finally:
        os.close(dir_fd)


def _open_directory(directory: Path, root: Path | None, *, create: bool = True) -> int:
    """A descriptor of ``directory`` (already resolved inside ``root``, when given), created first
    if it is missing."""
    try:
        if root is None:
            return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return open_directory_inside(root, directory, resolved=True)
    except FileNotFoundError:
        if not create:
            raise
        directory.mkdir(parents=True, exist_ok=True)
        return _open_directory(directory, root, create=False)


_pid = os.getpid()
"""This process's id (``os.getpid`` is a system call each time), renewed in a forked child."""


def _renew_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_renew_pid)


def _write_and_rename(dir_fd: int, name: str, data: bytes) -> os.stat_result:
    """Write ``data`` to a new temp file in the directory, fsync it, rename it over ``name`` and
    fsync the directory, in as few system calls as that takes (open, write, fsync, fstat, close,
    rename, fsync): each lets another thread take the GIL, so a write beside a busy event loop
    waits for it about once per call."""
    stem = name if len(name.encode("utf-8")) <= 200 else name[:50]
    while True:  # random's generator, not the system's: a name only has to be new (O_EXCL checks)
        tmp_name = f".{stem}.{_pid}.{random.getrandbits(32):08x}.tmp"  # see is_stale_temp_file
        try:
            fd = os.open(tmp_name, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        break
    try:
        try:
            remaining = memoryview(data)
            while remaining:
                remaining = remaining[os.write(fd, remaining) :]
            os.fsync(fd)
            status = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=dir_fd)
        raise
    with suppress(OSError):
        os.fsync(dir_fd)
    return status


def _process_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def is_stale_temp_file(name: str, modified: float, now: float) -> bool:
    """Whether the file ``name`` (last modified at ``modified``) is an atomic write's temp file that
    no write will finish: its writer process is gone (or is an earlier process with this one's
    pid), or it was left for over :data:`ABANDONED_AFTER` seconds. A temp younger than
    :data:`WRITE_IN_PROGRESS_FOR` seconds is never stale: its writer may be in another pid
    namespace (a container sharing the home)."""
    found = TEMP_NAME.fullmatch(name)
    if found is None:
        return False
    age = now - modified
    if age < WRITE_IN_PROGRESS_FOR:
        return False
    if age > ABANDONED_AFTER:
        return True
    if found["pid"] is None:
        return False  # an older writer's name: wait for ABANDONED_AFTER
    pid = int(found["pid"])
    if pid == os.getpid():
        return modified < PROCESS_STARTED  # an earlier process with the same pid (a restart)
    return not _process_exists(pid)


def remove_stale_temp_files(directory: Path, *, recursive: bool = False) -> int:
    """Delete the temp files interrupted atomic writes left in ``directory`` (and below it if
    ``recursive``; symlinks are not followed); returns how many. See :func:`is_stale_temp_file`."""
    removed = 0
    now = time.time()
    for folder, subfolders, names in os.walk(directory):
        subfolders[:] = [] if not recursive else [d for d in subfolders if d not in SKIPPED_DIRECTORIES]
        for name in names:
            if not name.endswith(".tmp"):
                continue
            leftover = Path(folder) / name
            try:
                status = leftover.lstat()
                if stat.S_ISREG(status.st_mode) and is_stale_temp_file(name, status.st_mtime, now):
                    leftover.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
    return removed


def atomic_write_text(path: Path, text: str, *, root: Path | None = None) -> os.stat_result:
    """Replace ``path`` with UTF-8 ``text`` atomically (guarded inside ``root`` when given)."""
    return atomic_write_bytes(path, text.encode("utf-8"), root=root)


def atomic_write_json(path: Path, data: Any, *, root: Path | None = None) -> os.stat_result:
    """Replace ``path`` with pretty-printed JSON (non-ASCII kept readable) atomically (guarded
    inside ``root`` when given)."""
    return atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n", root=root)


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (POSIX; elsewhere nothing is locked)."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

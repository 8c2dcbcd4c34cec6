"""Values computed from files, computed again only when a file changed (the one such cache).

A :class:`FileMemo` keeps, per path, what a computation returned and the file's *signature* taken
just before it ran: device, inode, size, modification time and link count (``os.stat``, symlinks
followed; a missing file has the signature ``None``). The value is reused while the signature is
the same. Every atomic write (:mod:`clawlet.storage`) makes a new inode, and any other write moves
the modification time, so an edit is seen by the next call, with one exception handled as Git
handles its "racily clean" index entries: a file written in place twice within one tick of the
file system's clock can keep its size and time. So a value whose file was modified less than
:data:`RACY_SECONDS` before the signature was taken is not trusted: it is computed again until the
file has been quiet that long. A value the process wrote itself (:meth:`FileMemo.remember`, with
the status of the very file it wrote) is trusted at once: that inode changes only by being replaced.

The computation still goes through whatever guard it uses (``clawlet.paths``); a link that leads
out of the home changes the signature (another file, another inode) and is refused again.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

RACY_SECONDS = 2.0
"""How long after a file's last modification its signature is not trusted (coarser than the clock
of every file system clawlet runs on: ext4/xfs/tmpfs ticks are milliseconds, FAT's 2 s)."""

Signature = tuple[int, int, int, int, int]


def signature_of(status: os.stat_result) -> Signature:
    """The fields of a file's status that change when its content does."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_nlink)


def file_signature(path: Path) -> Signature | None:
    """``path``'s signature, or ``None`` when there is no file to read there."""
    try:
        return signature_of(os.stat(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True)
class _Entry(Generic[T]):
    signature: Signature | None
    value: T


def _size(entry: _Entry[T]) -> int:
    """The size of the file ``entry`` was computed from (0: there was none)."""
    return 0 if entry.signature is None else entry.signature[2]


class FileMemo(Generic[T]):
    """Per path (and ``variant``, for values that depend on more than the file): the last value
    computed from the file and its signature then. Thread-safe; a value is shared, not copied."""

    def __init__(self, max_entries: int = 1024, max_bytes: int | None = None) -> None:
        self._entries: OrderedDict[tuple[Path, Hashable], _Entry[T]] = OrderedDict()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        """At most this many bytes of files (their sizes when read) have a value kept; ``None``: no
        bound but the count. A file larger than that alone is not kept."""
        self._bytes = 0
        self._lock = threading.Lock()
        self.computed = 0
        """How many times a value was computed (not reused): what tests count."""

    def get(
        self,
        path: Path,
        compute: Callable[[Path], T],
        variant: Hashable = None,
        *,
        keep: bool = True,
        absent: Callable[[Path], T] | None = None,
    ) -> T:
        """The value of ``compute(path)``, computed again only if the file changed (``keep=False``:
        a value computed now is not kept, for one-off reads that should not push others out).
        ``absent``: what to return (or raise) instead when there is no file, without trying to
        read it."""
        key = (path, variant)
        signature = file_signature(path)
        if signature is None and absent is not None:
            self.forget(path, variant)
            return absent(path)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and entry.signature == signature:
            return entry.value
        value = compute(path)
        settled = signature is None or signature[3] < time.time_ns() - int(RACY_SECONDS * 1e9)
        with self._lock:
            self.computed += 1
            if settled and keep:
                self._store(key, _Entry(signature, value))
            else:
                self._drop(key)
        return value

    def _store(self, key: tuple[Path, Hashable], entry: _Entry[T]) -> None:
        self._drop(key)
        if self.max_bytes is not None and _size(entry) > self.max_bytes:
            return  # it alone is over the bound: keeping it would push every other value out
        self._entries[key] = entry
        self._bytes += _size(entry)
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self._bytes > self.max_bytes
        ):  # the least recently used go first
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[Path, Hashable]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= _size(entry)

    @property
    def kept_bytes(self) -> int:
        """The sizes of the files whose values are kept, summed."""
        return self._bytes

    def remember(self, path: Path, status: os.stat_result, value: T, variant: Hashable = None) -> None:
        """Record ``value`` as what ``path`` holds: the caller just wrote it (``status`` is the
        written file's own, taken from its descriptor, so no other writer can come between)."""
        with self._lock:
            self._store((path, variant), _Entry(signature_of(status), value))

    def forget(self, path: Path, variant: Hashable = None) -> None:
        with self._lock:
            self._drop((path, variant))

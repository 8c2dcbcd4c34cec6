"""What the execution plane keeps so nothing it reports is lost to a dropped connection (seed 001 §10).

* :class:`DiskQueue`: fire-and-forget records (usage reports, audit log entries, …), one JSON object
  per line in ``<state_dir>/usage_queue.jsonl``. The client writes every record here first (fsynced)
  and sends it from here, connected or not, so a record the agent reported survives an outage, a
  crash or a restart of the daemon. A torn last line left by a crash is skipped (and a later append
  starts on a fresh line, so it never glues onto one). Records are removed only after they were sent
  and a ping/pong round trip showed the control plane's WebSocket received them
  (:meth:`DiskQueue.consume` rewrites the rest atomically); a crash or a drop before that sends them
  again. Delivery is therefore at least once, and the control plane de-duplicates by each record's
  ``id`` (exactly once in effect).
* :class:`ReplayBuffer`: SSE events to replay after a reconnect, in memory, bounded: those produced
  while disconnected, preceded by those sent but not yet confirmed by a ping/pong when the
  connection dropped. When full, the **oldest** event is dropped (the newest ones, including a
  run's final events, matter most to a UI catching up; the transcript itself is persisted locally
  anyway); drops are counted and show up as a gap in the per-session ``seq`` the control plane sees.

One process owns a queue file at a time (the daemon); within it, a lock serialises appends, reads and
compactions, which run in worker threads so fsync never blocks the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from clawlet.storage import atomic_write_bytes

log = logging.getLogger(__name__)

USAGE_QUEUE_FILE: Final = "usage_queue.jsonl"
DEFAULT_SSE_BUFFER_LIMIT: Final = 10_000

T = TypeVar("T")


@dataclass(frozen=True)
class QueuedRecord:
    data: dict[str, Any]
    end: int
    """The file offset just past this record's line: ``consume(end)`` removes it and all before it."""


@dataclass(frozen=True)
class QueueBatch:
    records: list[QueuedRecord] = field(default_factory=list)
    end: int = 0
    """The offset just past everything read (records and skipped lines)."""
    skipped: int = 0
    """Lines that were not JSON objects (e.g. torn by a crash)."""


class DiskQueue:
    """An fsynced JSON-lines queue file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record durably (the line is on disk when this returns)."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # the last line was torn by a crash: keep it apart
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)

    def read(self, max_records: int | None = None) -> QueueBatch:
        """The records in the file, oldest first (at most ``max_records``), skipping bad lines."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return QueueBatch()
        records: list[QueuedRecord] = []
        skipped = 0
        pos = end = 0
        while pos < len(data):
            if max_records is not None and len(records) >= max_records:
                break
            newline = data.find(b"\n", pos)
            if newline == -1:
                # a line without its newline can only be the remains of a crash mid-append
                log.warning("skipping a torn last line in %s (%d bytes)", self.path, len(data) - pos)
                skipped += 1
                end = len(data)
                break
            line, pos = data[pos:newline], newline + 1
            end = pos
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                log.warning("skipping an unreadable line in %s", self.path)
                skipped += 1
                continue
            records.append(QueuedRecord(obj, end))
        return QueueBatch(records, end, skipped)

    def consume(self, offset: int) -> None:
        """Remove everything before ``offset`` (a record's or batch's ``end``), atomically."""
        if offset <= 0:
            return
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return
            rest = data[offset:]
            if rest:
                atomic_write_bytes(self.path, rest)
            else:
                self.path.unlink()
                _fsync_dir(self.path.parent)

    def __len__(self) -> int:
        return len(self.read().records)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


class ReplayBuffer(Generic[T]):
    """A bounded FIFO that drops its oldest item when full (see the module docstring)."""

    def __init__(self, limit: int = DEFAULT_SSE_BUFFER_LIMIT) -> None:
        if limit < 1:
            raise ValueError("the buffer limit must be at least 1")
        self.limit = limit
        self._items: deque[T] = deque()
        self.dropped = 0
        """Items dropped since the buffer was created."""

    def append(self, item: T) -> bool:
        """Add ``item``; returns ``False`` when the oldest item had to be dropped for it."""
        kept = True
        if len(self._items) >= self.limit:
            self._items.popleft()
            self.dropped += 1
            kept = False
        self._items.append(item)
        return kept

    def prepend(self, items: list[T]) -> None:
        """Put ``items`` (older than everything buffered, oldest first) in front; past the limit the
        oldest are dropped."""
        self._items.extendleft(reversed(items))
        while len(self._items) > self.limit:
            self._items.popleft()
            self.dropped += 1

    def peek(self) -> T:
        return self._items[0]

    def popleft(self) -> T:
        return self._items.popleft()

    def clear(self) -> int:
        count = len(self._items)
        self._items.clear()
        return count

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))

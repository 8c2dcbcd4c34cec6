"""The control plane's durable event log of sessions and its copy of their transcripts.

Tables (in the control plane's database, :mod:`clawlet.controlplane.db`; times are epoch ms):

* ``session_events`` — every ``sse_event`` an execution plane sent, once: ``(session_id, n)`` is
  the key, where ``n`` = 1, 2, 3, … numbers a session's events in the order this control plane
  cluster stored them (what subscribers resume ``after``); ``(session_id, stream, seq)`` is unique,
  so an event the execution plane sends again is stored once. ``data`` is the event's JSON text.
* ``session_event_counters`` — each session's last ``n``. :meth:`EventLog.append_batch` advances
  it in the transaction that stores a batch of the session's events: the row lock makes appends to
  one session, from any number of control plane instances sharing a PostgreSQL, take turns, so
  ``n`` has no gaps and no repeats (SQLite has one writer at a time anyway). The counter outlives
  the session's events (:meth:`EventLog.prune`), so ``n`` never starts again at 1.
* ``session_transcripts`` — the latest transcript of each ``(user_id, workspace, session_id)`` as
  the execution plane's ``transcript_sync`` records bring it after every turn, for answering
  while that execution plane is offline.

An event whose ``seq`` is not above the highest stored for its ``(session, stream)`` is a replay
and is dropped (the rule the control plane always had, now across restarts and instances).
:class:`EventLog` is synchronous (call it from a thread in async code).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from clawlet.controlplane.db import insert_ignoring_duplicates, metadata, now_ms, parse_ts, upsert_where
from clawlet.sql import writer_lock

READ_PAGE: Final = 500
"""Events :meth:`EventLog.read` returns at most by default."""
MAX_N: Final = 2**63 - 1
"""The largest ``n`` a BIGINT holds (a client's larger ``after`` means the same)."""

session_event_counters = sa.Table(
    "session_event_counters",
    metadata,
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("last_n", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

session_events = sa.Table(
    "session_events",
    metadata,
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("n", sa.BigInteger, primary_key=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("stream", sa.Text, nullable=False, server_default=""),
    sa.Column("seq", sa.BigInteger, nullable=True),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("session_id", "stream", "seq", name="uq_session_events_stream_seq"),
)

session_transcripts = sa.Table(
    "session_transcripts",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("workspace", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("record_id", sa.Text, nullable=False),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("message_count", sa.Integer, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)


NewEvent = tuple[str | None, int | None, Any]
"""An event to store: ``(stream, seq, data)``."""


class SessionEvent(TypedDict):
    """One SSE event of a session as subscribers get it."""

    id: int
    """The event's ``n``: 1, 2, 3, … per session (what ``after=`` refers to)."""
    session_id: str
    data: Any
    stream: str | None
    seq: int | None


@dataclass(frozen=True)
class Appended:
    """An event :meth:`EventLog.append` stored."""

    event: SessionEvent
    previous_seq: int | None
    """The highest ``seq`` stored before it for its ``(session, stream)`` (``None``: none)."""


_counter = session_event_counters
_LOCK_COUNTER: Final = (
    sa.update(_counter)
    .where(_counter.c.session_id == sa.bindparam("b_session"))
    .values(last_n=_counter.c.last_n)
    .returning(_counter.c.last_n)
)
"""Takes a session's counter row's lock (a write that changes nothing) and reads its ``last_n``."""
_ADVANCE_COUNTER: Final = (
    sa.update(_counter)
    .where(_counter.c.session_id == sa.bindparam("b_session"))
    .values(last_n=sa.bindparam("b_n"), updated_at=sa.bindparam("b_now"))
)
_HIGHEST_SEQ: Final = sa.select(sa.func.max(session_events.c.seq)).where(
    session_events.c.session_id == sa.bindparam("b_session"),
    session_events.c.stream == sa.bindparam("b_stream"),
)
_INSERT_EVENTS: Final = sa.insert(session_events)
_CREATE_COUNTER: Final = {
    "postgresql": postgresql.insert(_counter).on_conflict_do_nothing(index_elements=["session_id"]),
    "sqlite": sqlite.insert(_counter).on_conflict_do_nothing(index_elements=["session_id"]),
}
"""``append_batches``' statements, built once (SQLAlchemy then reuses their compiled form and cache
keys: building them per call cost more than running them)."""


class InvalidTranscript(ValueError):
    """A ``transcript_sync`` record without a session id, title or message list."""


class LogUnavailable(Exception):
    """The database could not take the event now (unreachable, or busy past its timeout): a
    passing trouble, unlike an event it can never store."""


class EventLog:
    """Appends, replays and prunes the event log; stores and reads transcripts."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._append_lock = writer_lock(engine)
        """SQLite: this process's appends and other busy writers take turns here
        (:func:`clawlet.sql.writer_lock`)."""

    # events

    def append(
        self, user_id: str, session_id: str, stream: str | None, seq: int | None, data: Any
    ) -> Appended | None:
        """Store one event (:meth:`append_batch` of one); ``None`` when it is a replay."""
        stored = self.append_batch(user_id, session_id, [(stream, seq, data)])
        return stored[0] if stored else None

    def append_batch(self, user_id: str, session_id: str, events: Sequence[NewEvent]) -> list[Appended]:
        """Store a session's events, in order, in ONE transaction with the session's next ``n``s;
        returns those stored (:meth:`append_batches` of one session)."""
        return self.append_batches(user_id, [(session_id, events)])[0]

    def append_batches(
        self, user_id: str, batches: Sequence[tuple[str, Sequence[NewEvent]]]
    ) -> list[list[Appended]]:
        """Store several sessions' events in ONE transaction (statements built once, each session's
        counter locked, then advanced with the others; one multi-row insert for all); returns, per
        batch, the events stored. An event whose ``(stream, seq)`` is stored already, or whose
        ``seq`` is not above the highest stored (or earlier in the batch) for its stream, is a
        replay and left out (a batch of replays alone leaves its counter as it was). Each session
        comes once. :class:`LogUnavailable` when the database cannot be written now (then none
        is stored)."""
        session_ids = sorted({session_id for session_id, _ in batches})
        if len(session_ids) != len(batches):
            raise ValueError("append_batches takes each session once")
        now = now_ms()
        stored: list[list[Appended]] = [[] for _ in batches]
        rows: list[dict[str, Any]] = []
        advanced: list[dict[str, Any]] = []
        # the counter rows are locked in session order, so two writers never wait on each other
        order = sorted(range(len(batches)), key=lambda index: batches[index][0])
        try:
            with self._append_lock, self.engine.begin() as db:
                self._create_counters(db, user_id, session_ids, now)
                for index in order:
                    session_id, events = batches[index]
                    stored[index], session_rows = self._number(db, user_id, session_id, events, now)
                    if session_rows:
                        rows.extend(session_rows)
                        advanced.append({"b_session": session_id, "b_n": session_rows[-1]["n"], "b_now": now})
                if advanced:
                    db.execute(_ADVANCE_COUNTER, advanced)
                    db.execute(_INSERT_EVENTS, rows)
        except sa.exc.OperationalError as exc:
            raise LogUnavailable(str(exc.orig)) from exc
        return stored

    def _create_counters(self, db: Connection, user_id: str, session_ids: list[str], now: int) -> None:
        """The sessions' counter rows, where missing (one statement on PostgreSQL and SQLite)."""
        values = [
            {"session_id": sid, "user_id": user_id, "last_n": 0, "updated_at": now} for sid in session_ids
        ]
        statement = _CREATE_COUNTER.get(db.dialect.name)
        if statement is None:  # another backend: one at a time, a key violation meaning "there"
            for value in values:
                insert_ignoring_duplicates(db, session_event_counters, value, ["session_id"])
        else:
            db.execute(statement, values)

    def _number(
        self, db: Connection, user_id: str, session_id: str, events: Sequence[NewEvent], now: int
    ) -> tuple[list[Appended], list[dict[str, Any]]]:
        """Give a session's new events their ``n``s inside ``db``'s transaction: the events stored
        and their rows (the caller advances the counter and inserts them)."""
        # a write before any read: it takes the counter row's lock (SQLite: the database's)
        n = int(db.execute(_LOCK_COUNTER, {"b_session": session_id}).scalar_one())
        highest: dict[str, int | None] = {}
        for key in {stream or "" for stream, seq, _ in events if seq is not None}:
            top = db.execute(_HIGHEST_SEQ, {"b_session": session_id, "b_stream": key}).scalar()
            highest[key] = None if top is None else int(top)
        stored: list[Appended] = []
        rows: list[dict[str, Any]] = []
        for stream, seq, data in events:
            key = stream or ""
            previous: int | None = None
            if seq is not None:
                previous = highest[key]
                if previous is not None and seq <= previous:
                    continue
                highest[key] = seq
            n += 1
            rows.append(
                {
                    "session_id": session_id,
                    "n": n,
                    "user_id": user_id,
                    "stream": key,
                    "seq": seq,
                    "data": json.dumps(data, ensure_ascii=False, default=str),
                    "created_at": now,
                }
            )
            event: SessionEvent = {
                "id": n,
                "session_id": session_id,
                "data": data,
                "stream": stream,
                "seq": seq,
            }
            stored.append(Appended(event, previous))
        return stored, rows

    def read(
        self, session_id: str, after: int, before: int | None = None, limit: int = READ_PAGE
    ) -> list[SessionEvent]:
        """The session's events with ``after < n`` (and ``n < before``), oldest first, at most ``limit``."""
        query = sa.select(session_events).where(
            session_events.c.session_id == session_id, session_events.c.n > min(after, MAX_N)
        )
        if before is not None:
            query = query.where(session_events.c.n < min(before, MAX_N))
        with self.engine.connect() as db:
            rows = db.execute(query.order_by(session_events.c.n).limit(limit)).all()
        return [
            {
                "id": int(row.n),
                "session_id": row.session_id,
                "data": json.loads(row.data),
                "stream": row.stream or None,
                "seq": None if row.seq is None else int(row.seq),
            }
            for row in rows
        ]

    def last_n(self, session_id: str) -> int:
        """The ``n`` of the session's newest stored event (0: none yet): its counter, which no
        pruning lowers."""
        counter = session_event_counters
        with self.engine.connect() as db:
            value = db.execute(sa.select(counter.c.last_n).where(counter.c.session_id == session_id)).scalar()
        return 0 if value is None else int(value)

    def count(self, session_id: str) -> int:
        """How many events of the session are kept."""
        with self.engine.connect() as db:
            return int(
                db.execute(
                    sa.select(sa.func.count()).where(session_events.c.session_id == session_id)
                ).scalar_one()
            )

    def prune(self, max_events: int, max_age_ms: int, now: int | None = None) -> int:
        """Keep the newest ``max_events`` events of each session, and none of a session whose
        newest event is older than ``max_age_ms``; returns how many events were deleted."""
        cutoff = (now_ms() if now is None else now) - max_age_ms
        counter = session_event_counters
        deleted = 0
        with self.engine.begin() as db:
            stale = sa.select(counter.c.session_id).where(counter.c.updated_at < cutoff)
            deleted += db.execute(
                sa.delete(session_events).where(session_events.c.session_id.in_(stale))
            ).rowcount
        with self.engine.connect() as db:
            long = db.execute(
                sa.select(counter.c.session_id, counter.c.last_n).where(
                    counter.c.last_n > max_events, counter.c.updated_at >= cutoff
                )
            ).all()
        for session_id, last_n in long:  # one short transaction per session
            with self.engine.begin() as db:
                deleted += db.execute(
                    sa.delete(session_events).where(
                        session_events.c.session_id == session_id,
                        session_events.c.n <= int(last_n) - max_events,
                    )
                ).rowcount
        return deleted

    # transcripts

    def put_transcript(self, user_id: str, record_id: str, record: Mapping[str, Any], ts: Any) -> bool:
        """Store a ``transcript_sync`` record (``{session_id, workspace, title, messages}``) as the
        session's latest transcript unless that record or a newer one is stored already; ``True``
        if it was stored. :class:`InvalidTranscript` for a record of the wrong shape."""
        session_id = record.get("session_id")
        workspace = record.get("workspace", "")
        title = record.get("title", "")
        messages = record.get("messages")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidTranscript("a transcript needs a non-empty string session_id")
        if not isinstance(workspace, str) or not isinstance(title, str):
            raise InvalidTranscript("a transcript's workspace and title are strings")
        if not isinstance(messages, list):
            raise InvalidTranscript("a transcript's messages are a list")
        now = now_ms()
        values = {
            "user_id": user_id,
            "workspace": workspace,
            "session_id": session_id,
            "record_id": record_id,
            "title": title,
            "message_count": len(messages),
            "data": json.dumps(dict(record), ensure_ascii=False, default=str),
            "ts": parse_ts(ts, now),
            "updated_at": now,
        }
        table = session_transcripts
        with self.engine.begin() as db:
            return upsert_where(
                db,
                table,
                values,
                ["user_id", "workspace", "session_id"],
                lambda new: (new.ts >= table.c.ts) & (new.record_id != table.c.record_id),
            )

    def list_transcripts(self, user_id: str, workspace: str) -> list[dict[str, Any]]:
        """``[{session_id, title, updated_at, message_count}]`` of the user's sessions in
        ``workspace``, most recently updated first (``updated_at`` in epoch seconds, as the
        local-mode session list has it)."""
        table = session_transcripts
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(table.c.session_id, table.c.title, table.c.updated_at, table.c.message_count)
                .where(table.c.user_id == user_id, table.c.workspace == workspace)
                .order_by(table.c.updated_at.desc(), table.c.session_id)
            ).all()
        return [
            {
                "session_id": row.session_id,
                "title": row.title,
                "updated_at": int(row.updated_at) / 1000,
                "message_count": int(row.message_count),
            }
            for row in rows
        ]

    def get_transcript(self, user_id: str, workspace: str, session_id: str) -> dict[str, Any] | None:
        """The latest transcript record of the user's session (as the execution plane sent it,
        plus ``updated_at`` in epoch seconds), or ``None``."""
        table = session_transcripts
        with self.engine.connect() as db:
            row = db.execute(
                sa.select(table.c.data, table.c.updated_at).where(
                    table.c.user_id == user_id,
                    table.c.workspace == workspace,
                    table.c.session_id == session_id,
                )
            ).first()
        if row is None:
            return None
        record = json.loads(row.data)
        return {**record, "updated_at": int(row.updated_at) / 1000}

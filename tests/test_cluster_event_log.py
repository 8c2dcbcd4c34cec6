"""The control plane's durable event log and transcript copies (clawlet.controlplane.event_log).

The control plane runs on a real uvicorn server (tests/test_control_plane.py's ``Harness``) with
real ``/ws/vm`` connections; the data-layer cases run on a SQLite file and on PostgreSQL
(``CLAWLET_TEST_POSTGRES_URL``, started by scripts/test; skipped without it). The end-to-end case
runs a real control plane and execution plane as processes (tests/test_cluster_faults.py's
``make_cluster``) with the scripted OpenAI-compatible model.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from websockets.exceptions import ConnectionClosed

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.cluster.protocol import (
    FF_TRANSCRIPT_SYNC,
    MAX_SEQ,
    encode,
    fire_and_forget_frame,
    heartbeat_frame,
    resume_frame,
    sse_event_frame,
)
from clawlet.config import Settings
from clawlet.controlplane.cli import ENV_EVENT_LOG_MAX_AGE_DAYS, ENV_EVENT_LOG_MAX_EVENTS, build_config
from clawlet.controlplane.db import ControlPlaneStore, now_ms
from clawlet.controlplane.event_log import (
    READ_PAGE,
    EventLog,
    InvalidTranscript,
    SessionEvent,
    session_event_counters,
)
from clawlet.controlplane.server import ControlPlane, ControlPlaneConfig, SessionNotFound, session_key
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests import test_cluster_faults as faults
from tests.support.postgres import BACKENDS, fresh_schema_url
from tests.test_control_plane import ALICE, BOB, SECRET, Harness, collect, recv_type, settle, until

llm = faults.llm
make_cluster = faults.make_cluster
WAIT = 60.0
"""Seconds a test waits for a condition (generous: the suite runs on loaded machines)."""


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if getattr(request, "param", "sqlite") == "postgresql":
        with fresh_schema_url("clawlet_eventlog_test") as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'cp' / 'controlplane.db'}"


@pytest.fixture
def log(database_url: str) -> Iterator[EventLog]:
    store = ControlPlaneStore.open(database_url)
    yield EventLog(store.engine)
    store.close()


def ids(events: list[SessionEvent]) -> list[int]:
    return [event["id"] for event in events]


async def send_events(ws: Any, session_id: str, stream: str, seqs: range | list[int]) -> None:
    for seq in seqs:
        data = {"kind": "TextDelta", "text": f"{seq}"}
        await ws.send(encode(sse_event_frame(session_id, data, seq, stream)))
    await settle(ws)


# -- the log ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_replayed_event_is_stored_once(log: EventLog, database_url: str) -> None:
    sent = [("A", 1), ("A", 2), ("A", 2), ("A", 1), ("A", 3), ("B", 1), ("A", 3), ("B", 2), ("A", 5)]
    stored = [log.append(ALICE, "s1", stream, seq, f"{stream}{seq}") for stream, seq in sent]
    assert [None if a is None else a.event["id"] for a in stored] == [1, 2, None, None, 3, 4, None, 5, 6]
    assert [None if a is None else a.previous_seq for a in stored][-1] == 3  # A5 came after A3: a gap
    # another instance on the same database knows what is stored
    other = ControlPlaneStore.open(database_url)
    try:
        again = EventLog(other.engine)
        assert again.append(ALICE, "s1", "B", 2, "B2") is None
        assert again.append(ALICE, "s1", "A", 4, "A4 late") is None  # not above A5: a replay
        appended = again.append(ALICE, "s1", "A", 6, "A6")
        assert appended is not None and appended.event["id"] == 7
    finally:
        other.close()
    events = log.read("s1", 0)
    assert [e["data"] for e in events] == ["A1", "A2", "A3", "B1", "B2", "A5", "A6"]
    assert ids(events) == [1, 2, 3, 4, 5, 6, 7]
    assert [(e["stream"], e["seq"]) for e in log.read("s1", 5, before=7)] == [("A", 5)]
    assert log.read("s1", 2**70) == [] and log.read("other", 0) == []
    # events without a stream or seq are numbered too (and never taken for replays)
    assert [log.append(ALICE, "s2", None, None, i) for i in (1, 1)] != [None, None]
    assert [(e["stream"], e["seq"], e["data"]) for e in log.read("s2", 0)] == [(None, None, 1)] * 2


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_batch_is_stored_in_one_transaction_without_its_replays(log: EventLog) -> None:
    assert log.append(ALICE, "s1", "A", 2, "A2") is not None
    statements: list[str] = []
    sa.event.listen(log.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    sent = [("A", 1), ("A", 3), ("B", 1), ("A", 3), (None, None), ("A", 4), ("B", 1), ("B", 2)]
    stored = log.append_batch(ALICE, "s1", [(stream, seq, f"{stream}{seq}") for stream, seq in sent])
    assert [(a.event["id"], a.event["data"], a.previous_seq) for a in stored] == [
        (2, "A3", 2),
        (3, "B1", None),
        (4, "NoneNone", None),
        (5, "A4", 3),
        (6, "B2", 1),
    ]
    assert sum(statement.startswith("INSERT INTO session_events") for statement in statements) == 1
    assert [e["data"] for e in log.read("s1", 0)] == ["A2", "A3", "B1", "NoneNone", "A4", "B2"]
    statements.clear()
    assert log.append_batch(ALICE, "s1", [("A", 4, "again"), ("B", 1, "again")]) == []
    assert not any(statement.startswith("INSERT INTO session_events") for statement in statements)
    assert log.append(ALICE, "s1", "A", 5, "A5") is not None and log.count("s1") == 7


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_several_sessions_are_stored_in_one_transaction(log: EventLog) -> None:
    assert log.append(ALICE, "s1", "A", 1, "A1") is not None
    assert log.append(ALICE, "s4", "A", 1, "A1") is not None
    counters = session_event_counters

    def updated_at(session_id: str) -> int:
        with log.engine.connect() as db:
            query = sa.select(counters.c.updated_at).where(counters.c.session_id == session_id)
            return int(db.execute(query).scalar_one())

    before = updated_at("s4")
    statements: list[str] = []
    commits: list[object] = []
    sa.event.listen(log.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    sa.event.listen(log.engine, "commit", lambda *args: commits.append(args))
    stored = log.append_batches(
        ALICE,
        [
            ("s3", [("A", 1, "s3-A1"), ("A", 2, "s3-A2")]),
            ("s1", [("A", 1, "again"), ("A", 2, "s1-A2")]),
            ("s4", [("A", 1, "again")]),  # replays alone: stored nothing, its counter untouched
            ("s2", [(None, None, "s2-x")]),
        ],
    )
    assert [[(a.event["id"], a.event["data"]) for a in batch] for batch in stored] == [
        [(1, "s3-A1"), (2, "s3-A2")],
        [(2, "s1-A2")],
        [],
        [(1, "s2-x")],
    ]
    assert sum(statement.startswith("INSERT INTO session_events") for statement in statements) == 1
    assert len(commits) == 1
    assert updated_at("s4") == before and log.last_n("s4") == 1
    assert [e["data"] for e in log.read("s1", 0)] == ["A1", "s1-A2"] and log.last_n("s3") == 2


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_session_twice_in_one_call_is_refused(log: EventLog) -> None:
    with pytest.raises(ValueError, match="each session once"):
        log.append_batches(ALICE, [("s1", [("A", 1, "x")]), ("s1", [("A", 2, "y")])])
    assert log.count("s1") == 0


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_writers_taking_sessions_in_opposite_orders_never_deadlock(log: EventLog) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def write(order: list[str], stream: str) -> None:
        try:
            start.wait(30)
            for seq in range(1, 31):
                log.append_batches(ALICE, [(session, [(stream, seq, seq)]) for session in order])
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=write, args=(["x", "y", "z"], "forward")),
        threading.Thread(target=write, args=(["z", "y", "x"], "backward")),
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not errors and not any(worker.is_alive() for worker in workers)
    assert [log.count(session) for session in ("x", "y", "z")] == [60, 60, 60]


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_two_control_planes_appending_to_one_session_get_distinct_gap_free_numbers(
    database_url: str, tmp_path: Path
) -> None:
    configs = [
        ControlPlaneConfig(data_dir=tmp_path / f"cp{i}", jwt_secret=SECRET, database_url=database_url)
        for i in range(2)
    ]
    planes = [ControlPlane(config) for config in configs]
    threads_per_plane, per_thread = 3, 20
    start = threading.Barrier(2 * threads_per_plane)
    numbers: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def append(plane: ControlPlane, thread: int) -> None:
        try:
            start.wait(30)
            size = 1 + 3 * thread  # batches of 1, 4, 7 events, each repeating the last one before
            for first in range(1, per_thread + 1, size):
                # every event is sent to both instances (an execution plane that reconnected to
                # the other one replays it): stored once, by whichever is first
                seqs = range(max(1, first - 1), min(first + size, per_thread + 1))
                batch = [(f"stream-{thread}", seq, [thread, seq]) for seq in seqs]
                stored = plane.event_log.append_batch(ALICE, "shared", batch)
                with lock:
                    numbers.extend(appended.event["id"] for appended in stored)
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=append, args=(plane, thread))
        for plane in planes
        for thread in range(threads_per_plane)
    ]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
        assert not errors, errors
        total = threads_per_plane * per_thread
        assert sorted(numbers) == list(range(1, total + 1))
        events = planes[1].event_log.read("shared", 0, limit=10 * total)
        assert ids(events) == list(range(1, total + 1))
        assert sorted(tuple(e["data"]) for e in events) == [
            (thread, seq) for thread in range(threads_per_plane) for seq in range(1, per_thread + 1)
        ]
        for thread in range(threads_per_plane):  # each stream's events in their order
            seqs = [e["seq"] for e in events if e["stream"] == f"stream-{thread}"]
            assert seqs == list(range(1, per_thread + 1))
    finally:
        for plane in planes:
            plane.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_retention_keeps_the_newest_events_and_drops_idle_sessions(log: EventLog) -> None:
    for seq in range(1, 13):
        log.append(ALICE, "busy", "A", seq, seq)
    for seq in range(1, 4):
        log.append(ALICE, "idle", "A", seq, seq)
        log.append(BOB, "small", "A", seq, seq)
    day = 24 * 3600 * 1000
    with log.engine.begin() as db:  # the idle session's last event was two days ago
        db.execute(
            sa.update(session_event_counters)
            .where(session_event_counters.c.session_id == "idle")
            .values(updated_at=now_ms() - 2 * day)
        )
    assert log.prune(max_events=5, max_age_ms=day) == 7 + 3
    assert ids(log.read("busy", 0)) == [8, 9, 10, 11, 12]
    assert log.read("idle", 0) == [] and ids(log.read("small", 0)) == [1, 2, 3]
    assert log.prune(max_events=5, max_age_ms=day) == 0
    # numbering goes on where it was: a client's after= stays meaningful
    appended = log.append(ALICE, "idle", "B", 1, "back")
    assert appended is not None and appended.event["id"] == 4


def test_retention_is_set_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = build_config(Settings(), tmp_path / "cp")
    assert (default.event_log_max_events, default.event_log_max_age) == (10_000, 30 * 24 * 3600)
    monkeypatch.setenv(ENV_EVENT_LOG_MAX_EVENTS, "500")
    monkeypatch.setenv(ENV_EVENT_LOG_MAX_AGE_DAYS, "0.5")
    config = build_config(Settings(), tmp_path / "cp")
    assert (config.event_log_max_events, config.event_log_max_age) == (500, 12 * 3600)
    for bad in ("0", "-3", "lots", "inf", "nan"):
        monkeypatch.setenv(ENV_EVENT_LOG_MAX_EVENTS, bad)
        with pytest.raises(SystemExit, match=f"{ENV_EVENT_LOG_MAX_EVENTS} must be a positive number"):
            build_config(Settings(), tmp_path / "cp")


def test_the_control_plane_is_configured_through_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = build_config(Settings(), tmp_path / "cp")
    assert (default.database_url, default.redis_url) == (None, None)
    assert (tmp_path / "cp" / "jwt_secret").read_text(encoding="utf-8").strip() == default.jwt_secret
    secret = "s" * 40
    database = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("CLAWLET_CP_JWT_SECRET", secret)
    monkeypatch.setenv("CLAWLET_CP_DATABASE_URL", database)
    monkeypatch.setenv("CLAWLET_REDIS_URL", "redis://127.0.0.1:6379/1")
    settings = Settings()
    config = build_config(settings, tmp_path / "cp")
    assert (config.jwt_secret, config.database_url, config.redis_url) == (
        secret,
        database,
        "redis://127.0.0.1:6379/1",
    )
    dumped = settings.model_dump(mode="json")  # what a session process or config.get is given
    assert secret not in dumped.values() and database not in dumped.values()


async def test_the_control_plane_prunes_the_log_periodically(tmp_path: Path) -> None:
    cp = await Harness(tmp_path, event_log_max_events=2, event_log_prune_interval=0.05).start()
    try:
        alice = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        await send_events(ws, "s1", "A", range(1, 6))
        assert cp.plane.event_log.count(session_key(ALICE, "s1")) in range(2, 6)
        await until(lambda: cp.plane.event_log.count(session_key(ALICE, "s1")) == 2, WAIT)
        assert ids(await collect(cp.plane.subscribe(ALICE, "s1", after=0), 2, timeout=WAIT)) == [4, 5]
    finally:
        await cp.stop()


# -- the control plane: restarts, subscriptions ------------------------------------------------------


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_events_survive_a_control_plane_restart(tmp_path: Path, database_url: str) -> None:
    cp = await Harness(tmp_path, database_url).start()
    try:
        alice = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        await send_events(ws, "s1", "A", range(1, 4))
    finally:
        await cp.stop()

    cp = await Harness(tmp_path, database_url).start()  # a new process on the same database
    try:
        again = cp.plane.issue_vm_credentials(ALICE)
        late = cp.plane.subscribe(ALICE, "s1", after=1)
        assert [(e["id"], e["seq"]) for e in await collect(late, 2, timeout=WAIT)] == [(2, 2), (3, 3)]
        with pytest.raises(SessionNotFound):  # Bob's "s1" would be Bob's own
            cp.plane.subscribe(BOB, "s1")
        # the execution plane replays what it was not sure of: stored once, the new one goes on
        ws = await cp.raw_connect(ALICE, again.token, again.ticket)
        await recv_type(ws, "init")
        await send_events(ws, "s1", "A", range(1, 5))
        assert cp.plane.duplicate_events == 3
        assert [(e["id"], e["seq"]) for e in await collect(late, 1, timeout=WAIT)] == [(4, 4)]
        assert ids(await collect(cp.plane.subscribe(ALICE, "s1", after=0), 4, timeout=WAIT)) == [1, 2, 3, 4]
    finally:
        await cp.stop()


@pytest.mark.parametrize("read_first", [True, False], ids=["log-read-before", "log-read-after"])
async def test_events_arriving_while_the_log_is_read_are_neither_lost_nor_doubled(
    tmp_path: Path, read_first: bool
) -> None:
    cp = await Harness(tmp_path).start()
    try:
        alice = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        await send_events(ws, "s1", "A", range(1, 4))

        # the subscriber's first read of the log waits until two more events were stored and
        # published; it read the log before they came (it misses them) or after (it has them too)
        real_read = cp.plane.event_log.read
        gate = threading.Event()
        reads: list[int] = []

        def read(
            session_id: str, after: int, before: int | None = None, limit: int = 500
        ) -> list[SessionEvent]:
            if reads:
                return real_read(session_id, after, before, limit)
            found = real_read(session_id, after, before, limit) if read_first else []
            reads.append(after)
            assert gate.wait(WAIT)
            return found if read_first else real_read(session_id, after, before, limit)

        cp.plane.event_log.read = read  # type: ignore[method-assign]
        sub = cp.plane.subscribe(ALICE, "s1", after=1)
        first = asyncio.create_task(collect(sub, 4, timeout=WAIT))
        await until(lambda: reads, WAIT)
        await send_events(ws, "s1", "A", range(4, 6))
        gate.set()
        events = await first
        assert [(e["id"], e["seq"]) for e in events] == [(2, 2), (3, 3), (4, 4), (5, 5)]
        await send_events(ws, "s1", "A", [6])
        assert ids(await collect(sub, 1, timeout=WAIT)) == [6]
    finally:
        await cp.stop()


@pytest.mark.slow
async def test_a_long_log_is_replayed_a_page_at_a_time(cp_harness: Harness) -> None:
    cp = cp_harness
    ws = await cp.raw_connect(ALICE, (alice := cp.user(ALICE)).token, alice.ticket)
    await recv_type(ws, "init")
    await cp.plane.start_session(ALICE, "s1", {})
    total = 2 * READ_PAGE + 7

    def fill() -> None:
        for seq in range(1, total + 1):
            cp.plane.event_log.append(ALICE, session_key(ALICE, "s1"), "A", seq, seq)

    await asyncio.to_thread(fill)
    sub = cp.plane.subscribe(ALICE, "s1", after=3)
    await send_events(ws, "s1", "A", [total + 1])  # live, while the log is still being read
    events = await collect(sub, total - 2, timeout=WAIT)
    assert ids(events) == list(range(4, total + 2))


async def test_an_event_stored_by_another_instance_is_read_from_the_log(tmp_path: Path) -> None:
    cp = await Harness(tmp_path).start()
    other = ControlPlaneStore.open(cp.config.resolved_database_url)
    try:
        alice = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        sub = cp.plane.subscribe(ALICE, "s1")
        await send_events(ws, "s1", "A", [1])
        # n = 2 arrives at another instance (an execution plane of another process that
        # reconnected there); this one is told only of n = 3
        other_log = EventLog(other.engine)
        assert other_log.append(ALICE, session_key(ALICE, "s1"), "B", 1, {"kind": "TextDelta", "text": "B1"})
        await send_events(ws, "s1", "A", [2])
        events = await collect(sub, 3, timeout=WAIT)
        assert [(e["id"], e["stream"], e["seq"]) for e in events] == [(1, "A", 1), (2, "B", 1), (3, "A", 2)]
    finally:
        other.close()
        await cp.stop()


async def test_an_event_the_database_cannot_take_now_is_sent_again(cp_harness: Harness) -> None:
    cp = cp_harness
    client = cp.client(cp.user(ALICE))
    await client.connect()
    await cp.plane.start_session(ALICE, "s1", {})
    sub = cp.plane.subscribe(ALICE, "s1")
    failures: list[str] = []

    def busy_once(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        inserting = statement.startswith("INSERT INTO session_events") and '"second"' in str(parameters)
        if inserting and not failures:  # the database is busy once, past its timeout
            failures.append(statement)
            raise sqlite3.OperationalError("database is locked")

    sa.event.listen(cp.plane.store.engine, "before_cursor_execute", busy_once)
    for data in ("first", "second", "third"):
        await client.send_sse_event("s1", data)
    # the link was closed rather than the event acknowledged: the client reconnects and replays
    events = await collect(sub, 3, timeout=WAIT)
    assert [(e["data"], e["seq"]) for e in events] == [("first", 1), ("second", 2), ("third", 3)]
    assert len(failures) == 1 and client.connects == 2
    assert [e["data"] for e in cp.plane.event_log.read(session_key(ALICE, "s1"), 0)] == [
        "first",
        "second",
        "third",
    ]


async def test_queued_events_are_stored_in_few_transactions_and_acknowledged_after(
    cp_harness: Harness,
) -> None:
    cp = cp_harness
    alice = cp.user(ALICE)
    ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    await recv_type(ws, "init")
    await cp.plane.start_session(ALICE, "s1", {})
    inserts: list[int] = []
    release = threading.Event()

    def hold_the_first(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("INSERT INTO session_events"):
            inserts.append(len(parameters) if isinstance(parameters, list) else 1)
            if len(inserts) == 1:
                release.wait(WAIT)  # the database is slow: the link's frames queue meanwhile

    sa.event.listen(cp.plane.store.engine, "before_cursor_execute", hold_the_first)
    try:
        total = 100
        for seq in range(1, total + 1):
            await ws.send(encode(sse_event_frame("s1", f"e{seq}", seq, "A")))
        await ws.send(encode(heartbeat_frame(ack_id="after-the-events")))
        # the reader does not wait for the database: another frame is answered meanwhile
        await ws.send(encode(resume_frame([])))
        await recv_type(ws, "resume_response", timeout=WAIT)
        await until(lambda: len(inserts) == 1, WAIT)  # held: every event queued or in that batch
    finally:
        release.set()
    ack = await recv_type(ws, "heartbeat", timeout=WAIT)
    assert ack["id"] == "after-the-events"
    # acknowledged after every event before it was stored: the writer's first batch (whatever was
    # queued when it woke), then all the others at once
    assert sum(inserts) == total and len(inserts) <= 2
    events = cp.plane.event_log.read(session_key(ALICE, "s1"), 0)
    assert [(e["id"], e["data"]) for e in events] == [(n, f"e{n}") for n in range(1, total + 1)]


async def test_a_heartbeat_after_an_event_the_database_refused_is_never_acknowledged(
    cp_harness: Harness,
) -> None:
    cp = cp_harness
    alice = cp.user(ALICE)
    ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    await recv_type(ws, "init")
    await cp.plane.start_session(ALICE, "s1", {})

    def busy(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO session_events"):
            raise sqlite3.OperationalError("database is locked")

    sa.event.listen(cp.plane.store.engine, "before_cursor_execute", busy)
    await ws.send(encode(sse_event_frame("s1", "lost", 1, "A")))
    await ws.send(encode(heartbeat_frame(ack_id="after-the-lost-event")))
    with pytest.raises(ConnectionClosed):  # closed, never acknowledged
        while True:
            assert (await recv_type(ws, "heartbeat", timeout=WAIT)).get("id") != "after-the-lost-event"

    def heartbeats_waiting() -> list[asyncio.Task[Any]]:
        return [t for t in cp.plane._tasks if "_on_heartbeat" in repr(t.get_coro())]

    await until(lambda: not heartbeats_waiting(), WAIT)  # nothing left waiting for the writer


async def test_an_event_whose_seq_no_bigint_holds_is_refused(cp_harness: Harness) -> None:
    cp = cp_harness
    alice = cp.user(ALICE)
    ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    await recv_type(ws, "init")
    await cp.plane.start_session(ALICE, "s1", {})
    await ws.send(encode(sse_event_frame("s1", "too far", MAX_SEQ + 1, "A")))
    refused = await recv_type(ws, "error")
    assert "positive 64-bit integer" in refused["error"]["message"]
    await send_events(ws, "s1", "A", [MAX_SEQ])  # the link is still up; the largest seq is stored
    assert [e["seq"] for e in cp.plane.event_log.read(session_key(ALICE, "s1"), 0)] == [MAX_SEQ]


# -- transcripts ------------------------------------------------------------------------------------


def transcript(session_id: str, title: str, count: int, workspace: str = "") -> dict[str, Any]:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(count)]
    return {"session_id": session_id, "workspace": workspace, "title": title, "messages": messages}


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_transcripts_keep_the_latest_per_user_workspace_and_session(log: EventLog) -> None:
    assert log.put_transcript(ALICE, "r1", transcript("s1", "Tea", 2), "2026-01-01T00:00:01Z")
    assert not log.put_transcript(ALICE, "r1", transcript("s1", "Tea", 2), "2026-01-01T00:00:01Z")  # again
    assert log.put_transcript(ALICE, "r2", transcript("s1", "Tea time", 4), "2026-01-01T00:00:02Z")
    assert not log.put_transcript(ALICE, "r0", transcript("s1", "old", 1), "2026-01-01T00:00:00Z")  # late
    assert log.put_transcript(ALICE, "r3", transcript("s2", "Other", 2), "2026-01-01T00:00:03Z")
    assert log.put_transcript(ALICE, "r4", transcript("s1", "Elsewhere", 6, "work"), "2026-01-01T00:00:04Z")
    assert log.put_transcript(BOB, "r1", transcript("s1", "Bob's", 8), "2026-01-01T00:00:05Z")

    listed = log.list_transcripts(ALICE, "")
    assert [(t["session_id"], t["title"], t["message_count"]) for t in listed] == [
        ("s2", "Other", 2),
        ("s1", "Tea time", 4),
    ]
    assert all(isinstance(t["updated_at"], float) for t in listed)
    assert [t["title"] for t in log.list_transcripts(ALICE, "work")] == ["Elsewhere"]
    assert [t["title"] for t in log.list_transcripts(BOB, "")] == ["Bob's"]
    assert log.list_transcripts(BOB, "work") == []
    kept = log.get_transcript(ALICE, "", "s1")
    assert kept is not None and kept["title"] == "Tea time" and len(kept["messages"]) == 4
    assert kept == {**transcript("s1", "Tea time", 4), "updated_at": kept["updated_at"]}
    assert log.get_transcript(ALICE, "", "nope") is None and log.get_transcript(BOB, "work", "s1") is None
    bad_records: list[dict[str, Any]] = [
        {"title": "x", "messages": []},
        {"session_id": "s", "messages": "no"},
        {"session_id": "s", "title": 3, "messages": []},
    ]
    for bad in bad_records:
        with pytest.raises(InvalidTranscript):
            log.put_transcript(ALICE, "bad", bad, None)


async def test_transcript_sync_records_are_stored_for_their_user_only(cp_harness: Harness) -> None:
    cp = cp_harness
    alice, bob = cp.user(ALICE), cp.user(BOB)
    client = cp.client(alice)
    await client.connect()
    await cp.plane.start_session(ALICE, "sa", {})
    await client.fire_and_forget("sa", FF_TRANSCRIPT_SYNC, **transcript("sa", "Alice's chat", 2))
    await until(lambda: cp.plane.event_log.get_transcript(ALICE, "", "sa"), WAIT)

    # Bob's execution plane: a record for Alice's session is ignored; one for a session of his own
    # (even with the same local id) is his only; a malformed one is dropped, the link stays up
    ws = await cp.raw_connect(BOB, bob.token, bob.ticket)
    await recv_type(ws, "init")
    for record_id, frame_session, record in [
        ("x1", "sa", transcript("sa", "hijack", 9)),
        ("x2", "bob-1", {"session_id": "sa"}),
        ("x3", "bob-1", transcript("sa", "Bob's", 1)),
    ]:
        await ws.send(encode(fire_and_forget_frame(record_id, frame_session, FF_TRANSCRIPT_SYNC, record)))
    await settle(ws)
    kept = cp.plane.event_log.get_transcript(ALICE, "", "sa")
    assert kept is not None and kept["title"] == "Alice's chat"
    assert [t["title"] for t in cp.plane.event_log.list_transcripts(BOB, "")] == ["Bob's"]
    assert [t["title"] for t in cp.plane.event_log.list_transcripts(ALICE, "")] == ["Alice's chat"]


@pytest.fixture
async def cp_harness(tmp_path: Path) -> Any:
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.stop()


# -- end to end -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_events_of_a_real_turn_land_in_the_log(
    make_cluster: Callable[..., LocalCluster], llm: ScriptedOpenAIServer
) -> None:
    cluster = make_cluster(["alice"], exec_env=faults.llm_env(llm))
    store = faults.open_store(cluster)
    try:
        assert faults.names(faults.chat(cluster, "alice", "python: print('logged')", "s1"))[-1] == "title"
        remote_id = session_key("alice", "s1")
        log = EventLog(store.engine)

        def finished() -> list[SessionEvent]:
            events = log.read(remote_id, 0)
            return events if any(e["data"].get("kind") == "RunFinished" for e in events) else []

        events = faults.wait_until(finished, "the turn's events in the control plane's log")
        kinds = [e["data"]["kind"] for e in events]
        assert {"RunStarted", "ToolStart", "ToolEnd", "TextDelta", "RunFinished"} <= set(kinds)
        assert ids(events) == list(range(1, len(events) + 1))
        assert [e["seq"] for e in events] == sorted({e["seq"] for e in events})
        tool_end = next(e["data"] for e in events if e["data"]["kind"] == "ToolEnd")
        assert "logged" in str(tool_end)
    finally:
        store.close()

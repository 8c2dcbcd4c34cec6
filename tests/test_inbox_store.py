"""The inbox data layer on a real database: schema, migrations, ULIDs, and the whole transition
table (every allowed and every refused change, refused ones changing nothing).

Every test that takes ``repo`` runs on a SQLite file and on PostgreSQL (tests/support/postgres.py:
the server ``scripts/test`` starts, or ``CLAWLET_TEST_POSTGRES_URL``), each test in a fresh schema
that is dropped afterwards. Without a server the PostgreSQL cases are skipped.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from clawlet.inbox.db import VERSION_TABLE, create_db_engine, current_revision, migrate, tasks
from clawlet.inbox.ids import CROCKFORD, new_ulid, ulid_time_ms
from clawlet.inbox.models import Message, Task, title_from
from clawlet.inbox.repository import InboxRepository, TaskNotFound
from clawlet.inbox.states import (
    STATUS_PRIORITY,
    STATUSES,
    VALID_TRANSITIONS,
    InvalidTransition,
    TaskStatus,
)
from tests.support.postgres import BACKENDS, fresh_schema_url, requires_postgres

SEED_TABLE = {
    "pending": ["running", "cancelled"],
    "running": ["completed", "failed", "waiting", "cancelled"],
    "completed": ["running"],
    "failed": ["running"],
    "waiting": ["running", "cancelled"],
    "cancelled": [],
}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "agent_channel_v2.db"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL whose connections work in a new, empty schema (dropped with everything in it after)."""
    with fresh_schema_url("clawlet_test") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, db_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{db_path}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def repo(database_url: str) -> Iterator[InboxRepository]:
    engine = create_db_engine(database_url)
    migrate(engine)
    yield InboxRepository(engine)
    engine.dispose()


def make_task(
    repo: InboxRepository, status: TaskStatus = "pending", *, agent: str = "main", at: int = 1000
) -> Task:
    task = Task(
        new_ulid(), agent, "t", False, status, at, at, at if status in ("completed", "failed") else None
    )
    repo.create_task(task, Message(new_ulid(), task.id, "user", "hello", at))
    return task


def row(repo: InboxRepository, task_id: str) -> tuple[object, ...]:
    with repo.engine.connect() as conn:
        found = conn.execute(sa.select(tasks).where(tasks.c.id == task_id)).first()
    assert found is not None
    return tuple(found)


def test_sqlite_schema_matches_the_seed_with_wal_foreign_keys_and_migrations(db_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{db_path}")
    migrate(engine)
    assert current_revision(engine) == "0001"
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = {r[1]: (r[2], r[3]) for r in conn.execute("PRAGMA table_info(tasks)")}
    assert columns == {
        "id": ("TEXT", 1),  # NOT NULL, stricter than SQLite's PRIMARY KEY alone
        "agent_id": ("TEXT", 1),
        "title": ("TEXT", 1),
        "title_locked": ("INTEGER", 1),
        "status": ("TEXT", 1),
        "created_at": ("BIGINT", 1),
        "updated_at": ("BIGINT", 1),
        "completed_at": ("BIGINT", 0),
    }
    indexes = {r[1] for r in conn.execute("PRAGMA index_list(tasks)")} | {
        r[1] for r in conn.execute("PRAGMA index_list(messages)")
    }
    assert {"idx_tasks_updated", "idx_tasks_status", "idx_tasks_agent", "idx_messages_task"} <= indexes
    fks = conn.execute("PRAGMA foreign_key_list(messages)").fetchall()
    assert [(fk[2], fk[3], fk[4], fk[6]) for fk in fks] == [("tasks", "task_id", "id", "CASCADE")]
    conn.close()
    # migrating again is a no-op, and the pragmas hold on every pooled connection
    migrate(engine)
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    engine.dispose()


@pytest.mark.slow
@requires_postgres
def test_postgresql_schema_matches_the_seed_with_cascade_and_migrations(postgres_url: str) -> None:
    engine = create_db_engine(postgres_url)
    try:
        migrate(engine)
        assert current_revision(engine) == "0001"
        with engine.connect() as conn:
            schema = conn.exec_driver_sql("SELECT current_schema()").scalar()
            assert isinstance(schema, str) and schema.startswith("clawlet_test_")  # not public
            where = {"schema": schema}
            tables = conn.execute(
                sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :schema"),
                where,
            ).scalars()
            assert set(tables) == {"tasks", "messages", VERSION_TABLE}
            columns = {
                (r.table_name, r.column_name): (r.data_type, r.is_nullable, r.column_default)
                for r in conn.execute(
                    sa.text(
                        "SELECT table_name, column_name, data_type, is_nullable, column_default"
                        " FROM information_schema.columns WHERE table_schema = :schema"
                        " AND table_name IN ('tasks', 'messages')"
                    ),
                    where,
                )
            }
            assert columns == {
                ("tasks", "id"): ("text", "NO", None),
                ("tasks", "agent_id"): ("text", "NO", "'main'::text"),
                ("tasks", "title"): ("text", "NO", None),
                ("tasks", "title_locked"): ("integer", "NO", "0"),
                ("tasks", "status"): ("text", "NO", "'pending'::text"),
                ("tasks", "created_at"): ("bigint", "NO", None),
                ("tasks", "updated_at"): ("bigint", "NO", None),
                ("tasks", "completed_at"): ("bigint", "YES", None),
                ("messages", "id"): ("text", "NO", None),
                ("messages", "task_id"): ("text", "NO", None),
                ("messages", "sender_type"): ("text", "NO", None),
                ("messages", "content"): ("text", "NO", None),
                ("messages", "timestamp"): ("bigint", "NO", None),
            }
            indexes: dict[str, str] = dict(
                conn.execute(
                    sa.text("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = :schema"),
                    where,
                ).all()
            )
            definitions = {name: definition.split(" USING ")[1] for name, definition in indexes.items()}
            assert definitions == {
                "tasks_pkey": "btree (id)",
                "messages_pkey": "btree (id)",
                "idx_tasks_updated": "btree (updated_at DESC)",
                "idx_tasks_status": "btree (status)",
                "idx_tasks_agent": "btree (agent_id, updated_at DESC)",
                "idx_messages_task": 'btree (task_id, "timestamp")',
                f"{VERSION_TABLE}_pkc": "btree (version_num)",
            }
            fks = conn.execute(
                sa.text(
                    "SELECT kcu.table_name, kcu.column_name, ccu.table_name, ccu.column_name,"
                    " rc.delete_rule"
                    " FROM information_schema.referential_constraints rc"
                    " JOIN information_schema.key_column_usage kcu"
                    "   ON kcu.constraint_schema = rc.constraint_schema"
                    "  AND kcu.constraint_name = rc.constraint_name"
                    " JOIN information_schema.constraint_column_usage ccu"
                    "   ON ccu.constraint_schema = rc.unique_constraint_schema"
                    "  AND ccu.constraint_name = rc.unique_constraint_name"
                    " WHERE rc.constraint_schema = :schema"
                ),
                where,
            ).all()
            assert [tuple(fk) for fk in fks] == [("messages", "task_id", "tasks", "id", "CASCADE")]
            recorded = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()
            assert list(recorded) == ["0001"]
        migrate(engine)  # migrating again is a no-op
        assert current_revision(engine) == "0001"
    finally:
        engine.dispose()


@pytest.mark.slow
@requires_postgres
def test_a_hosted_style_postgres_url_is_accepted(postgres_url: str) -> None:
    url = make_url(postgres_url)
    for drivername in ("postgres", "postgresql"):  # DATABASE_URL as hosting platforms write it
        engine = create_db_engine(url.set(drivername=drivername).render_as_string(hide_password=False))
        try:
            assert (engine.dialect.name, engine.dialect.driver) == ("postgresql", "psycopg")
            migrate(engine)
            assert current_revision(engine) == "0001"
        finally:
            engine.dispose()


def test_values_round_trip_with_millisecond_times_unicode_and_flags(repo: InboxRepository) -> None:
    at = 1_795_000_000_123  # epoch milliseconds need a BIGINT
    task = Task(new_ulid(), "travel", "帮我查快递", False, "pending", at, at, None)
    repo.create_task(task, Message(new_ulid(), task.id, "user", "帮我查快递，单号是 SF1234567890123", at))
    assert repo.require_task(task.id) == task
    renamed = repo.rename_task(task.id, "快递 ✓", at + 1)
    assert (renamed.title, renamed.title_locked, renamed.updated_at) == ("快递 ✓", True, at + 1)
    assert isinstance(renamed.title_locked, bool) and isinstance(renamed.created_at, int)
    done = repo.transition(task.id, "running", at + 2)
    done = repo.transition(task.id, "completed", at + 3)
    assert done == repo.require_task(task.id)
    assert (done.status, done.completed_at, done.title_locked) == ("completed", at + 3, True)
    [message] = repo.list_messages(task.id)
    assert message.content.endswith("SF1234567890123") and message.timestamp == at
    assert repo.last_user_message(task.id) == message
    with pytest.raises(TaskNotFound):
        repo.rename_task("01NOPE", "x", at)


def race_to_running(repo: InboxRepository, task_id: str, racers: int) -> tuple[list[str], list[str]]:
    """``racers`` threads try ``task_id`` -> running at the same moment: (who won, what the rest saw)."""
    barrier = threading.Barrier(racers)
    won: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def attempt() -> None:
        barrier.wait()
        try:
            changed = repo.transition(task_id, "running", 7000)
        except InvalidTransition as error:
            with lock:
                refused.append(error.current)
        else:
            with lock:
                won.append(changed.status)

    threads = [threading.Thread(target=attempt) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won, refused


def test_concurrent_transitions_let_exactly_one_win(repo: InboxRepository) -> None:
    for _ in range(3):
        task = make_task(repo, "pending")
        won, refused = race_to_running(repo, task.id, 8)
        assert won == ["running"] and refused == ["running"] * 7  # running -> running is refused
        assert repo.require_task(task.id).status == "running"


def test_deleting_a_task_cascades_to_its_messages(repo: InboxRepository) -> None:
    task = make_task(repo)
    repo.add_message(Message(new_ulid(), task.id, "agent", "hi", 2000))
    assert len(repo.list_messages(task.id)) == 2
    assert repo.delete_task(task.id) is True
    assert repo.list_messages(task.id) == []
    assert repo.delete_task(task.id) is False
    with pytest.raises(sa.exc.IntegrityError):
        repo.add_message(Message(new_ulid(), task.id, "agent", "orphan", 3000))


def test_ulids_are_26_crockford_characters_and_monotonic_across_threads() -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        made = [new_ulid() for _ in range(2000)]
        with lock:
            ids.extend(made)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 8000
    assert all(len(value) == 26 and set(value) <= set(CROCKFORD) for value in ids)
    same_ms = [new_ulid(now_ms=1_700_000_000_000) for _ in range(50)]
    assert same_ms == sorted(same_ms) and len(set(same_ms)) == 50
    assert ulid_time_ms(new_ulid(now_ms=1_795_000_000_123)) >= 1_795_000_000_123


def test_the_transition_table_is_the_seeds() -> None:
    assert {status: sorted(targets) for status, targets in VALID_TRANSITIONS.items()} == {
        status: sorted(targets) for status, targets in SEED_TABLE.items()
    }


@pytest.mark.parametrize("current", STATUSES)
@pytest.mark.parametrize("target", STATUSES)
def test_every_transition_is_allowed_or_refused_as_the_table_says(
    repo: InboxRepository, current: TaskStatus, target: TaskStatus
) -> None:
    task = make_task(repo, current)
    before = row(repo, task.id)
    if target in SEED_TABLE[current]:
        changed = repo.transition(task.id, target, 5000)
        assert changed.status == target and changed.updated_at == 5000
        assert repo.require_task(task.id) == changed
        if target in ("completed", "failed", "cancelled"):
            assert changed.completed_at == 5000
        else:
            assert changed.completed_at is None
    else:
        with pytest.raises(InvalidTransition) as raised:
            repo.transition(task.id, target, 5000)
        assert (raised.value.current, raised.value.target) == (current, target)
        assert current in str(raised.value) and target in str(raised.value)
        assert row(repo, task.id) == before  # nothing changed


def test_a_refused_follow_up_saves_no_message(repo: InboxRepository) -> None:
    task = make_task(repo, "cancelled")
    with pytest.raises(InvalidTransition):
        repo.add_message_and_transition(
            Message(new_ulid(), task.id, "user", "again", 6000), "running", 6000, only_from=("completed",)
        )
    assert [m.content for m in repo.list_messages(task.id)] == ["hello"]
    with pytest.raises(TaskNotFound):
        repo.transition("01NOPE", "running", 1)


def test_list_orders_by_status_priority_then_most_recently_updated(repo: InboxRepository) -> None:
    made = []
    order: list[TaskStatus] = ["cancelled", "completed", "running", "failed", "pending", "waiting"]
    for index, status in enumerate(order * 2):
        made.append(make_task(repo, status, agent="main" if index % 2 else "travel", at=1000 + index))
    listed = repo.list_tasks(limit=100)
    assert [STATUS_PRIORITY[t.status] for t in listed] == sorted(STATUS_PRIORITY[t.status] for t in made)
    for status in STATUSES:
        times = [t.updated_at for t in listed if t.status == status]
        assert times == sorted(times, reverse=True)
    assert [t.status for t in listed[:2]] == ["running", "running"]
    assert all(t.agent_id == "travel" for t in repo.list_tasks(agent_id="travel"))
    assert {t.status for t in repo.list_tasks(statuses=["running", "waiting"])} == {"running", "waiting"}
    assert len(repo.list_tasks(limit=3)) == 3
    assert repo.count_by_agent() == {"main": 6, "travel": 6}


def test_titles_are_the_first_20_characters_of_the_first_line() -> None:
    assert title_from("帮我查快递，单号是 SF1234567890123，谢谢你") == "帮我查快递，单号是 SF12345678"
    assert title_from("\n\n  first   line here  \nsecond") == "first line here"
    assert title_from("a" * 50) == "a" * 20

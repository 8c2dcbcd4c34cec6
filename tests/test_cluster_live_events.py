"""A session's events reach its subscribers on every control-plane instance live
(clawlet.controlplane.event_feed): the instance holding the execution plane stores them and
announces them on the broker; another instance's subscribers read them from the shared log.

Two control planes share a real PostgreSQL (``CLAWLET_TEST_POSTGRES_URL``) and a real Redis
(``CLAWLET_TEST_REDIS_URL``), both started by scripts/test; without either these cases are skipped.
Each case uses a user id of its own, so tests sharing the Redis server never see each other's
presence records or channels. The single-instance case runs on SQLite with the in-process broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from clawlet.controlplane.db import ControlPlaneStore
from clawlet.controlplane.event_log import EventLog, SessionEvent
from clawlet.controlplane.seed_events import seed_event
from clawlet.controlplane.server import session_key
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests.conftest import free_port
from tests.support.postgres import SKIP_REASON as NO_POSTGRES
from tests.support.postgres import fresh_schema_url
from tests.support.redis import SHARED_REDIS_URL
from tests.test_cluster_event_log import send_events
from tests.test_cluster_faults import EventStream, gated_code, is_type, llm_env, scripted_reply, wait_until
from tests.test_cluster_scaleout import ChatStream, Scaled
from tests.test_control_plane import ALICE, Harness, collect, recv_type, until

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

NO_REDIS = "" if SHARED_REDIS_URL else "Redis not configured: run scripts/test or set CLAWLET_TEST_REDIS_URL"
SKIP_REASON = NO_POSTGRES or NO_REDIS
requires_postgres_and_redis = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)
WAIT = 60.0
"""Seconds any awaited condition may take (generous: the suite runs on a loaded machine)."""


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_schema_url("clawlet_live_events") as url:
        yield url


@contextlib.asynccontextmanager
async def two_instances(
    tmp_path: Path, database_url: str, catch_up: float
) -> AsyncIterator[tuple[Harness, Harness]]:
    """Instances A and B on one database and one Redis, looking at the log's counter by themselves
    after ``catch_up`` seconds without a notice."""
    options: dict[str, Any] = {"redis_url": SHARED_REDIS_URL, "event_catch_up": catch_up}
    a = await Harness(tmp_path / "a", database_url, **options).start()
    b = await Harness(tmp_path / "b", database_url, **options).start()
    try:
        yield a, b
    finally:
        await b.stop()
        await a.stop()


@pytest.fixture
async def pair(tmp_path: Path, database_url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    """A and B where only the broker's notices make events reach the other instance."""
    async with two_instances(tmp_path, database_url, catch_up=3600.0) as instances:
        yield instances


async def connected_session(a: Harness) -> tuple[str, ClientConnection]:
    """A new user whose execution plane (a raw ``/ws/vm`` socket) is on ``a``, with session ``s1``."""
    user = f"{ALICE}-{uuid.uuid4().hex[:8]}"
    credentials = a.user(user)
    ws = await a.raw_connect(user, credentials.token, credentials.ticket)
    await recv_type(ws, "init")
    await a.plane.start_session(user, "s1", {})
    return user, ws


def id_seq(events: list[SessionEvent]) -> list[tuple[int, int | None]]:
    return [(event["id"], event["seq"]) for event in events]


async def collect_to_end(subscription: AsyncIterator[SessionEvent]) -> list[SessionEvent]:
    """What ``subscription`` still yields until it ends (within ``WAIT``)."""
    events: list[SessionEvent] = []

    async def run() -> None:
        async for event in subscription:
            events.append(event)

    await asyncio.wait_for(run(), WAIT)
    return events


@requires_postgres_and_redis
async def test_events_stored_by_one_instance_reach_the_other_instances_subscribers_live(
    pair: tuple[Harness, Harness],
) -> None:
    a, b = pair
    user, ws = await connected_session(a)
    await send_events(ws, "s1", "A", [1, 2])  # before anyone listens on B

    live = b.plane.subscribe(user, "s1")  # from now on
    replay = b.plane.subscribe(user, "s1", after=0)  # everything
    await live.ready()
    await replay.ready()
    # batch after batch, each delivered on B before the next one is produced (seq 9 never comes:
    # a gap in the execution plane's seqs, not in n)
    n = 2
    for batch in ([3], [4, 5, 6], [7, 8], [10], list(range(11, 31))):
        await send_events(ws, "s1", "A", batch)
        expected = [(n + i + 1, seq) for i, seq in enumerate(batch)]
        n += len(batch)
        assert id_seq(await collect(live, len(batch), timeout=WAIT)) == expected
    assert id_seq(await collect(replay, n, timeout=WAIT)) == [
        (i + 1, seq) for i, seq in enumerate([1, 2, 3, 4, 5, 6, 7, 8, 10, *range(11, 31)])
    ]

    # stopping the session on A ends its subscriptions on B, after the events the log holds
    await send_events(ws, "s1", "A", [31])
    await a.plane.stop_session(user, "s1")
    assert id_seq(await collect_to_end(live)) == [(n + 1, 31)]
    assert id_seq(await collect_to_end(replay)) == [(n + 1, 31)]
    assert session_key(user, "s1") not in b.plane._sessions
    watching = lambda: [t for t in b.plane._tasks if t.get_name().startswith("control-plane-watch")]  # noqa: E731
    await until(lambda: not watching(), WAIT)  # B no longer listens on the session's channel


@requires_postgres_and_redis
async def test_a_lost_notice_is_made_up_for_from_the_log(tmp_path: Path, database_url: str) -> None:
    async with two_instances(tmp_path, database_url, catch_up=0.2) as (a, b):
        user, ws = await connected_session(a)
        live = b.plane.subscribe(user, "s1")
        await live.ready()
        a.plane.notices.stored = lambda session_id, n: None  # type: ignore[method-assign]
        await send_events(ws, "s1", "A", [1, 2, 3])  # stored on A, announced to nobody
        assert id_seq(await collect(live, 3, timeout=WAIT)) == [(1, 1), (2, 2), (3, 3)]


# -- end to end: the seed-001 events edge on the instance that does not hold the execution plane ----


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
def instances(tmp_path: Path, database_url: str, llm: ScriptedOpenAIServer) -> Iterator[tuple[Scaled, str]]:
    """``clawlet control-plane serve`` A and B as processes on one database and one Redis, and a
    user's ``clawlet exec-plane`` connected to A (its credentials name A's URL); the user's id."""
    user = f"carol-{uuid.uuid4().hex[:8]}"
    ports = {"a": free_port(), "b": free_port()}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CLAWLET_")},
        "CLAWLET_HOME": str(tmp_path / "home"),
        "CLAWLET_CP_DATABASE_URL": database_url,
        "CLAWLET_REDIS_URL": SHARED_REDIS_URL,
        "CLAWLET_CP_JWT_SECRET": secrets.token_hex(32),
    }
    cluster = Scaled(tmp_path, env, f"http://127.0.0.1:{ports['a']}", ports=ports, database_url=database_url)
    cluster.redis_url = SHARED_REDIS_URL
    try:
        cluster.tokens[user] = cluster.clawlet("add-user", user).strip().splitlines()[-1]
        cluster.start_instance("a")
        cluster.start_instance("b")
        exported = cluster.clawlet("vm-credentials", user)
        credentials = dict(line.split("=", 1) for line in exported.splitlines() if "=" in line)
        cluster.spawn(
            "exec-plane",
            [sys.executable, "-m", "clawlet", "exec-plane", "--state-dir", str(tmp_path / "machine")],
            {**credentials, **llm_env(llm)},
        )
        wait_until(lambda: cluster.holder(user) == "a", "the execution plane to connect to A")
        yield cluster, user
    finally:
        cluster.stop()


def seed_ids(database_url: str, user: str, session_id: str) -> list[str]:
    """The SSE ids the events edge gives the session's logged events (those with a seed name)."""
    store = ControlPlaneStore.open(database_url)
    try:
        events = EventLog(store.engine).read(session_key(user, session_id), 0, limit=100_000)
    finally:
        store.close()
    return [str(event["id"]) for event in events if seed_event(event["data"]) is not None]


@requires_postgres_and_redis
def test_the_events_edge_of_the_other_instance_streams_a_turn_live(
    instances: tuple[Scaled, str], database_url: str
) -> None:
    cluster, user = instances
    token = cluster.tokens[user]
    url = {name: f"http://127.0.0.1:{cluster.ports[name]}" for name in ("a", "b")}
    first = ChatStream(f"{url['a']}/api/chat", token, "hello", "s1")  # the session exists from now on
    first.run()
    assert first.status == 200 and "done" in first.names(), first.events

    on = {name: EventStream(Edge(url[name], {user: token}), user, "s1") for name in ("a", "b")}  # type: ignore[arg-type]
    # both streams have read the log: whatever comes next, comes live
    wait_until(
        lambda: on["a"].ids == on["b"].ids == seed_ids(database_url, user, "s1"), "the first turn on A and B"
    )
    gate = "gate-live"
    turn = ChatStream(f"{url['b']}/api/chat", token, "python: " + gated_code(gate, "live-输出-7"), "s1")
    turn.start()
    on["b"].wait_for(is_type("tool_call_start", tool_name="python_repl"), "the tool's start on B")
    # the tool waits for the gate: nothing more is produced, and B has every event so far, once
    wait_until(
        lambda: on["b"].ids == seed_ids(database_url, user, "s1"),
        "B's stream to hold every logged event so far",
    )
    (cluster.root / "machine" / "home" / "workspace" / gate).touch()
    done = on["b"].wait_for(
        lambda e: e.get("type") == "execution_complete" and "live-输出-7" in e["content"],
        "the turn's end on B",
    )
    turn.join(WAIT)
    assert turn.status == 200 and "done" in turn.names(), turn.events
    wait_until(lambda: on["a"].ids == on["b"].ids, "A's stream to have the same events")
    assert on["b"].ids == seed_ids(database_url, user, "s1")
    assert on["b"].snapshot() == on["a"].snapshot()
    numbers = [int(n) for n in on["b"].ids]
    assert numbers == sorted(set(numbers)), numbers
    tool_end = next(e for e in on["b"].snapshot() if e["type"] == "tool_call_complete")
    assert "live-输出-7" in tool_end["result"] and done["content"].count("live-输出-7") >= 1


@dataclass
class Edge:
    """Where :class:`tests.test_cluster_faults.EventStream` connects: one instance, the users' tokens."""

    base_url: str
    tokens: dict[str, str]


# -- one instance ------------------------------------------------------------------------------------


async def test_one_instance_delivers_its_own_events_without_reading_them_back(tmp_path: Path) -> None:
    cp = await Harness(tmp_path).start()  # SQLite, the in-process broker
    try:
        credentials = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, credentials.token, credentials.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        await send_events(ws, "s1", "A", [1, 2])
        reads: list[tuple[int, int | None]] = []
        real_read = cp.plane.event_log.read

        def read(
            session_id: str, after: int, before: int | None = None, limit: int = 500
        ) -> list[SessionEvent]:
            reads.append((after, before))
            return real_read(session_id, after, before, limit)

        cp.plane.event_log.read = read  # type: ignore[method-assign]
        live = cp.plane.subscribe(ALICE, "s1")
        await live.ready()  # its instance's own notices are ignored: nothing is read back
        for batch in ([3], [4, 5, 6], list(range(7, 40))):
            await send_events(ws, "s1", "A", batch)
            assert id_seq(await collect(live, len(batch), timeout=WAIT)) == [(seq, seq) for seq in batch]
        assert reads == []
        await cp.plane.stop_session(ALICE, "s1")
        assert await collect_to_end(live) == []
    finally:
        await cp.stop()

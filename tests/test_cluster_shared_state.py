"""Control-plane state every instance shares through the database: per-user long-term memory,
remote MCP servers and the outcomes of the execution planes' requests (issue 15, "Scale out").

The two-instance cases run two real control planes (uvicorn servers on loopback, the
``Harness`` of tests/test_control_plane.py) on ONE PostgreSQL (``CLAWLET_TEST_POSTGRES_URL``,
started by scripts/test; skipped with a message without it), each with its own data directory, and
one in-process broker hub between them (the presence records and channels Redis carries in
production: tests/test_cluster_scaleout.py runs that with Redis and HAProxy). Execution planes are
real ``/ws/vm`` clients. The store and import cases also run on SQLite, the single-machine default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clawlet.cluster.protocol import encode, request_frame, resume_frame
from clawlet.controlplane.broker import LocalBroker, LocalHub
from clawlet.controlplane.db import ControlPlaneStore, now_ms
from clawlet.controlplane.server import ControlPlane, ControlPlaneConfig, RequestContext
from tests.support.postgres import BACKENDS, fresh_schema_url
from tests.test_control_plane import ALICE, BOB, MCP_SERVER, SECRET, Harness, recv_type, until

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

WAIT = 60.0
"""Seconds a test waits for a condition (generous: the suite runs on loaded machines)."""


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if getattr(request, "param", "sqlite") == "postgresql":
        with fresh_schema_url("clawlet_shared_state_test") as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'controlplane.db'}"


@pytest.fixture
async def two_instances(tmp_path: Path) -> AsyncIterator[tuple[Harness, Harness]]:
    """Instances A and B on one PostgreSQL schema, each with its own data directory."""
    with fresh_schema_url("clawlet_two_instances_test") as url:
        hub = LocalHub()
        a = await Harness(tmp_path / "a", url, broker=LocalBroker(hub=hub)).start()
        try:
            b = await Harness(tmp_path / "b", url, broker=LocalBroker(hub=hub)).start()
            try:
                yield a, b
            finally:
                await b.stop()
        finally:
            await a.stop()


# -- two instances, one PostgreSQL --------------------------------------------------------------------


async def test_memory_added_through_one_instance_is_found_through_another(
    two_instances: tuple[Harness, Harness],
) -> None:
    a, b = two_instances
    a.user(ALICE)
    a.user(BOB)
    a.plane.add_memory(ALICE, "用户喜欢喝乌龙茶，不加糖。")
    a.plane.add_memory(ALICE, "The deploy key rotates every Monday.")
    a.plane.add_memory(BOB, "用户的猫叫小白，三岁了。")
    on_b = b.client(b.plane.issue_vm_credentials(ALICE))  # alice's machine is connected to B
    await on_b.connect()

    hits = await on_b.memory_search("s", "乌龙茶", top_k=3)
    assert hits and "乌龙茶" in hits[0]["text"] and hits[0]["source"].startswith("MEMORY.md#")
    assert "deploy key" in (await on_b.memory_search("s", "when does the deploy key rotate?"))[0]["text"]
    assert all("小白" not in hit["text"] for hit in await on_b.memory_search("s", "猫叫什么"))
    # added through A after B indexed alice's memory: B's index catches up before its next search
    a.plane.add_memory(ALICE, "项目代号是青鸟，截止日期在三月。")
    assert "青鸟" in (await on_b.memory_search("s", "项目代号"))[0]["text"]
    # nothing of it is a file of A's (B cannot read A's disk)
    assert not list(a.tmp_path.rglob("MEMORY.md"))


async def test_mcp_servers_set_through_one_instance_are_offered_and_run_by_another(
    two_instances: tuple[Harness, Harness],
) -> None:
    a, b = two_instances
    a.user(ALICE)
    a.plane.set_mcp_servers(ALICE, {"calc": {"command": sys.executable, "args": [str(MCP_SERVER)]}})
    creds = b.plane.issue_vm_credentials(ALICE)
    ws = await b.raw_connect(ALICE, creds.token, creds.ticket)
    init = await recv_type(ws, "init")
    assert init["data"]["mcp_servers"] == ["calc"]
    assert b.plane.session_config(ALICE, {})["mcp_servers"] == ["calc"]
    await ws.send(
        encode(
            request_frame(
                "m1", "s", "mcp_call", {"server": "calc", "tool": "add", "arguments": {"a": 2, "b": 40}}
            )
        )
    )
    response = await recv_type(ws, "response", timeout=WAIT)
    assert response["result"]["content"][0]["text"] == "42" and response["result"]["isError"] is False
    assert (b.tmp_path / "cp" / "cache" / ALICE / "mcp").is_dir()  # B's scratch directory for alice


async def test_a_request_kept_by_one_instance_is_answered_on_resume_by_another(
    two_instances: tuple[Harness, Harness], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clawlet.controlplane.server")
    a, b = two_instances
    creds = a.user(ALICE)
    a.user(BOB)
    runs: list[str] = []

    async def echo(context: RequestContext) -> dict[str, Any]:
        runs.append(context.request_id)
        return {"echo": context.params, "user": context.user_id}

    for harness in (a, b):
        harness.plane.register_method("echo", echo)
    on_a = await a.raw_connect(ALICE, creds.token, creds.ticket)
    await recv_type(on_a, "init")
    await on_a.send(encode(request_frame("r1", "s", "echo", {"n": 1})))
    assert (await recv_type(on_a, "response"))["result"] == {"echo": {"n": 1}, "user": ALICE}
    await on_a.close()

    on_b = await b.raw_connect(ALICE, creds.token)  # the reconnect, through the other instance
    await recv_type(on_b, "init")
    await on_b.send(encode(resume_frame(["r1", "never-sent"])))
    assert (await recv_type(on_b, "resume_response"))["results"] == {
        "r1": {"status": "completed", "data": {"echo": {"n": 1}, "user": ALICE}},
        "never-sent": {"status": "lost"},
    }
    # the same request sent again to B is answered from A's outcome, not run again
    await on_b.send(encode(request_frame("r1", "s", "echo", {"n": 1})))
    assert (await recv_type(on_b, "response"))["result"] == {"echo": {"n": 1}, "user": ALICE}
    assert runs == ["r1"]
    # a request given up as lost is not run by the instance its frame reaches late
    late = await a.raw_connect(ALICE, creds.token)
    await recv_type(late, "init")
    await late.send(encode(request_frame("never-sent", "s", "echo", {"n": 2})))
    await until(lambda: "request never-sent of user alice was answered lost to a resume" in caplog.text, WAIT)
    assert runs == ["r1"]
    # never another user's outcome
    bob_creds = b.plane.issue_vm_credentials(BOB)
    bob = await b.raw_connect(BOB, bob_creds.token, bob_creds.ticket)
    await recv_type(bob, "init")
    await bob.send(encode(resume_frame(["r1"])))
    assert (await recv_type(bob, "resume_response"))["results"] == {"r1": {"status": "lost"}}


async def test_a_request_still_running_on_another_instance_is_pending_then_answered_once(
    two_instances: tuple[Harness, Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """The execution plane moves to B while A runs its request: B's resume says ``pending`` (and
    a repeat of the request is not run on B); A's response reaches the execution plane through B."""
    caplog.set_level(logging.INFO, logger="clawlet.controlplane.server")
    a, b = two_instances
    creds = a.user(ALICE)
    gate = asyncio.Event()
    runs: list[str] = []

    def slow_on(name: str) -> Callable[[RequestContext], Awaitable[dict[str, Any]]]:
        async def slow(context: RequestContext) -> dict[str, Any]:
            runs.append(f"{context.request_id} on {name}")
            await gate.wait()
            return {"done": context.request_id}

        return slow

    a.plane.register_method("slow", slow_on("A"))
    b.plane.register_method("slow", slow_on("B"))
    on_a = await a.raw_connect(ALICE, creds.token, creds.ticket)
    await recv_type(on_a, "init")
    await on_a.send(encode(request_frame("r1", "s", "slow", {})))
    await until(lambda: runs, WAIT)
    await on_a.close()
    await until(lambda: not a.plane.is_connected(ALICE), WAIT)

    on_b = await b.raw_connect(ALICE, creds.token)
    await recv_type(on_b, "init")
    await on_b.send(encode(resume_frame(["r1"])))
    assert (await recv_type(on_b, "resume_response"))["results"] == {"r1": {"status": "pending"}}
    await on_b.send(encode(request_frame("r1", "s", "slow", {})))  # a repeat: A runs it already
    await until(lambda: "r1 of user alice runs on another instance; not running it" in caplog.text, WAIT)
    assert b.plane.running_requests(ALICE) == 0 and a.plane.running_requests(ALICE) == 1

    gate.set()
    response = await recv_type(on_b, "response", timeout=WAIT)
    assert response["id"] == "r1" and response["result"] == {"done": "r1"}
    assert runs == ["r1 on A"]
    await on_b.send(encode(resume_frame(["r1"])))
    assert (await recv_type(on_b, "resume_response"))["results"] == {
        "r1": {"status": "completed", "data": {"done": "r1"}}
    }


# -- the store, on SQLite and PostgreSQL --------------------------------------------------------------


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_request_outcomes_are_claimed_once_kept_until_they_expire_and_pruned(database_url: str) -> None:
    store = ControlPlaneStore.open(database_url)
    try:
        later = now_ms() + 60_000
        assert store.claim_request(ALICE, "r1", "instance-a", later) is None
        running = store.claim_request(ALICE, "r1", "instance-b", later)
        assert running is not None and (running.status, running.instance_id) == ("running", "instance-a")
        assert store.claim_request(BOB, "r1", "instance-b", later) is None  # ids are per user
        store.finish_request(ALICE, "r1", "instance-a", {"status": "completed", "data": [1, "二"]}, later)
        done = store.claim_request(ALICE, "r1", "instance-b", later)
        assert (
            done is not None
            and done.status == "completed"
            and done.outcome
            == {
                "status": "completed",
                "data": [1, "二"],
            }
        )
        assert set(store.request_outcomes(ALICE, ["r1", "r2"])) == {"r1"}
        # one a resume gave up as lost is not claimed afterwards
        assert store.claim_request(ALICE, "gone", "instance-b", later, "lost") is None
        given_up = store.claim_request(ALICE, "gone", "instance-a", later)
        assert given_up is not None and given_up.status == "lost"
        # an expired row is gone for resume, may be claimed anew, and is pruned
        store.finish_request(ALICE, "old", "instance-a", {"status": "completed"}, now_ms() - 1)
        assert store.request_outcomes(ALICE, ["old"]) == {}
        assert store.prune_request_outcomes() == 1
        assert store.claim_request(ALICE, "old", "instance-b", now_ms() - 1) is None
        assert store.claim_request(ALICE, "old", "instance-a", later) is None
        # an instance that stops forgets what it was running, nothing else
        assert store.drop_running_requests("instance-b") == 1  # bob's r1
        assert store.drop_running_requests("instance-a") == 1  # alice's "old"
        assert set(store.request_outcomes(ALICE, ["r1", "old", "gone"])) == {"r1", "gone"}
    finally:
        store.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_memory_and_mcp_servers_live_in_the_database(database_url: str, tmp_path: Path) -> None:
    config = ControlPlaneConfig(data_dir=tmp_path / "a", jwt_secret=SECRET, database_url=database_url)
    plane = ControlPlane(config)
    try:
        plane.create_user(ALICE, "Alice", {})
        plane.add_memory(ALICE, "第一条\n\n\n同一条的第二段")
        plane.add_memory(ALICE, "第一条\n同一条的第二段")  # the same entry: stored once
        assert len(plane.store.memory_digests(ALICE)) == 1
        with pytest.raises(ValueError, match="needs some text"):
            plane.add_memory(ALICE, " \n ")
        plane.set_mcp_servers(ALICE, {"x": {"command": "x", "args": ["1"], "env": {"K": "v"}}})
        with pytest.raises(ValueError, match="'args'"):
            plane.set_mcp_servers(ALICE, {"y": {"command": "y", "args": "1"}})
        assert plane.mcp.servers(ALICE) == {"x": {"command": "x", "args": ["1"], "env": {"K": "v"}}}
        plane.set_mcp_servers(ALICE, {})
        assert plane.mcp.servers(ALICE) == {}
    finally:
        plane.close()


def test_files_of_an_older_data_directory_are_imported_once(tmp_path: Path) -> None:
    data = tmp_path / "cp"
    url = f"sqlite:///{tmp_path / 'controlplane.db'}"
    store = ControlPlaneStore.open(url)
    store.create_user(ALICE, "Alice", {})
    store.close()
    alice, stranger = data / "users" / ALICE, data / "users" / "nobody"
    (alice / "memory").mkdir(parents=True)
    (alice / "memory" / "MEMORY.md").write_text("用户喜欢喝乌龙茶。\n\nDeploys happen on Fridays.\n", "utf-8")
    servers = {"mcpServers": {"calc": {"command": sys.executable, "args": [str(MCP_SERVER)]}}}
    (alice / "mcp.json").write_text(json.dumps(servers), "utf-8")
    (stranger / "memory").mkdir(parents=True)
    (stranger / "memory" / "MEMORY.md").write_text("not anyone's\n", "utf-8")

    for _start in range(2):  # the second start finds nothing more to import
        plane = ControlPlane(ControlPlaneConfig(data_dir=data, jwt_secret=SECRET, database_url=url))
        try:
            assert len(plane.store.memory_digests(ALICE)) == 2
            assert "乌龙茶" in plane.memory.search(ALICE, "乌龙茶")[0]["text"]
            assert sorted(plane.mcp.servers(ALICE)) == ["calc"]
        finally:
            plane.close()
    assert (alice / "memory" / "MEMORY.md.imported").is_file() and not (
        alice / "memory" / "MEMORY.md"
    ).exists()
    assert (alice / "mcp.json.imported").is_file() and not (alice / "mcp.json").exists()
    assert (stranger / "memory" / "MEMORY.md").is_file()  # no such user: left alone

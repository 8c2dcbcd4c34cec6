"""The control plane (clawlet.controlplane.server) against the real execution-plane client.

A real uvicorn server runs the control plane's app on 127.0.0.1 in the test's event loop, and the
execution planes are real :class:`~clawlet.execplane.client.ControlPlaneClient` instances (plus a raw
``websockets`` connection where a test must send frames the client never would, e.g. duplicates).

The data-layer tests run on a SQLite file and on PostgreSQL (tests/support/postgres.py: the server
``scripts/test`` starts, or ``CLAWLET_TEST_POSTGRES_URL``), each test in a fresh schema dropped
afterwards; without a server the PostgreSQL cases are skipped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from clawlet.cluster.protocol import (
    CLOSE_UNAUTHORIZED,
    ERR_AUTH_REQUIRED,
    ERR_FORBIDDEN,
    ERR_TICKET_REJECTED,
    ERR_TOKEN_INVALID,
    EVENT_ENCODING,
    auth_frame,
    encode,
    fire_and_forget_frame,
    heartbeat_frame,
    request_frame,
    resume_frame,
    sse_event_frame,
)
from clawlet.controlplane.auth import TicketRejected, TicketStore, issue_vm_token
from clawlet.controlplane.broker import Broker
from clawlet.controlplane.db import (
    VERSION_TABLE,
    ControlPlaneStore,
    SkillPackageExists,
    SqlTicketBackend,
    UserExists,
    current_revision,
)
from clawlet.controlplane.server import (
    CLOSE_REPLACED,
    ControlPlane,
    ControlPlaneConfig,
    ExecPlaneUnavailable,
    RequestContext,
    SessionEvent,
    SessionNotFound,
    SessionNotRunning,
    TicketRedactingFilter,
    VmCredentials,
    create_control_plane_app,
    server_config,
    session_key,
)
from clawlet.controlplane.userdata import InvalidUserId
from clawlet.execplane.client import (
    ControlPlaneClient,
    ControlPlaneError,
    ControlPlaneRefused,
    connect_url,
)
from clawlet.execplane.offline import USAGE_QUEUE_FILE, DiskQueue
from clawlet.execplane.skill_cache import SkillPackageCache, parse_package
from clawlet.inbox.db import VERSION_TABLE as INBOX_VERSION_TABLE
from clawlet.inbox.db import migrate as migrate_inbox
from clawlet.testing.prompt_server import PromptServer
from tests.conftest import free_port
from tests.support.postgres import BACKENDS, fresh_schema_url

SECRET = "control-plane-test-secret-0123456789abcdef"
ALICE, BOB = "alice", "bob"
ALICE_KEYS = {"openai": "sk-alice-openai", "anthropic": "sk-ant-alice"}
BOB_KEYS = {"openai": "sk-bob-openai"}
MCP_SERVER = Path(__file__).parent / "support" / "mcp_server.py"


# -- helpers ----------------------------------------------------------------------------------------


class Clock:
    """The control plane's injectable wall clock (tickets)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def until(condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL whose connections work in a new, empty schema (dropped with everything in it after)."""
    with fresh_schema_url("clawlet_cp_test") as url:
        yield url


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if getattr(request, "param", "sqlite") == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'cp' / 'controlplane.db'}"


class Harness:
    """The control plane app on a real uvicorn server in this event loop, plus client factories."""

    def __init__(
        self, tmp_path: Path, database_url: str | None = None, *, broker: Broker | None = None, **options: Any
    ) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.clock = Clock()
        self.config = ControlPlaneConfig(
            data_dir=tmp_path / "cp",
            jwt_secret=SECRET,
            database_url=database_url,
            public_url=f"ws://127.0.0.1:{self.port}",
            clock=self.clock,
            **options,
        )
        self.plane = ControlPlane(self.config, broker=broker)
        self.app = create_control_plane_app(plane=self.plane)
        # log_config=None: uvicorn's records reach caplog (and the ticket filter is what masks them)
        self.server = PromptServer(
            server_config(self.app, port=self.port, log_level="info", log_config=None, lifespan="on")
        )
        self.clients: list[ControlPlaneClient] = []
        self.raw: list[ClientConnection] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Harness:
        self._task = asyncio.create_task(self.server.serve())
        await until(lambda: self.server.started or self._task.done(), 10)
        assert self.server.started, "the control plane did not start"
        return self

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        for ws in self.raw:
            await ws.close()
        self.server.should_exit = True
        if self._task is not None:
            await asyncio.wait_for(self._task, 10)
        self.plane.close()

    def user(self, user_id: str, keys: dict[str, str] | None = None, **kwargs: Any) -> VmCredentials:
        self.plane.create_user(user_id, user_id.title(), keys or {}, **kwargs)
        return self.plane.issue_vm_credentials(user_id)

    def client(self, creds: VmCredentials, *, token: str | None = None, **options: Any) -> ControlPlaneClient:
        options.setdefault("backoff", (0.1, 0.2, 0.2, 0.2))
        options.setdefault("request_timeout", 10.0)
        options.setdefault("connect_timeout", 5.0)
        client = ControlPlaneClient(
            creds.ws_url,
            creds.user_id,
            token or creds.token,
            options.pop("ticket", creds.ticket),
            state_dir=self.tmp_path / "vm" / f"{creds.user_id}-{len(self.clients)}",
            **options,
        )
        self.clients.append(client)
        return client

    async def raw_connect(self, user_id: str, token: str, ticket: str | None = None) -> ClientConnection:
        ws = await connect(connect_url(self.config.ws_url, user_id, ticket))
        self.raw.append(ws)
        await ws.send(encode(auth_frame(token)))
        return ws


async def recv(ws: ClientConnection, timeout: float = 5.0) -> dict[str, Any]:
    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    assert isinstance(frame, dict)
    return frame


async def recv_type(ws: ClientConnection, kind: str, timeout: float = 5.0) -> dict[str, Any]:
    while True:
        frame = await recv(ws, timeout)
        if frame["type"] == kind:
            return frame


async def settle(ws: ClientConnection, timeout: float = 60.0) -> None:
    """Everything sent on ``ws`` before was handled, its ``sse_event`` frames stored: the control
    plane acknowledges a heartbeat with an id only then."""
    ack_id = uuid.uuid4().hex
    await ws.send(encode(heartbeat_frame(ack_id=ack_id)))
    while (await recv_type(ws, "heartbeat", timeout)).get("id") != ack_id:
        pass


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = await Harness(tmp_path, auth_timeout=1.0).start()
    yield harness
    await harness.stop()


# -- connecting -------------------------------------------------------------------------------------


async def test_handshake_sends_init_with_that_users_keys(
    cp: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = cp.user(ALICE, ALICE_KEYS, org_id="org-a")
    bob = cp.user(BOB, BOB_KEYS)
    a, b = cp.client(alice), cp.client(bob)
    init_a = await a.connect()
    init_b = await b.connect()
    assert init_a == {
        "user_id": ALICE,
        "org_id": "org-a",
        "api_keys": ALICE_KEYS,
        "vm_id": alice.vm_id,
        "heartbeat_ack": True,
        "event_encoding": EVENT_ENCODING,
        "frames_per_line": True,
        # the defaults of the sessions the execution plane starts itself (through its API)
        "runtime_type": "semigraph",
        "mcp_servers": [],
        "skill_index": [],
    }
    assert init_b["api_keys"] == BOB_KEYS and init_b["user_id"] == BOB and "org_id" not in init_b
    # frames go uncompressed (permessage-deflate cost both planes CPU on every small event)
    conn = a._socket.current
    assert conn is not None and "Sec-WebSocket-Extensions" not in conn.ws.request.headers  # type: ignore[union-attr]
    assert a.api_keys == ALICE_KEYS
    assert cp.plane.connected_users() == [ALICE, BOB]
    vm = cp.plane.store.get_vm(alice.vm_id)
    assert vm is not None and vm.connected and vm.user_id == ALICE and vm.last_seen is not None
    await a.close()
    await until(lambda: not cp.plane.is_connected(ALICE))
    await until(lambda: not cp.plane.store.get_vm(alice.vm_id).connected)  # type: ignore[union-attr]
    for secret in (alice.ticket, alice.token, bob.ticket, bob.token, *ALICE_KEYS.values()):
        assert secret not in caplog.text
    assert "ticket=***" in caplog.text  # uvicorn's access line, masked


@pytest.mark.slow
async def test_queued_usage_is_forgotten_only_after_the_control_plane_stored_it(
    cp: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pong only says the frames arrived: the client waits for the heartbeat acknowledgement,
    which the control plane sends once the records before it are in the database."""
    store_usage = cp.plane.store.add_usage

    def slow_add_usage(*args: Any, **kwargs: Any) -> bool:
        time.sleep(1.0)  # a slow database: the frames arrived long before they are stored
        return store_usage(*args, **kwargs)

    monkeypatch.setattr(cp.plane.store, "add_usage", slow_add_usage)
    client = cp.client(cp.user(ALICE), heartbeat_interval=0.2)
    await client.connect()
    await client.report_usage("s1", "gpt", 11, 22)
    queue = DiskQueue(client.state_dir / USAGE_QUEUE_FILE)
    await until(lambda: len(queue) == 0, 10)
    assert [row["tokens_in"] for row in cp.plane.store.list_usage(ALICE)] == [11]


async def test_a_used_ticket_is_refused(cp: Harness) -> None:
    alice = cp.user(ALICE)
    first = cp.client(alice)
    await first.connect()
    await first.close()
    again = cp.client(alice)
    with pytest.raises(ControlPlaneRefused) as refused:
        await again.connect()
    assert refused.value.code == ERR_TICKET_REJECTED and "already used" in refused.value.message
    assert refused.value.final


async def test_an_expired_ticket_is_refused(cp: Harness) -> None:
    alice = cp.user(ALICE)
    cp.clock.offset = 30.0  # valid for 30 s: at exactly 30 s it is expired
    with pytest.raises(ControlPlaneRefused) as refused:
        await cp.client(alice).connect()
    assert refused.value.code == ERR_TICKET_REJECTED and "expired" in refused.value.message
    fresh = cp.plane.issue_vm_credentials(ALICE)
    cp.clock.offset = 59.0  # 29 s after this ticket was issued
    assert (await cp.client(fresh).connect())["user_id"] == ALICE


async def test_bad_tokens_are_refused(cp: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice = cp.user(ALICE)
    forged = issue_vm_token(ALICE, "another-secret-that-is-long-enough-0123456789", 3600)
    expired = issue_vm_token(ALICE, SECRET, 10, now=time.time() - 3600)
    for token in (forged, expired, "not.a.jwt"):
        with pytest.raises(ControlPlaneRefused) as refused:
            await cp.client(alice, token=token).connect()
        assert refused.value.code == ERR_TOKEN_INVALID
        assert token not in caplog.text
    # a refused token does not use up the ticket
    assert (await cp.client(alice).connect())["user_id"] == ALICE


async def test_a_token_of_another_user_is_refused(cp: Harness) -> None:
    alice = cp.user(ALICE, ALICE_KEYS)
    bob = cp.user(BOB, BOB_KEYS)
    # Bob's token presented for Alice's user id (with and without Alice's ticket)
    for ticket in (alice.ticket, None):
        with pytest.raises(ControlPlaneRefused) as refused:
            await cp.client(alice, token=bob.token, ticket=ticket).connect()
        assert refused.value.code == ERR_TOKEN_INVALID and "another user" in refused.value.message
    # Alice's ticket presented with Bob's own credentials: the ticket is Alice's
    with pytest.raises(ControlPlaneRefused) as refused:
        await cp.client(bob, ticket=alice.ticket).connect()
    assert refused.value.code == ERR_TICKET_REJECTED
    assert not cp.plane.connected_users()


async def test_unknown_and_disabled_users_are_refused(cp: Harness) -> None:
    ghost = issue_vm_token("ghost", SECRET, 3600)
    with pytest.raises(ControlPlaneRefused) as refused:
        await cp.client(VmCredentials("ghost", "vm-x", "", ghost, cp.config.ws_url), ticket=None).connect()
    assert refused.value.code == ERR_FORBIDDEN
    alice = cp.user(ALICE)
    cp.plane.update_user(ALICE, disabled=True)
    with pytest.raises(ControlPlaneRefused) as refused:
        await cp.client(alice).connect()
    assert refused.value.code == ERR_FORBIDDEN and "disabled" in refused.value.message


@pytest.mark.slow
async def test_no_auth_frame_or_a_wrong_first_frame_is_refused(cp: Harness) -> None:
    cp.user(ALICE)
    silent = await connect(connect_url(cp.config.ws_url, ALICE))
    cp.raw.append(silent)
    frame = await recv(silent, 5)
    assert frame == {
        "type": "error",
        "error": {"code": ERR_AUTH_REQUIRED, "message": "no auth frame within 1s"},
    }
    with pytest.raises(ConnectionClosed) as closed:
        await silent.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_UNAUTHORIZED

    wrong = await connect(connect_url(cp.config.ws_url, ALICE))
    cp.raw.append(wrong)
    await wrong.send(encode(resume_frame([])))
    assert (await recv(wrong))["error"]["code"] == ERR_AUTH_REQUIRED
    garbage = await connect(connect_url(cp.config.ws_url, ALICE))
    cp.raw.append(garbage)
    await garbage.send("{not json")
    assert (await recv(garbage))["error"]["code"] == ERR_AUTH_REQUIRED
    # the server is fine afterwards
    assert (await cp.client(cp.plane.issue_vm_credentials(ALICE)).connect())["user_id"] == ALICE


async def test_reconnects_use_the_jwt_alone_and_a_new_connection_replaces_the_old(cp: Harness) -> None:
    alice = cp.user(ALICE, ALICE_KEYS)
    client = cp.client(alice)
    await client.connect()
    assert await cp.plane.disconnect_exec_plane(ALICE)
    await until(lambda: client.connects == 2 and cp.plane.is_connected(ALICE))
    assert client.api_keys == ALICE_KEYS
    # a second execution plane of the same user (reconnect-style, JWT only) replaces the first
    raw = await cp.raw_connect(ALICE, alice.token)
    assert (await recv(raw))["type"] == "init"
    # the client, replaced, reconnects and in turn replaces the raw connection
    await until(lambda: client.connects == 3)
    with pytest.raises(ConnectionClosed) as closed:
        await recv(raw)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_REPLACED


# -- requests ---------------------------------------------------------------------------------------

SKILL_V1 = [
    {"path": "SKILL.md", "content": "# Weather v1\n"},
    {"path": "scripts/run.sh", "content": "echo 1\n"},
]
SKILL_V2 = [{"path": "SKILL.md", "content": "# Weather v2\n"}]
ALICE_FORK = [
    {"path": "SKILL.md", "content": "# Alice's weather\n"},
    {"path": "data.bin", "content": "AAEC", "encoding": "base64"},
]
PRIVATE = [{"path": "SKILL.md", "content": "# Alice's secret skill\n"}]


async def test_skill_packages_by_version_own_first_then_global(cp: Harness, tmp_path: Path) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    cp.plane.add_skill_package("weather", "1.0.0", SKILL_V1)
    cp.plane.add_skill_package("weather", "2.0.0", SKILL_V2)
    cp.plane.add_skill_package("weather", "2.1-alice", ALICE_FORK, user_id=ALICE)
    cp.plane.add_skill_package("secret", "1.0", PRIVATE, user_id=ALICE)
    with pytest.raises(SkillPackageExists):
        cp.plane.add_skill_package("weather", "1.0.0", SKILL_V1)
    with pytest.raises(ValueError):
        cp.plane.add_skill_package("broken", "1", [{"path": "../SKILL.md", "content": "x"}])
    a, b = cp.client(alice), cp.client(bob)
    await a.connect()
    await b.connect()

    latest_a = await a.get_skill_package("s", "weather")
    assert latest_a["package"]["version"] == "2.1-alice"
    assert parse_package("weather", latest_a).files[1].data == b"\x00\x01\x02"
    latest_b = await b.get_skill_package("s", "weather", "latest")
    assert latest_b == {"package": {"skill_id": "weather", "version": "2.0.0", "files": SKILL_V2}}
    assert (await a.get_skill_package("s", "weather", "1.0.0"))["package"]["files"] == SKILL_V1
    assert (await a.get_skill_package("s", "secret"))["package"]["files"] == PRIVATE
    for version in ("latest", "1.0"):
        with pytest.raises(ControlPlaneError) as missing:
            await b.get_skill_package("s", "secret", version)
        assert missing.value.code == "not_found"
    with pytest.raises(ControlPlaneError) as missing:
        await b.get_skill_package("s", "weather", "9.9")
    assert missing.value.code == "not_found"
    with pytest.raises(ControlPlaneError) as invalid:
        await b.get_skill_package("s", "../etc")
    assert invalid.value.code == "invalid_params"

    # the execution plane's cache takes the package as served
    cache = SkillPackageCache(
        tmp_path / "skills", lambda skill, version: b.get_skill_package("s", skill, version)
    )
    directory = await cache.load("weather", "1.0.0")
    assert (directory / "scripts" / "run.sh").read_text() == "echo 1\n"


async def test_memory_search_is_per_user_and_works_in_chinese(cp: Harness) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    cp.plane.add_memory(ALICE, "用户喜欢喝乌龙茶，不加糖。")
    cp.plane.add_memory(ALICE, "The deploy key rotates every Monday.")
    cp.plane.add_memory(ALICE, "项目代号是青鸟，截止日期在三月。")
    cp.plane.add_memory(BOB, "用户的猫叫小白，三岁了。")
    a, b = cp.client(alice), cp.client(bob)
    await a.connect()
    await b.connect()

    hits = await a.memory_search("s", "乌龙茶", top_k=3)
    assert hits and "乌龙茶" in hits[0]["text"]
    assert hits[0]["source"].startswith("MEMORY.md#")
    assert "deploy key" in (await a.memory_search("s", "when does the deploy key rotate?"))[0]["text"]
    assert "青鸟" in (await a.memory_search("s", "项目代号"))[0]["text"]
    assert "小白" in (await b.memory_search("s", "猫叫什么"))[0]["text"]
    for query in ("乌龙茶", "deploy key", "项目代号青鸟"):
        assert all("小白" not in hit["text"] for hit in await a.memory_search("s", query))
        assert all(
            "乌龙茶" not in hit["text"] and "青鸟" not in hit["text"] and "deploy" not in hit["text"]
            for hit in await b.memory_search("s", query)
        )
    # a new memory is found at once
    cp.plane.add_memory(BOB, "鲍勃的生日是五月二十日。")
    assert "生日" in (await b.memory_search("s", "生日"))[0]["text"]
    with pytest.raises(ControlPlaneError) as invalid:
        await a.call("s", "memory_search", {"query": "", "top_k": 3})
    assert invalid.value.code == "invalid_params"


@pytest.mark.slow
async def test_mcp_call_runs_that_users_servers_only(cp: Harness) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    a, b = cp.client(alice), cp.client(bob)
    await a.connect()
    await b.connect()
    with pytest.raises(ControlPlaneError) as none:
        await a.mcp_call("s", "calc", "add", {"a": 2, "b": 3})
    assert none.value.code == "not_found" and none.value.message == "no MCP servers configured"

    cp.plane.set_mcp_servers(ALICE, {"calc": {"command": sys.executable, "args": [str(MCP_SERVER)]}})
    result = await a.mcp_call("s", "calc", "add", {"a": 2, "b": 3})
    assert result["isError"] is False
    assert result["content"][0]["text"] == "5"
    with pytest.raises(ControlPlaneError) as unknown:
        await a.mcp_call("s", "nope", "add", {})
    assert unknown.value.code == "not_found" and "calc" in unknown.value.message
    with pytest.raises(ControlPlaneError) as other:
        await b.mcp_call("s", "calc", "add", {"a": 1, "b": 1})
    assert other.value.code == "not_found"


# -- fire-and-forget records ------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_records_are_stored_once_and_snapshots_upserted(tmp_path: Path, database_url: str) -> None:
    cp = await Harness(tmp_path, database_url).start()
    try:
        alice = cp.user(ALICE, ALICE_KEYS)
        cp.user(BOB)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        assert (await recv(ws))["data"]["api_keys"] == ALICE_KEYS
        usage = fire_and_forget_frame(
            "u1",
            "s1",
            "usage_report",
            {"model": "gpt", "tokens_in": 10, "tokens_out": 5, "cost": 0.1},
            ts="2026-01-02T03:04:05.000Z",
        )
        audit = fire_and_forget_frame(
            "a1", "s1", "audit_log", {"event": "tool_call", "details": {"tool": "x"}}
        )
        evolution = fire_and_forget_frame("e1", "s1", "evolution_submit", {"skill_id": "new", "diff": "…"})
        old = fire_and_forget_frame("p1", "s1", "snapshot_sync", {"turn": 1}, ts="2026-01-01T00:00:01Z")
        new = fire_and_forget_frame("p2", "s1", "snapshot_sync", {"turn": 2}, ts="2026-01-01T00:00:02Z")
        for frame in (usage, audit, evolution, usage, audit, evolution, old, new, old):
            await ws.send(encode(frame))
        await settle(ws)
        store = cp.plane.store
        rows = store.list_usage(ALICE)
        assert [(r["id"], r["model"], r["tokens_in"], r["tokens_out"], r["extra"]) for r in rows] == [
            ("u1", "gpt", 10, 5, {"cost": 0.1})
        ]
        assert rows[0]["ts"] == 1767323045000  # when it was made, not when it arrived
        assert [(r["id"], r["event"], r["details"]) for r in store.list_audit(ALICE)] == [
            ("a1", "tool_call", {"tool": "x"})
        ]
        assert [r["data"] for r in store.list_evolution(ALICE)] == [{"skill_id": "new", "diff": "…"}]
        assert store.get_snapshot(ALICE, "s1") == {"turn": 2}
        assert cp.plane.duplicate_records == 3
        assert store.list_usage(BOB) == []

        # the real client's records (queued on disk first) land too, attributed to the JWT's user
        client = cp.client(cp.plane.issue_vm_credentials(BOB))
        await client.connect()
        await client.report_usage("s2", "claude", 7, 3)
        await client.log_audit("s2", "login", {"ok": True})
        await until(lambda: store.list_usage(BOB) and store.list_audit(BOB))
        assert store.list_usage(BOB)[0]["tokens_in"] == 7
        assert len(store.list_usage(ALICE)) == 1
    finally:
        await cp.stop()


# -- sessions ---------------------------------------------------------------------------------------


class ExecPlane:
    """A real client with session handlers that record what arrives and answer with SSE events."""

    def __init__(self, client: ControlPlaneClient) -> None:
        self.client = client
        self.started: list[dict[str, Any]] = []
        self.stopped: list[dict[str, Any]] = []
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.cancelled: list[str] = []
        client.on_start_session = self.start
        client.on_stop_session = self.stop

    async def start(self, data: dict[str, Any]) -> None:
        session_id = data["session_id"]
        self.started.append(data)

        async def on_message(message: dict[str, Any]) -> None:
            self.messages.append((session_id, message))
            for token in message.get("reply", []):
                await self.client.send_sse_event(session_id, {"event": "token", "text": token})

        def on_cancel(_data: dict[str, Any]) -> None:
            self.cancelled.append(session_id)

        self.client.register_session(session_id, on_message, on_cancel)

    def stop(self, data: dict[str, Any]) -> None:
        self.stopped.append(data)
        self.client.unregister_session(data["session_id"])


async def collect(
    subscription: AsyncIterator[SessionEvent], count: int, timeout: float = 5.0
) -> list[SessionEvent]:
    events: list[SessionEvent] = []

    async def run() -> None:
        async for event in subscription:
            events.append(event)
            if len(events) == count:
                return

    await asyncio.wait_for(run(), timeout)
    return events


async def test_sessions_are_routed_to_their_users_exec_plane(cp: Harness) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    plane_a = ExecPlane(cp.client(alice, heartbeat_interval=30.0))
    plane_b = ExecPlane(cp.client(bob))
    await plane_a.client.connect()
    await plane_b.client.connect()

    config = {"agent_config": {"name": "Helper", "model": "gpt-4o"}, "skill_index": [], "session_config": {}}
    record = await cp.plane.start_session(ALICE, "sa", config)
    assert record.user_id == ALICE and record.status == "running"
    await until(lambda: plane_a.started)
    # the frame carries the runtime the control plane resolved (nothing set anywhere: semigraph)
    # and the user's remote MCP servers by name (alice has none)
    assert plane_a.started == [{**config, "session_id": "sa", "runtime_type": "semigraph", "mcp_servers": []}]
    assert plane_b.started == []
    await cp.plane.start_session(BOB, "sb", {"agent_config": {}})
    await until(lambda: plane_b.started)

    sub = cp.plane.subscribe(ALICE, "sa")
    await cp.plane.send_user_message(ALICE, "sa", {"content": "hi", "reply": ["你", "好", "!"]})
    events = await collect(sub, 3)
    assert [e["data"]["text"] for e in events] == ["你", "好", "!"]
    assert [e["id"] for e in events] == [1, 2, 3] and [e["seq"] for e in events] == [1, 2, 3]
    assert {e["stream"] for e in events} == {plane_a.client.stream_id}
    assert (
        plane_a.messages == [("sa", {"content": "hi", "reply": ["你", "好", "!"]})] and plane_b.messages == []
    )

    # the connection drops before any ping confirmed the events: the client replays all of them,
    # the control plane drops the replays, and the subscriber sees each event once, in order
    await cp.plane.disconnect_exec_plane(ALICE)
    await until(lambda: plane_a.client.connects == 2)
    await cp.plane.send_user_message(ALICE, "sa", {"content": "more", "reply": ["again"]})
    more = await collect(sub, 1)
    assert [e["data"]["text"] for e in more] == ["again"] and more[0]["seq"] == 4
    await until(lambda: cp.plane.duplicate_events >= 3)
    late = cp.plane.subscribe(ALICE, "sa", after=2)  # a late subscriber gets the kept history
    assert [e["seq"] for e in await collect(late, 2)] == [3, 4]

    await cp.plane.cancel(ALICE, "sa")
    await until(lambda: plane_a.cancelled == ["sa"])
    await cp.plane.stop_session(ALICE, "sa")
    await until(lambda: plane_a.stopped)
    assert [e async for e in sub] == []  # the subscription ended with the session
    with pytest.raises(SessionNotRunning):
        await cp.plane.send_user_message(ALICE, "sa", {"content": "late"})
    await cp.plane.stop_session(ALICE, "sa")  # stopping twice is fine
    assert [(s.id, s.status) for s in cp.plane.list_sessions(ALICE)] == [
        (session_key(ALICE, "sa"), "stopped")
    ]
    # a stopped session can be started again
    await cp.plane.start_session(ALICE, "sa", config)
    await until(lambda: len(plane_a.started) == 2)


async def test_one_user_can_never_reach_another_users_session(cp: Harness) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    cp.user("carol")
    plane_a = ExecPlane(cp.client(alice))
    await plane_a.client.connect()
    await cp.plane.start_session(ALICE, "sa", {})
    await until(lambda: plane_a.started)
    sub = cp.plane.subscribe(ALICE, "sa")

    # a session id names a session of the caller: Bob's "sa" is Bob's own, never Alice's
    assert session_key(BOB, "sa") != session_key(ALICE, "sa")
    with pytest.raises(ExecPlaneUnavailable):  # it would start on Bob's machine, which is away
        await cp.plane.start_session(BOB, "sa", {})
    for reach in (
        lambda: cp.plane.send_user_message(BOB, "sa", {"content": "hijack"}),
        lambda: cp.plane.cancel(BOB, "sa"),
        lambda: cp.plane.stop_session(BOB, "sa"),
    ):
        with pytest.raises(SessionNotFound):
            await reach()
    with pytest.raises(SessionNotFound):
        cp.plane.subscribe(BOB, "sa")
    with pytest.raises(SessionNotFound):
        cp.plane.subscribe(ALICE, "nope")
    with pytest.raises(SessionNotFound):
        await cp.plane.send_user_message(ALICE, "nope", {})
    with pytest.raises(ExecPlaneUnavailable):
        await cp.plane.start_session("carol", "sc", {})
    assert plane_a.messages == [] and plane_a.stopped == []

    # Bob's execution plane cannot inject events or snapshots into Alice's session: what it sends
    # for "sa" is Bob's own session "sa"
    ws = await cp.raw_connect(BOB, bob.token, bob.ticket)
    await recv_type(ws, "init")
    await ws.send(encode(sse_event_frame("sa", {"text": "injected"}, 1, "evil")))
    await ws.send(encode(fire_and_forget_frame("x1", "sa", "snapshot_sync", {"evil": True})))
    await settle(ws)
    assert cp.plane.store.get_snapshot(ALICE, "sa") is None
    assert [e["data"] for e in await collect(cp.plane.subscribe(BOB, "sa", after=0), 1)] == [
        {"text": "injected"}
    ]
    await plane_a.client.send_sse_event("sa", {"text": "real"})
    assert [e["data"] for e in await collect(sub, 1)] == [{"text": "real"}]


async def test_sse_events_are_deduplicated_by_stream_session_and_seq(cp: Harness) -> None:
    alice = cp.user(ALICE)
    ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    await recv_type(ws, "init")
    await cp.plane.start_session(ALICE, "s1", {})
    await recv_type(ws, "start_session")
    sub = cp.plane.subscribe(ALICE, "s1")
    sent = [("A", 1), ("A", 2), ("A", 2), ("A", 1), ("A", 3), ("B", 1), ("A", 3), ("B", 2), ("A", 5)]
    for stream, seq in sent:
        await ws.send(encode(sse_event_frame("s1", f"{stream}{seq}", seq, stream)))
    events = await collect(sub, 6)
    assert [e["data"] for e in events] == ["A1", "A2", "A3", "B1", "B2", "A5"]
    assert [e["id"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert cp.plane.duplicate_events == 3
    # events of a session the execution plane started itself (through its API) are recorded
    await ws.send(encode(sse_event_frame("own", "x", 1, "A")))
    await settle(ws)
    assert [e["data"] for e in await collect(cp.plane.subscribe(ALICE, "own", after=0), 1)] == ["x"]
    with pytest.raises(SessionNotFound):
        cp.plane.subscribe(ALICE, "never-seen")


async def test_several_frames_in_one_message_are_read_one_per_line(cp: Harness) -> None:
    alice = cp.user(ALICE)
    ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    init = await recv_type(ws, "init")
    assert init["data"]["frames_per_line"] is True
    await cp.plane.start_session(ALICE, "s1", {})
    await recv_type(ws, "start_session")
    sub = cp.plane.subscribe(ALICE, "s1")
    texts = ["第一行\n第二行", "two", "three"]  # a newline inside a string is escaped in the JSON
    lines = [encode(sse_event_frame("s1", {"text": text}, seq, "A")) for seq, text in enumerate(texts, 1)]
    await ws.send("\n".join([*lines[:2], "not json", lines[2]]))  # a bad line is refused alone
    assert (await recv_type(ws, "error"))["error"]["code"] == "bad_frame"
    assert [e["data"]["text"] for e in await collect(sub, 3)] == texts
    await settle(ws)


async def test_a_lagging_subscriber_continues_from_the_event_log(tmp_path: Path) -> None:
    cp = await Harness(tmp_path, subscriber_buffer=2).start()
    try:
        alice = cp.user(ALICE)
        ws = await cp.raw_connect(ALICE, alice.token, alice.ticket)
        await recv_type(ws, "init")
        await cp.plane.start_session(ALICE, "s1", {})
        sub = cp.plane.subscribe(ALICE, "s1")
        for seq in range(1, 6):
            await ws.send(encode(sse_event_frame("s1", seq, seq, "A")))
        await settle(ws)
        # five live events for a buffer of two: the queue overflowed, the log fills the gap
        events = await collect(sub, 5)
        assert [e["data"] for e in events] == [1, 2, 3, 4, 5] and [e["id"] for e in events] == [1, 2, 3, 4, 5]
        assert [e["data"] for e in await collect(cp.plane.subscribe(ALICE, "s1", after=2), 2)] == [3, 4]
    finally:
        await cp.stop()


# -- resume -----------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_request_pending_during_a_drop_resolves_exactly_once(cp: Harness) -> None:
    alice = cp.user(ALICE)
    gates: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}
    runs: list[int] = []

    async def slow(context: RequestContext) -> dict[str, Any]:
        number = int(context.params["n"])
        runs.append(number)
        await gates[number].wait()
        return {"n": number, "user": context.user_id}

    cp.plane.register_method("slow", slow)
    seen: list[dict[str, Any]] = []
    client = cp.client(
        alice,
        backoff=(0.5, 0.5, 0.5),
        on_frame=lambda direction, frame: seen.append(frame) if direction == "in" else None,
    )
    await client.connect()

    # 1. finished while the execution plane was away: resume answers "completed"
    first = asyncio.create_task(client.call("s", "slow", {"n": 1}))
    await until(lambda: cp.plane.running_requests(ALICE) == 1)
    await cp.plane.disconnect_exec_plane(ALICE)
    await until(lambda: not cp.plane.is_connected(ALICE))
    gates[1].set()
    await until(lambda: cp.plane.running_requests(ALICE) == 0)
    assert await asyncio.wait_for(first, 5) == {"n": 1, "user": ALICE}
    resumes = [f for f in seen if f["type"] == "resume_response"]
    assert len(resumes) == 1 and list(resumes[0]["results"].values()) == [
        {"status": "completed", "data": {"n": 1, "user": ALICE}}
    ]
    assert not [f for f in seen if f["type"] == "response"]

    # 2. still running at the reconnect: resume answers "pending", the response follows
    second = asyncio.create_task(client.call("s", "slow", {"n": 2}))
    await until(lambda: cp.plane.running_requests(ALICE) == 1)
    await cp.plane.disconnect_exec_plane(ALICE)
    await until(lambda: len([f for f in seen if f["type"] == "resume_response"]) == 2)
    assert list([f for f in seen if f["type"] == "resume_response"][1]["results"].values()) == [
        {"status": "pending"}
    ]
    assert not second.done()
    gates[2].set()
    assert await asyncio.wait_for(second, 5) == {"n": 2, "user": ALICE}
    assert len([f for f in seen if f["type"] == "response"]) == 1
    assert runs == [1, 2]  # each request was carried out once


async def test_resume_answers_lost_for_unknown_ids_and_never_another_users_results(cp: Harness) -> None:
    alice, bob = cp.user(ALICE), cp.user(BOB)
    cp.plane.register_method("echo", lambda context: asyncio.sleep(0, result=context.params))
    ws_a = await cp.raw_connect(ALICE, alice.token, alice.ticket)
    await recv_type(ws_a, "init")
    await ws_a.send(encode(request_frame("shared-id", "s", "echo", {"secret": "alice"})))
    assert (await recv_type(ws_a, "response"))["result"] == {"secret": "alice"}
    await ws_a.send(encode(resume_frame(["shared-id", "never-sent"])))
    results = (await recv_type(ws_a, "resume_response"))["results"]
    assert results == {
        "shared-id": {"status": "completed", "data": {"secret": "alice"}},
        "never-sent": {"status": "lost"},
    }
    ws_b = await cp.raw_connect(BOB, bob.token, bob.ticket)
    await recv_type(ws_b, "init")
    await ws_b.send(encode(resume_frame(["shared-id"])))
    assert (await recv_type(ws_b, "resume_response"))["results"] == {"shared-id": {"status": "lost"}}
    await ws_a.send(encode(request_frame("r2", "s", "no_such_method", {})))
    assert (await recv_type(ws_a, "response"))["error"]["code"] == "unknown_method"


# -- the data layer ---------------------------------------------------------------------------------


@pytest.fixture
def store(database_url: str) -> Iterator[ControlPlaneStore]:
    opened = ControlPlaneStore.open(database_url)
    yield opened
    opened.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_schema_is_migrated_and_shares_a_database_with_the_inbox(database_url: str) -> None:
    store = ControlPlaneStore.open(database_url)
    try:
        assert current_revision(store.engine) == "0005"
        migrate_inbox(store.engine)
        ControlPlaneStore.open(database_url).close()  # migrating again is a no-op
        tables = set(sa.inspect(store.engine).get_table_names())
        assert {
            VERSION_TABLE,
            INBOX_VERSION_TABLE,
            "users",
            "user_tokens",
            "orgs",
            "usage",
            "tickets",
            "session_events",
            "session_event_counters",
            "session_transcripts",
            "user_memories",
            "user_mcp_servers",
            "request_outcomes",
            "tasks",
            "messages",
        } <= tables
    finally:
        store.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_tickets_in_sql_are_single_use_even_under_concurrency(store: ControlPlaneStore) -> None:
    store.create_user(ALICE, "Alice", {})
    clock = Clock()
    tickets = TicketStore(SqlTicketBackend(store.engine), clock=clock)
    ticket = tickets.issue(ALICE, "vm-1")
    wins: list[str] = []
    errors: list[str] = []

    def redeem() -> None:
        try:
            wins.append(tickets.redeem_record(ticket, ALICE).vm_id or "")
        except TicketRejected as exc:
            errors.append(exc.reason)

    threads = [threading.Thread(target=redeem) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wins == ["vm-1"] and errors == ["reused"] * 7

    for reason, prepare in (
        ("expired", lambda t: setattr(clock, "offset", clock.offset + 31)),
        ("user_mismatch", lambda t: None),
    ):
        fresh = tickets.issue(ALICE)
        prepare(fresh)
        with pytest.raises(TicketRejected) as rejected:
            tickets.redeem(fresh, ALICE if reason != "user_mismatch" else BOB)
        assert rejected.value.reason == reason
    with pytest.raises(TicketRejected) as unknown:
        tickets.redeem("x" * 43)
    assert unknown.value.reason == "unknown"
    clock.offset += 120
    tickets.issue(ALICE)  # purges the old ones
    with store.engine.connect() as db:
        assert db.execute(sa.text("SELECT count(*) FROM tickets")).scalar_one() == 1


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_store_records_sessions_and_packages(store: ControlPlaneStore) -> None:
    store.create_user(ALICE, "Alice", ALICE_KEYS, org_id="o")
    store.create_user(BOB, "Bob", {})
    with pytest.raises(UserExists):
        store.create_user(ALICE, "Again", {})
    assert store.get_user(ALICE) is not None and store.get_user(ALICE).api_keys == ALICE_KEYS  # type: ignore[union-attr]

    assert store.add_usage(ALICE, "r", "s", {"model": "m", "tokens_in": 1, "tokens_out": 2}, None)
    assert not store.add_usage(ALICE, "r", "s", {"model": "m", "tokens_in": 1, "tokens_out": 2}, None)
    assert store.add_usage(BOB, "r", "s", {"model": "m"}, None)  # ids are per user
    assert store.add_audit(ALICE, "r", "s", {"event": "e"}, "2026-01-01T00:00:00Z")
    assert not store.add_audit(ALICE, "r", "s", {"event": "e"}, "2026-01-01T00:00:00Z")
    assert store.add_evolution(ALICE, "r", "s", {"k": [1, 2]}, None)
    assert not store.add_evolution(ALICE, "r", "s", {"k": [1, 2]}, None)

    assert store.upsert_snapshot(ALICE, "s", {"v": 2}, "2026-01-01T00:00:02Z")
    assert not store.upsert_snapshot(ALICE, "s", {"v": 1}, "2026-01-01T00:00:01Z")  # older: kept out
    assert store.upsert_snapshot(ALICE, "s", {"v": 3}, "2026-01-01T00:00:03Z")
    assert store.get_snapshot(ALICE, "s") == {"v": 3} and store.get_snapshot(BOB, "s") is None

    assert store.claim_session("s1", ALICE).user_id == ALICE
    assert store.claim_session("s1", BOB).user_id == ALICE  # first owner wins
    store.set_session_status("s1", BOB, "stopped")  # not Bob's: nothing changes
    assert store.get_session("s1").status == "running"  # type: ignore[union-attr]

    files = [{"path": "SKILL.md", "content": "x"}]
    store.add_skill_package("k", "1", files)
    store.add_skill_package("k", "2", files)
    store.add_skill_package("k", "1", files, user_id=ALICE)
    with pytest.raises(SkillPackageExists):
        store.add_skill_package("k", "1", files)
    with pytest.raises(SkillPackageExists):
        store.add_skill_package("k", "1", files, user_id=ALICE)
    store.add_skill_package("k", "1", files, user_id=BOB)
    found = store.find_skill_package(ALICE, "k", "latest")
    assert found is not None and (found.user_id, found.version) == (ALICE, "1")
    found = store.find_skill_package(ALICE, "k", "2")
    assert found is not None and (found.user_id, found.version) == (None, "2")
    found = store.find_skill_package("carol", "k", "latest")
    assert found is not None and (found.user_id, found.version) == (None, "2")
    assert store.find_skill_package(ALICE, "missing", "latest") is None
    assert store.list_skill_versions(ALICE, "k") == ["1", "2"]


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_runtime_and_model_settings_are_stored_and_resolved_session_agent_user_org(
    tmp_path: Path, database_url: str
) -> None:
    """Issue 15 §4: a user's and an organisation's runtime and model are stored; a session's model
    comes from the first of session, agent, user, organisation that names one, else none (the
    execution plane's own ``CLAWLET_LLM_*`` model)."""
    plane = ControlPlane(
        ControlPlaneConfig(data_dir=tmp_path / "cp", jwt_secret=SECRET, database_url=database_url)
    )
    try:
        plane.create_user("carol", "Carol", {}, org_id="acme")
        assert plane.resolve_session_runtime("carol", {}) == ("semigraph", {})  # the exec plane's model
        plane.set_org_runtime_type("acme", "openclaw")
        plane.set_org_model_settings("acme", {"model": "deepseek/deepseek-chat"})
        assert plane.resolve_session_runtime("carol", {}) == ("openclaw", {"model": "deepseek/deepseek-chat"})
        user_model = {"model": "openai/gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1"}
        carol = plane.update_user("carol", model_settings=user_model)
        assert carol.model_settings == user_model and plane.get_user("carol") == carol
        assert plane.resolve_session_runtime("carol", {}) == ("openclaw", user_model)
        # the agent's settings travel together: its model comes without the user's base URL
        agent = {"agent_config": {"runtime_type": "semigraph", "model": "claude-x", "provider": "anthropic"}}
        assert plane.resolve_session_runtime("carol", agent) == (
            "semigraph",
            {"model": "claude-x", "provider": "anthropic"},
        )
        assert (
            plane.resolve_session_runtime("carol", {"agent_config": {"system_prompt": "hi"}})[1] == user_model
        )
        session = {**agent, "runtime_type": "openclaw", "model_settings": {"model": "openai/o3"}}
        assert plane.resolve_session_runtime("carol", session) == ("openclaw", {"model": "openai/o3"})
        # cleared: the organisation's again, then nothing
        plane.update_user("carol", model_settings={})
        assert plane.get_user("carol").model_settings is None  # type: ignore[union-attr]
        assert plane.resolve_session_runtime("carol", {})[1] == {"model": "deepseek/deepseek-chat"}
        plane.set_org_model_settings("acme", None)
        assert plane.resolve_session_runtime("carol", {}) == ("openclaw", {})
        for bad in (
            {"base_url": "http://x"},
            {"model": "m", "base_url": "ftp://x"},
            {"model": "m", "k": "v"},
        ):
            with pytest.raises(ValueError):
                plane.update_user("carol", model_settings=bad)
    finally:
        plane.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
@pytest.mark.slow
def test_add_user_and_set_runtime_store_the_runtime_and_model(tmp_path: Path, database_url: str) -> None:
    """``clawlet control-plane add-user --runtime-type --model`` and ``set-runtime``, as an admin runs
    them (subprocesses on the database of ``CLAWLET_CP_DATABASE_URL``)."""
    data = str(tmp_path / "cp")
    env = {**os.environ, "CLAWLET_CP_DATABASE_URL": database_url, "CLAWLET_CP_JWT_SECRET": SECRET}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", data, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)

    added = cli("add-user", "dave", "--runtime-type", "openclaw", "--model", "openai/gpt-4o-mini")
    assert added.returncode == 0 and added.stdout.startswith("clu_"), added.stderr
    bad = cli("add-user", "erin", "--model", "gpt-4o", "--base-url", "not-a-url")
    assert bad.returncode == 2 and "base_url" in bad.stderr
    changed = cli(
        "set-runtime", "dave", "--model", "anthropic/claude-x", "--base-url", "https://llm.example/v1"
    )
    assert changed.returncode == 0, changed.stderr
    assert (
        "runtime=openclaw" in changed.stdout
        and "model=anthropic/claude-x at https://llm.example/v1" in changed.stdout
    )
    assert cli("set-runtime", "dave").returncode == 2  # nothing to change
    assert cli("set-runtime", "nobody", "--runtime-type", "openclaw").returncode == 2
    listed = cli("users")
    assert listed.returncode == 0 and "erin" not in listed.stdout  # the refused add-user created nothing
    plane = ControlPlane(
        ControlPlaneConfig(data_dir=Path(data), jwt_secret=SECRET, database_url=database_url)
    )
    try:
        dave = plane.get_user("dave")
        assert dave is not None and dave.runtime_type == "openclaw"
        assert dave.model_settings == {"model": "anthropic/claude-x", "base_url": "https://llm.example/v1"}
    finally:
        plane.close()
    cleared = cli("set-runtime", "dave", "--runtime-type", "", "--model", "")
    assert cleared.returncode == 0 and "runtime=-\tmodel=-" in cleared.stdout, cleared.stdout


async def test_the_start_frame_carries_the_resolved_model_in_agent_config(cp: Harness) -> None:
    """The model the control plane resolved reaches the execution plane in ``agent_config`` (beside
    the agent's other settings); with none stored, ``agent_config`` is as the caller gave it and the
    execution plane uses its own model."""
    creds = cp.user("olive")
    cp.plane.update_user("olive", runtime_type="openclaw")
    plane = ExecPlane(cp.client(creds))
    await plane.client.connect()
    await cp.plane.start_session("olive", "o1", {})
    await until(lambda: plane.started)
    assert plane.started[0]["runtime_type"] == "openclaw" and "agent_config" not in plane.started[0]

    cp.plane.update_user(
        "olive", model_settings={"model": "openai/gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1"}
    )
    await cp.plane.start_session(
        "olive", "o2", {"agent_config": {"system_prompt": "Be brief.", "model": "x"}}
    )
    await until(lambda: len(plane.started) == 2)
    # the agent's own model (x) wins over the user's; its other settings stay
    assert plane.started[1]["agent_config"] == {"system_prompt": "Be brief.", "model": "x"}
    await cp.plane.start_session("olive", "o3", {"agent_config": {"system_prompt": "Be brief."}})
    await until(lambda: len(plane.started) == 3)
    assert plane.started[2]["agent_config"] == {
        "system_prompt": "Be brief.",
        "model": "openai/gpt-4o-mini",
        "base_url": "http://127.0.0.1:9/v1",
    }
    await cp.plane.start_session("olive", "o4", {"model_settings": {"model": "openai/o3"}})
    await until(lambda: len(plane.started) == 4)
    assert (
        plane.started[3]["agent_config"] == {"model": "openai/o3"}
        and "model_settings" not in plane.started[3]
    )


def test_user_ids_must_be_plain_names(tmp_path: Path) -> None:
    plane = ControlPlane(ControlPlaneConfig(data_dir=tmp_path / "cp", jwt_secret=SECRET))
    try:
        for bad in ("../evil", ".hidden", "a/b", "", "x" * 200):
            with pytest.raises(InvalidUserId):
                plane.create_user(bad, "x", {})
        with pytest.raises(ValueError):
            ControlPlane(ControlPlaneConfig(data_dir=tmp_path / "cp2", jwt_secret="short"))
    finally:
        plane.close()


def test_the_ticket_filter_masks_tickets_in_log_records() -> None:
    record = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5", "/ws/vm?user_id=a&ticket=SECRET-TICKET"),
        None,
    )
    TicketRedactingFilter().filter(record)
    assert "SECRET-TICKET" not in record.getMessage() and "ticket=***" in record.getMessage()

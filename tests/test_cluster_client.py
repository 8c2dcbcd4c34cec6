"""The execution plane's control-plane client (clawlet.execplane.client) against a scripted control plane.

Everything runs on loopback with tiny timeouts and backoff; the control plane is
``tests/support/scripted_control_plane.py`` (a real websockets server using clawlet.controlplane.auth).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from clawlet.cluster.protocol import (
    ERR_PROTOCOL_MISMATCH,
    ERR_TICKET_REJECTED,
    ERR_TOKEN_INVALID,
    EVENT_ENCODING,
    FF_SNAPSHOT_SYNC,
    INIT_EVENT_ENCODING,
    MESSAGE_TYPES,
    RECONNECT_BACKOFF,
    FrameError,
    completed,
    completed_with_error,
    decode,
    encode,
    lost,
    redact_frame,
    response_frame,
    still_pending,
)
from clawlet.controlplane.auth import TicketStore
from clawlet.execplane.client import (
    ControlPlaneClient,
    ControlPlaneError,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    RequestLost,
    RequestTimeout,
    connect_url,
    safe_url,
)
from clawlet.execplane.offline import USAGE_QUEUE_FILE, DiskQueue, ReplayBuffer
from tests.support.scripted_control_plane import NEVER, Reply, ScriptedControlPlane

USER = "user-1"
#: Seconds within which "at once" must happen: far longer than any delay on a loaded machine, far
#: shorter than the request timeout (SLOW) a call would wait for if it did not fail at once.
AT_ONCE = 30.0
SLOW = 600.0
OPENAI_KEY = "sk-test-openai-key"


async def until(condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def plane() -> AsyncIterator[ScriptedControlPlane]:
    async with ScriptedControlPlane(api_keys={"openai": OPENAI_KEY}) as p:
        yield p


@pytest.fixture
async def make_client(
    plane: ScriptedControlPlane, tmp_path: Path
) -> AsyncIterator[Callable[..., ControlPlaneClient]]:
    made: list[ControlPlaneClient] = []

    def make(*, ticket: bool | str = True, token: str | None = None, **options: Any) -> ControlPlaneClient:
        settings: dict[str, Any] = {
            "state_dir": tmp_path / "state",
            "request_timeout": 5.0,
            "heartbeat_interval": 30.0,
            "backoff": (0.02, 0.02, 0.02),
            "connect_timeout": 2.0,
        }
        settings.update(options)
        the_ticket = ticket if isinstance(ticket, str) else (plane.issue_ticket(USER) if ticket else None)
        client = ControlPlaneClient(plane.url, USER, token or plane.issue_token(USER), the_ticket, **settings)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def disconnected(client: ControlPlaneClient) -> None:
    await until(lambda: not client.connected)


# -- handshake -----------------------------------------------------------------------------------


async def test_handshake_ticket_once_jwt_only_in_auth_frame(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    observed: list[tuple[str, dict[str, Any]]] = []
    token = plane.issue_token(USER)
    ticket = plane.issue_ticket(USER)
    client = make_client(ticket=ticket, token=token, on_frame=lambda d, f: observed.append((d, f)))

    data = await client.connect()

    assert data["user_id"] == USER
    assert data["org_id"] == "org-1"
    assert client.api_keys == {"openai": OPENAI_KEY}
    first = plane.latest
    assert first.ticket == ticket and first.user_id == USER
    assert token not in first.path
    assert first.received[0] == {"type": "auth", "token": token}

    first.drop()
    second = await plane.wait_connections(2)
    assert second.ticket is None
    assert "ticket" not in second.path and token not in second.path
    assert second.received[0] == {"type": "auth", "token": token}

    # the JWT travelled in the two auth frames and nowhere else
    carrying = [raw for conn in plane.connections for raw in conn.raw_received if token in raw]
    assert len(carrying) == 2 and all(json.loads(raw)["type"] == "auth" for raw in carrying)

    urls = [frame["url"] for direction, frame in observed if direction == "connect"]
    assert len(urls) == 2
    assert f"ticket={ticket}" in urls[0] and "ticket" not in urls[1]
    assert all(token not in url for url in urls)
    assert all(token not in json.dumps(frame) for _, frame in observed)
    assert all(OPENAI_KEY not in json.dumps(frame) for _, frame in observed)
    inits = [frame for direction, frame in observed if direction == "in" and frame["type"] == "init"]
    assert inits[0]["data"]["api_keys"] == {"openai": "***"}


async def test_secrets_never_logged_or_written(
    plane: ScriptedControlPlane,
    make_client: Callable[..., ControlPlaneClient],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    token = plane.issue_token(USER)
    ticket = plane.issue_ticket(USER)
    plane.methods["memory_search"] = ["hit"]
    client = make_client(ticket=ticket, token=token)
    await client.connect()
    assert await client.memory_search("s1", "query") == ["hit"]
    plane.latest.drop()
    await plane.wait_connections(2)
    await plane.stop()
    await disconnected(client)
    await client.report_usage("s1", "gpt", 1, 2)
    await plane.start()
    await until(lambda: client.connected)
    await until(lambda: len(plane.fire_and_forget) == 1)

    client_logs = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if r.name != "websockets.server"
    )
    assert "control plane" in client_logs  # the client did log
    for secret in (token, ticket, OPENAI_KEY):
        assert secret not in client_logs
    assert token not in repr(client)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            content = path.read_text(errors="replace")
            assert token not in content and OPENAI_KEY not in content


async def test_reused_ticket_is_refused(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    ticket = plane.issue_ticket(USER)
    await make_client(ticket=ticket).connect()
    second = make_client(ticket=ticket)
    with pytest.raises(ControlPlaneRefused) as info:
        await second.connect()
    assert info.value.code == ERR_TICKET_REJECTED and info.value.final
    assert "already used" in str(info.value)
    assert not second.connected and second.state == "idle"


@pytest.mark.parametrize("encoding", [None, "clawlet-events/0"])
async def test_a_control_plane_of_another_event_encoding_is_refused_for_good(
    encoding: str | None, plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    """It could not read this side's events: the exec plane says so and does not retry."""
    if encoding is None:  # a control plane from before the encoding was named
        del plane.init_extra[INIT_EVENT_ENCODING]
    else:
        plane.init_extra[INIT_EVENT_ENCODING] = encoding
    client = make_client()
    with pytest.raises(ControlPlaneRefused) as info:
        await client.connect()
    assert info.value.code == ERR_PROTOCOL_MISMATCH and info.value.final
    assert EVENT_ENCODING in info.value.message and "same clawlet version" in info.value.message
    assert not client.connected


async def test_expired_ticket_is_refused(tmp_path: Path) -> None:
    now = [1_000_000.0]
    async with ScriptedControlPlane(tickets=TicketStore(clock=lambda: now[0])) as plane:
        ticket = plane.issue_ticket(USER)
        now[0] += 30.0
        client = ControlPlaneClient(plane.url, USER, plane.issue_token(USER), ticket, state_dir=tmp_path)
        with pytest.raises(ControlPlaneRefused) as info:
            await client.connect()
        assert info.value.code == ERR_TICKET_REJECTED
        assert "expired" in info.value.message
        await client.close()


@pytest.mark.parametrize("problem", ["other_secret", "other_user", "expired"])
async def test_bad_tokens_are_refused(
    problem: str, plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    from clawlet.controlplane.auth import issue_vm_token

    if problem == "other_secret":
        token = issue_vm_token(USER, "x" * 64, 60)
    elif problem == "other_user":
        token = plane.issue_token("someone-else")
    else:
        token = plane.issue_token(USER, ttl=1, now=time.time() - 10)
    client = make_client(token=token)
    with pytest.raises(ControlPlaneRefused) as info:
        await client.connect()
    assert info.value.code == ERR_TOKEN_INVALID


async def test_http_refusal_and_unreachable_control_plane(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.http_status = 403
    with pytest.raises(ControlPlaneRefused) as refused:
        await make_client().connect()
    assert refused.value.code == "http_403"
    plane.http_status = None
    await plane.stop()
    client = make_client()
    with pytest.raises(ControlPlaneUnavailable) as down:
        await client.connect()
    assert not isinstance(down.value, ControlPlaneRefused)
    assert "cannot connect" in str(down.value) and "ticket" not in str(down.value)


# -- requests ------------------------------------------------------------------------------------


async def test_requests_matched_by_id(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["get_skill_package"] = Reply(result={"files": ["SKILL.md"]}, delay=0.2)
    plane.methods["memory_search"] = lambda params: [{"text": params["query"]}]
    client = make_client()
    await client.connect()

    slow, fast = await asyncio.gather(
        client.get_skill_package("s1", "skill-a"), client.memory_search("s2", "hello", top_k=3)
    )

    assert slow == {"files": ["SKILL.md"]}
    assert fast == [{"text": "hello"}]
    requests = plane.frames("request")
    assert {r["method"] for r in requests} == {"get_skill_package", "memory_search"}
    by_method = {r["method"]: r for r in requests}
    assert by_method["get_skill_package"]["session_id"] == "s1"
    assert by_method["get_skill_package"]["params"] == {"skill_id": "skill-a", "version": "latest"}
    assert by_method["memory_search"]["params"] == {"query": "hello", "top_k": 3}
    assert len({r["id"] for r in requests}) == 2
    assert client.pending_count == 0


async def test_error_answers_raise(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["mcp_call"] = Reply(error=("tool_failed", "boom"))
    client = make_client()
    await client.connect()
    with pytest.raises(ControlPlaneError) as info:
        await client.mcp_call("s1", "github", "search", {"q": "x"})
    assert (info.value.code, info.value.message) == ("tool_failed", "boom")
    assert plane.frames("request")[0]["params"] == {
        "server": "github",
        "tool": "search",
        "arguments": {"q": "x"},
    }
    with pytest.raises(ControlPlaneError) as unknown:
        await client.request("s1", "no_such_method", a=1)
    assert unknown.value.code == "unknown_method"


async def test_request_timeout_cleans_up(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["memory_search"] = NEVER
    client = make_client(request_timeout=0.2)
    await client.connect()
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as info:  # the method never answers: only the timeout ends it
        await asyncio.wait_for(client.request("s1", "memory_search", query="q"), AT_ONCE)
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started >= 0.15  # it waited for its timeout
    assert "0.2s" in str(info.value)
    assert client.pending_count == 0
    # a late answer is ignored and the connection stays usable
    late_id = plane.frames("request")[0]["id"]
    await plane.send(dict(response_frame(late_id, ["late"])))
    plane.methods["memory_search"] = ["ok"]
    assert await client.memory_search("s1", "q") == ["ok"]
    # memory_search degrades a timeout to no memories
    plane.methods["memory_search"] = NEVER
    assert await client.memory_search("s1", "q") == []


async def test_heartbeat(plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]) -> None:
    client = make_client(heartbeat_interval=0.05)
    await client.connect()
    await plane.wait_for(lambda: len(plane.frames("heartbeat")) >= 3)
    assert all(isinstance(f.get("ts"), float) for f in plane.frames("heartbeat"))


# -- routing -------------------------------------------------------------------------------------


async def test_messages_routed_by_session(
    plane: ScriptedControlPlane,
    make_client: Callable[..., ControlPlaneClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    got: list[tuple[str, Any]] = []
    client = make_client()

    async def start(data: dict[str, Any]) -> None:
        got.append(("start", data["session_id"]))
        client.register_session(
            data["session_id"],
            lambda msg, sid=data["session_id"]: got.append((f"message:{sid}", msg["text"])),
            lambda msg, sid=data["session_id"]: got.append((f"cancel:{sid}", msg)),
        )

    def stop(data: dict[str, Any]) -> None:
        got.append(("stop", data["session_id"]))
        client.unregister_session(data["session_id"])

    client.on_start_session = start
    client.on_stop_session = stop
    await client.connect()

    await plane.start_session("s1", agent_config={"model": "m"})
    await plane.start_session("s2")
    await until(lambda: client.sessions == {"s1", "s2"})
    await plane.user_message("s1", {"text": "hi one"})
    await plane.user_message("s2", {"text": "hi two"})
    await plane.cancel("s2")
    await plane.user_message("ghost", {"text": "nobody"})
    await plane.stop_session("s1")
    await until(lambda: ("stop", "s1") in got)
    await plane.user_message("s1", {"text": "after stop"})
    await plane.user_message("s2", {"text": "still here"})
    await until(lambda: ("message:s2", "still here") in got)

    assert got == [
        ("start", "s1"),
        ("start", "s2"),
        ("message:s1", "hi one"),
        ("message:s2", "hi two"),
        ("cancel:s2", {}),
        ("stop", "s1"),
        ("message:s2", "still here"),
    ]
    assert "unknown session ghost" in caplog.text
    assert "unknown session s1" in caplog.text


async def test_handler_exceptions_are_contained(
    plane: ScriptedControlPlane,
    make_client: Callable[..., ControlPlaneClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    client = make_client()

    async def flaky(data: dict[str, Any]) -> None:
        seen.append(data["text"])
        if data["text"] == "explode":
            raise RuntimeError("handler bug")

    def sync_flaky(data: dict[str, Any]) -> None:
        raise ValueError("sync handler bug")

    client.on_start_session = sync_flaky
    client.register_session("s1", flaky)
    await client.connect()
    await plane.start_session("s9")
    await plane.user_message("s1", {"text": "explode"})
    await plane.user_message("s1", {"text": "after"})
    await plane.latest.send_raw("this is not json")
    await plane.send({"type": "mystery"})
    await plane.send({"type": "user_message"})  # no session id
    await plane.send({"type": "response", "id": "nobody-asked", "result": 1})
    await plane.user_message("s1", {"text": "still alive"})
    await until(lambda: "still alive" in seen)
    assert seen == ["explode", "after", "still alive"]
    assert client.connected
    assert "handler bug" in caplog.text and "sync handler bug" in caplog.text
    assert "bad frame" in caplog.text


# -- reconnect and resume ------------------------------------------------------------------------


async def test_reconnect_without_ticket_then_resume(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    for method in ("done_meanwhile", "gone", "slow", "failed"):
        plane.methods[method] = NEVER
    client = make_client()
    await client.connect()
    calls = {
        method: asyncio.ensure_future(client.request("s1", method))
        for method in ("done_meanwhile", "gone", "slow", "failed")
    }
    await plane.wait_for(lambda: len(plane.frames("request")) == 4)
    ids = {r["method"]: r["id"] for r in plane.frames("request")}
    plane.resume_results = {
        ids["done_meanwhile"]: completed({"answer": 42}),
        ids["gone"]: lost(),
        ids["slow"]: still_pending(),
        ids["failed"]: completed_with_error("tool_failed", "it broke"),
    }

    plane.latest.drop()
    second = await plane.wait_connections(2)

    assert await calls["done_meanwhile"] == {"answer": 42}
    with pytest.raises(RequestLost, match="lost while reconnecting"):
        await calls["gone"]
    with pytest.raises(ControlPlaneError, match="it broke"):
        await calls["failed"]
    assert not calls["slow"].done()
    await second.send(dict(response_frame(ids["slow"], "finally")))
    assert await calls["slow"] == "finally"

    assert second.ticket is None
    assert [f["type"] for f in second.received[:2]] == ["auth", "resume"]
    assert set(second.received[1]["pending_ids"]) == set(ids.values())
    assert client.pending_count == 0 and client.connects == 2


async def test_resume_default_ids_missing_are_lost(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["x"] = NEVER
    plane.resume_results = {}
    client = make_client()
    await client.connect()
    call = asyncio.ensure_future(client.request("s1", "x"))
    await plane.wait_for(lambda: plane.frames("request"))
    plane.latest.drop()
    with pytest.raises(RequestLost):
        await call


async def test_exhausted_reconnects_fail_pending_then_recover(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["mcp_call"] = NEVER
    client = make_client(backoff=(0.01, 0.02, 0.03), request_timeout=SLOW)
    await client.connect()
    in_flight = asyncio.ensure_future(client.mcp_call("s1", "srv", "tool"))
    await plane.wait_for(lambda: plane.frames("request"))

    await plane.stop()
    with pytest.raises(ControlPlaneUnavailable, match="control plane unreachable") as info:
        await asyncio.wait_for(in_flight, AT_ONCE)
    assert "3 reconnect attempts" in str(info.value)
    assert client.state == "offline" and client.pending_count == 0

    # failing fast: well before the request timeout (SLOW) a waiting call would sit out
    async with asyncio.timeout(AT_ONCE):
        with pytest.raises(ControlPlaneUnavailable, match="unreachable"):
            await client.request("s1", "anything")
        with pytest.raises(ControlPlaneUnavailable, match="remote MCP tool srv/tool is unavailable"):
            await client.mcp_call("s1", "srv", "tool")
        with pytest.raises(ControlPlaneUnavailable, match="not cached locally"):
            await client.get_skill_package("s1", "skill")
        assert await client.memory_search("s1", "q") == []

    plane.methods["mcp_call"] = {"ok": True}
    await plane.start()
    await until(lambda: client.connected)
    assert client.state == "connected"
    assert await client.mcp_call("s1", "srv", "tool") == {"ok": True}
    assert plane.latest.ticket is None


async def test_final_refusal_while_reconnecting_stops_the_client(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["x"] = NEVER
    client = make_client()
    await client.connect()
    call = asyncio.ensure_future(client.request("s1", "x"))
    await plane.wait_for(lambda: plane.frames("request"))
    plane.refusal = (ERR_TOKEN_INVALID, "token revoked")
    plane.latest.drop()
    with pytest.raises(ControlPlaneRefused, match="token revoked"):
        await call
    with pytest.raises(ControlPlaneRefused):
        await client.wait_closed()
    assert client.state == "closed"
    attempts = len(plane.connections)
    await asyncio.sleep(0.1)
    assert len(plane.connections) == attempts  # no more reconnects


async def test_close_fails_waiting_requests(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    plane.methods["x"] = NEVER
    client = make_client()
    await client.connect()
    call = asyncio.ensure_future(client.request("s1", "x"))
    await plane.wait_for(lambda: plane.frames("request"))
    await client.close()
    with pytest.raises(ControlPlaneUnavailable, match="closed"):
        await call
    with pytest.raises(ControlPlaneUnavailable, match="closed"):
        await client.request("s1", "x")
    await client.wait_closed()
    with pytest.raises(ControlPlaneUnavailable):
        await client.connect()


# -- degraded mode: fire-and-forget queue ----------------------------------------------------------


def queued_lines(client: ControlPlaneClient) -> list[dict[str, Any]]:
    if not client.queue_path.exists():
        return []
    return [json.loads(line) for line in client.queue_path.read_text().splitlines() if line.strip()]


async def test_usage_queued_on_disk_and_flushed_once(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    client = make_client()
    await client.connect()
    await client.report_usage("s1", "gpt-live", 1, 1)
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 1)
    await until(lambda: not client.queue_path.exists())  # written ahead, removed once confirmed

    await plane.stop()
    await disconnected(client)
    await client.report_usage("s1", "gpt-a", 10, 20)
    await client.log_audit("s1", "tool_run", {"tool": "shell"})
    await client.fire_and_forget("s1", FF_SNAPSHOT_SYNC, state="x")  # skipped while offline
    await client.report_usage("s2", "gpt-b", 30, 40, cost=0.5)
    lines = queued_lines(client)
    assert [line["method"] for line in lines] == ["usage_report", "audit_log", "usage_report"]
    assert client.queue_path.name == USAGE_QUEUE_FILE
    assert stat.S_IMODE(os.stat(client.queue_path).st_mode) == 0o600

    await plane.start()
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 4)
    await until(lambda: not client.queue_path.exists())
    await client.report_usage("s1", "gpt-after", 5, 5)
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 5)

    records = plane.fire_and_forget
    assert [r["params"].get("model") or r["params"].get("event") for r in records] == [
        "gpt-live",
        "gpt-a",
        "tool_run",
        "gpt-b",
        "gpt-after",
    ]
    assert records[3]["params"] == {"model": "gpt-b", "tokens_in": 30, "tokens_out": 40, "cost": 0.5}
    assert [r["id"] for r in records[1:4]] == [line["id"] for line in lines]
    assert all(r["ts"].endswith("Z") for r in records)
    assert plane.duplicate_records == 0
    assert not [f for f in plane.received if f.get("method") == FF_SNAPSHOT_SYNC]

    # another reconnect sends nothing again
    plane.latest.drop()
    await plane.wait_connections(3)
    await asyncio.sleep(0.1)
    assert len(plane.frames("fire_and_forget")) == 5


async def test_queue_survives_a_client_restart_and_skips_a_torn_line(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    first = make_client()
    await first.connect()
    await plane.stop()
    await disconnected(first)
    await first.report_usage("s1", "m1", 1, 2)
    await first.report_usage("s1", "m2", 3, 4)
    await first.close()
    with first.queue_path.open("ab") as handle:  # a crash in the middle of an append
        handle.write(b'{"type":"fire_and_forget","id":"to')
    await plane.start()

    second = make_client(ticket=False)  # a restarted daemon: its ticket is long gone
    await second.connect()
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 2)
    await until(lambda: not second.queue_path.exists())
    assert [r["params"]["model"] for r in plane.fire_and_forget] == ["m1", "m2"]


async def test_resent_records_keep_their_ids_for_deduplication(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    client = make_client()
    await client.connect()
    await plane.stop()
    await disconnected(client)
    await client.report_usage("s1", "m1", 1, 2)
    await client.report_usage("s1", "m2", 3, 4)
    saved = client.queue_path.read_bytes()
    await plane.start()
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 2)
    await until(lambda: not client.queue_path.exists())

    # a crash between sending and compacting leaves the sent records in the file
    client.queue_path.write_bytes(saved)
    plane.latest.drop()
    await plane.wait_for(lambda: plane.duplicate_records == 2)
    assert len(plane.fire_and_forget) == 2


async def test_many_records_across_a_drop_arrive_exactly_once(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    client = make_client()
    await client.connect()
    first = asyncio.gather(*(client.report_usage("s1", f"m{i}", i, i) for i in range(50)))
    await plane.wait_for(lambda: len(plane.fire_and_forget) >= 5)
    plane.latest.drop()
    await first
    await asyncio.gather(*(client.report_usage("s1", f"m{i}", i, i) for i in range(50, 80)))
    await plane.wait_for(lambda: len(plane.fire_and_forget) == 80)
    await until(lambda: not client.queue_path.exists())
    models = sorted(int(r["params"]["model"][1:]) for r in plane.fire_and_forget)
    assert models == list(range(80))


# -- degraded mode: SSE buffer -------------------------------------------------------------------


async def test_sse_buffered_and_replayed_in_order(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    client = make_client()
    await client.connect()
    assert await client.send_sse_event("s1", "a") == 1
    await plane.wait_for(lambda: len(plane.sse_events) == 1)

    await plane.stop()
    await disconnected(client)
    for session, data in (("s1", "b"), ("s2", "x"), ("s1", "c")):
        await client.send_sse_event(session, data)
    # "a" was sent but no ping confirmed it before the drop: it is replayed too
    assert client.buffered_sse_events == 4

    await plane.start()
    await plane.wait_for(lambda: len(plane.sse_events) == 4)
    await client.send_sse_event("s1", "d")
    await plane.wait_for(lambda: len(plane.sse_events) == 5)

    events = [(e["session_id"], e["data"], e["seq"]) for e in plane.sse_events]
    assert events == [("s1", "a", 1), ("s1", "b", 2), ("s2", "x", 1), ("s1", "c", 3), ("s1", "d", 4)]
    assert {e["stream"] for e in plane.sse_events} == {client.stream_id}
    assert client.buffered_sse_events == 0
    assert plane.duplicate_sse == 1  # the replayed "a", dropped by seq
    replayed = [(f["data"], f["seq"]) for f in plane.frames("sse_event")]
    assert replayed == [("a", 1), ("a", 1), ("b", 2), ("x", 1), ("c", 3), ("d", 4)]


async def test_sse_confirmed_by_heartbeat_ping_is_not_replayed(
    plane: ScriptedControlPlane, make_client: Callable[..., ControlPlaneClient]
) -> None:
    client = make_client(heartbeat_interval=0.05)
    await client.connect()
    await client.send_sse_event("s1", "a")
    await client.send_sse_event("s1", "b")
    await plane.wait_for(lambda: len(plane.frames("heartbeat")) >= 2)  # a ping/pong after both
    plane.latest.drop()
    await plane.wait_connections(2)
    await client.send_sse_event("s1", "c")
    await plane.wait_for(lambda: len(plane.sse_events) == 3)
    assert [f["data"] for f in plane.frames("sse_event")] == ["a", "b", "c"]
    assert plane.duplicate_sse == 0


async def test_sse_buffer_is_bounded_and_drops_the_oldest(
    plane: ScriptedControlPlane,
    make_client: Callable[..., ControlPlaneClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_client(sse_buffer_limit=3)
    await client.connect()
    await plane.stop()
    await disconnected(client)
    for i in range(1, 6):
        await client.send_sse_event("s1", f"e{i}")
    assert client.buffered_sse_events == 3 and client.dropped_sse_events == 2
    assert caplog.text.count("SSE buffer full") == 1
    await plane.start()
    await plane.wait_for(lambda: len(plane.sse_events) == 3)
    assert [e["seq"] for e in plane.sse_events] == [3, 4, 5]


async def test_degraded_calls_before_any_connection(tmp_path: Path) -> None:
    client = ControlPlaneClient("ws://127.0.0.1:9/ws/vm", USER, "token", state_dir=tmp_path)
    assert await client.memory_search("s1", "q") == []
    with pytest.raises(ControlPlaneUnavailable, match="not connected"):
        await client.mcp_call("s1", "srv", "tool")
    await client.report_usage("s1", "m", 1, 1)
    await client.send_sse_event("s1", "e")
    assert len(DiskQueue(tmp_path / USAGE_QUEUE_FILE)) == 1
    assert client.buffered_sse_events == 1
    await client.close()


# -- building blocks ----------------------------------------------------------------------------


def test_protocol_constants() -> None:
    assert RECONNECT_BACKOFF == (1, 2, 4, 8, 16, 30, 30, 30)
    assert {
        "auth",
        "init",
        "start_session",
        "stop_session",
        "request",
        "response",
        "fire_and_forget",
        "sse_event",
        "user_message",
        "cancel",
        "heartbeat",
        "resume",
        "resume_response",
        "error",
        # the HTTP tunnel (a clawlet extension)
        "http_request",
        "http_response",
        "http_body",
        "http_cancel",
        "http_resume",
    } == MESSAGE_TYPES


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ("{}", "no 'type'"),
        ('{"type": "bogus"}', "unknown frame type"),
        ('{"type": "request", "session_id": "s", "method": "m"}', "'id'"),
        ('{"type": "request", "id": "1", "session_id": "s", "method": "m", "params": []}', "'params'"),
        ('{"type": "user_message", "data": {}}', "session_id"),
        ('{"type": "sse_event", "session_id": "s", "data": 1, "seq": "1"}', "seq"),
        ('{"type": "resume", "pending_ids": "abc"}', "pending_ids"),
        ('{"type": "auth"}', "token"),
    ],
)
def test_decode_errors(raw: str, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode(raw)


def test_decode_is_lenient() -> None:
    request = decode('{"type":"request","id":"1","session_id":"s","method":"m","extra":true}')
    assert request == {"type": "request", "id": "1", "session_id": "s", "method": "m", "params": {}}
    start = decode('{"type":"start_session","data":{"session_id":"s1","agent_config":{}}}')
    assert start["type"] == "start_session" and start["session_id"] == "s1"
    error = decode('{"type":"response","id":"1","error":"nope"}')
    assert error == {
        "type": "response",
        "id": "1",
        "result": None,
        "error": {"code": "internal_error", "message": "nope"},
    }
    resume = decode(
        '{"type":"resume_response","results":{"a":{"status":"weird"},"b":5,"c":{"status":"completed"}}}'
    )
    assert resume["type"] == "resume_response"
    assert resume["results"] == {
        "a": {"status": "lost"},
        "b": {"status": "lost"},
        "c": {"status": "completed", "data": None},
    }
    flat_error = decode('{"type":"error","code":"token_invalid","message":"bad"}')
    assert flat_error == {"type": "error", "error": {"code": "token_invalid", "message": "bad"}}
    assert decode(encode({"type": "heartbeat", "ts": 1})) == {"type": "heartbeat", "ts": 1.0}


def test_redact_frame() -> None:
    assert redact_frame({"type": "auth", "token": "secret"}) == {"type": "auth", "token": "***"}
    init: dict[str, Any] = {"type": "init", "data": {"user_id": "u", "api_keys": {"openai": "sk-1"}}}
    assert redact_frame(init)["data"] == {"user_id": "u", "api_keys": {"openai": "***"}}
    assert init["data"]["api_keys"] == {"openai": "sk-1"}  # the original is untouched


def test_from_env(tmp_path: Path) -> None:
    env = {
        "USER_ID": "u1",
        "VM_TOKEN": "jwt",
        "VM_TICKET": "tkt",
        "CONTROL_PLANE_WS": "wss://cp.example/ws/vm",
    }
    client = ControlPlaneClient.from_env(env, state_dir=tmp_path, request_timeout=5)
    assert (client.url, client.user_id, client.request_timeout) == ("wss://cp.example/ws/vm", "u1", 5)
    assert "jwt" not in repr(client)
    restarted = ControlPlaneClient.from_env({**env, "VM_TICKET": ""}, state_dir=tmp_path)
    assert restarted._ticket is None
    with pytest.raises(ValueError, match="VM_TOKEN, CONTROL_PLANE_WS"):
        ControlPlaneClient.from_env({"USER_ID": "u1"}, state_dir=tmp_path)


def test_urls() -> None:
    assert connect_url("ws://h:1/ws/vm", "u 1", "t-k") == "ws://h:1/ws/vm?user_id=u+1&ticket=t-k"
    assert connect_url("wss://h/ws/vm?region=eu&user_id=old", "u") == "wss://h/ws/vm?region=eu&user_id=u"
    assert safe_url("wss://user:pw@h:8443/ws/vm?user_id=u&ticket=t") == "wss://h:8443/ws/vm"
    with pytest.raises(ValueError):
        ControlPlaneClient("http://h/ws/vm", "u", "t", state_dir="/tmp/x")


def test_disk_queue_appends_reads_and_compacts(tmp_path: Path) -> None:
    queue = DiskQueue(tmp_path / "q" / USAGE_QUEUE_FILE)
    assert queue.read().records == []
    for i in range(3):
        queue.append({"n": i})
    batch = queue.read(max_records=2)
    assert [r.data["n"] for r in batch.records] == [0, 1]
    queue.consume(batch.records[0].end)
    assert [r.data["n"] for r in queue.read().records] == [1, 2]
    with queue.path.open("ab") as handle:
        handle.write(b'{"n": 9')  # torn by a crash
    queue.append({"n": 3})  # starts on a fresh line
    batch = queue.read()
    assert [r.data["n"] for r in batch.records] == [1, 2, 3]
    assert batch.skipped == 1
    queue.consume(batch.end)
    assert not queue.path.exists()


def test_replay_buffer_drops_oldest() -> None:
    buffer: ReplayBuffer[int] = ReplayBuffer(2)
    assert buffer.append(1) and buffer.append(2)
    assert not buffer.append(3)
    assert list(buffer) == [2, 3] and buffer.dropped == 1
    assert buffer.popleft() == 2 and buffer.peek() == 3
    with pytest.raises(ValueError):
        ReplayBuffer(0)

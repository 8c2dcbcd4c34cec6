"""The inbox with backend ``gateway``, driving clawlet's own gateway server over a real WebSocket
on loopback: a task streams and completes, a running task is cancelled, and the client reconnects
after the gateway is killed and restarted. Every frame the inbox's gateway client sends and
receives validates against ``@openclaw/gateway-protocol``'s JSON Schema."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from clawlet.home import init_home
from clawlet.inbox.backends import GatewayBackend, task_session_name
from tests.conftest import LiveServer, assert_error, free_port
from tests.inbox_support import SseClient, wait_until
from tests.support.gateway_schema import SchemaUnavailable, load_protocol_schema

GATEWAY_TOKEN = "gw-secret-token"


class FrameLog:
    """Every frame the gateway client sent or received, with the method each response answers."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, direction: str, frame: dict[str, Any]) -> None:
        with self._lock:
            self.frames.append((direction, json.loads(json.dumps(frame))))

    def pairs(self) -> list[tuple[dict[str, Any], str | None]]:
        methods: dict[str, str] = {}
        with self._lock:
            frames = list(self.frames)
        out: list[tuple[dict[str, Any], str | None]] = []
        for direction, frame in frames:
            if direction == "out" and frame.get("type") == "req":
                methods[str(frame.get("id"))] = str(frame.get("method"))
            out.append((frame, methods.get(str(frame.get("id"))) if frame.get("type") == "res" else None))
        return out


class Harness:
    """A clawlet serving the gateway (slow demo model) and a clawlet whose inbox runs through it."""

    def __init__(
        self,
        tmp_path: Path,
        live_server: Callable[..., LiveServer],
        *,
        gateway_up: bool = True,
        timeout_ms: int = 60_000,
    ) -> None:
        self.live_server = live_server
        self.port = free_port()
        self.gateway_settings = Settings(home=tmp_path / "gateway-home", gateway_token=GATEWAY_TOKEN)
        init_home(self.gateway_settings.paths)
        if gateway_up:
            self.gateway = self.start_gateway()
        inbox_settings = Settings(
            home=tmp_path / "inbox-home",
            inbox_backend="gateway",
            openclaw_gateway_url=f"ws://127.0.0.1:{self.port}/gateway",
            openclaw_gateway_token=GATEWAY_TOKEN,
            openclaw_gateway_timeout=timeout_ms,
        )
        init_home(inbox_settings.paths)
        self.inbox = live_server(inbox_settings)
        self.frames = FrameLog()
        backend = self.inbox.app.state.inbox.executor.backend
        assert isinstance(backend, GatewayBackend)
        self.backend = backend
        backend.client.on_frame = self.frames

    def start_gateway(self) -> LiveServer:
        self.gateway = self.live_server(self.gateway_settings, demo_token_delay=0.03, port=self.port)
        return self.gateway

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.inbox.url + "/api/v1", timeout=15)


@pytest.fixture
def harness(tmp_path: Path, live_server: Callable[..., LiveServer]) -> Harness:
    return Harness(tmp_path, live_server)


def gateway_transcript(server: LiveServer, task_id: str) -> dict[str, Any]:
    path = server.settings.paths.sessions / f"{task_session_name(task_id)}.json"
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def status_of(client: httpx.Client, task_id: str) -> str:
    return str(client.get(f"/tasks/{task_id}").json()["status"])


@pytest.mark.slow
def test_a_task_streams_through_the_gateway_and_completes(
    harness: Harness,
) -> None:
    inbox, frames = harness.inbox, harness.frames
    with (
        httpx.Client(base_url=inbox.url + "/api/v1", timeout=15) as client,
        SseClient(inbox.url + "/api/v1/events") as events,
    ):
        assert client.get("/health").json()["backend"] == "gateway"
        task = client.post("/tasks", json={"content": "你好，网关！请回答这个问题"}).json()
        assert task["status"] == "pending"
        events.wait_for(lambda evs: any(n == "task.updated" and d["status"] == "completed" for n, d in evs))
        deltas = [d["content"] for d in events.of("message.delta")]
        assert len(deltas) >= 2 and all(b.startswith(a) for a, b in itertools.pairwise(deltas))
        reply = client.get(f"/tasks/{task['id']}/messages").json()[-1]
        assert reply["senderType"] == "agent"
        # an OpenClaw gateway's runs never wait for the inbox: no decision (an edit neither) applies
        edit = {"decision": "edit", "args": {"command": "ls"}}
        assert_error(client.post(f"/tasks/{task['id']}/approvals/a1", json=edit), 404, "approval_not_found")
        # the reply is exactly what the gateway's agent said, in a session of its own
    gateway = harness.gateway
    stored = gateway_transcript(gateway, task["id"])
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert stored["messages"][0]["content"] == "你好，网关！请回答这个问题"
    assert stored["messages"][1]["content"] == reply["content"]
    sent = [frame for direction, frame in frames.frames if direction == "out" and frame["type"] == "req"]
    chat_send = next(frame for frame in sent if frame["method"] == "chat.send")
    assert chat_send["params"]["sessionKey"] == f"agent:main:inbox-{task['id'].lower()}"
    assert chat_send["params"]["message"] == "你好，网关！请回答这个问题"  # passed through unchanged
    check_schema(frames)


def check_schema(frames: FrameLog) -> None:
    try:
        schema = load_protocol_schema()
    except SchemaUnavailable as exc:
        pytest.skip(f"cannot install @openclaw/gateway-protocol: {exc}")
    assert schema.assert_frames_valid(frames.pairs()) > 5


def test_cancelling_a_running_task_aborts_the_gateway_run(
    harness: Harness,
) -> None:
    inbox, frames = harness.inbox, harness.frames
    with (
        httpx.Client(base_url=inbox.url + "/api/v1", timeout=15) as client,
        SseClient(inbox.url + "/api/v1/events") as events,
    ):
        task_id = client.post("/tasks", json={"content": "a long answer please " * 8}).json()["id"]
        events.wait_for(lambda evs: any(n == "message.delta" for n, _ in evs))
        cancelled = client.post(f"/tasks/{task_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        wait_until(lambda: not inbox.app.state.inbox.executor.is_running(task_id))
        assert status_of(client, task_id) == "cancelled"
        partial = client.get(f"/tasks/{task_id}/messages").json()[-1]
        assert partial["senderType"] == "agent"
    sent = [frame for direction, frame in frames.frames if direction == "out" and frame["type"] == "req"]
    assert any(frame["method"] == "chat.abort" for frame in sent)
    received = [
        frame for direction, frame in frames.frames if direction == "in" and frame.get("event") == "chat"
    ]
    assert received[-1]["payload"]["state"] == "aborted"
    gateway = harness.gateway
    stored = gateway_transcript(gateway, task_id)
    # the gateway stopped its run: the saved assistant text is the partial the inbox kept
    assert stored["messages"][-1]["role"] == "assistant"
    assert stored["messages"][-1]["content"].strip() == partial["content"].strip()
    check_schema(frames)


@pytest.mark.slow
def test_the_client_reconnects_after_the_gateway_restarts(
    harness: Harness,
) -> None:
    inbox, frames = harness.inbox, harness.frames
    backend = harness.backend
    with httpx.Client(base_url=inbox.url + "/api/v1", timeout=15) as client:
        first = client.post("/tasks", json={"content": "before the restart"}).json()["id"]
        wait_until(lambda: status_of(client, first) == "completed")
        assert backend.client.connects == 1
        harness.gateway.stop()  # the gateway process goes away
        wait_until(lambda: not backend.client.connected)
        harness.start_gateway()  # ... and comes back on the same port
        wait_until(lambda: backend.client.connects == 2, timeout=20)
        second = client.post("/tasks", json={"content": "after the restart"}).json()["id"]
        wait_until(lambda: status_of(client, second) == "completed")
        assert client.get(f"/tasks/{second}/messages").json()[-1]["senderType"] == "agent"
    hellos = [f for d, f in frames.frames if d == "in" and f.get("type") == "res" and f.get("ok")]
    assert sum(1 for f in hellos if (f.get("payload") or {}).get("type") == "hello-ok") == 2
    check_schema(frames)


@pytest.mark.slow
def test_a_task_created_while_the_gateway_is_down_fails_within_the_run_timeout(
    tmp_path: Path, live_server: Callable[..., LiveServer]
) -> None:
    """The wait for a connection is bounded by the run timeout (3 s here), with a clear message,
    both before the first connection and while the client is in a reconnect cycle (whose regular
    attempts alone take minutes); once the gateway is up, later tasks run on it."""
    harness = Harness(tmp_path, live_server, gateway_up=False, timeout_ms=3_000)

    def run_task(client: httpx.Client, content: str) -> tuple[str, str]:
        task_id = client.post("/tasks", json={"content": content}).json()["id"]
        wait_until(lambda: status_of(client, task_id) in ("completed", "failed"), timeout=60)
        last = client.get(f"/tasks/{task_id}/messages").json()[-1]
        assert last["senderType"] == "agent"
        return status_of(client, task_id), str(last["content"])

    with harness.api() as client:
        status, note = run_task(client, "anyone there?")
        assert status == "failed"
        assert "the OpenClaw gateway could not be reached within 3 s" in note
        assert "cannot connect" in note  # and why
        harness.start_gateway()
        assert run_task(client, "and now?")[0] == "completed"
        harness.gateway.stop()
        wait_until(lambda: not harness.backend.client.connected)
        status, note = run_task(client, "gone again?")
        assert status == "failed" and "could not be reached within 3 s" in note
        harness.start_gateway()
        assert run_task(client, "back?")[0] == "completed"


@pytest.mark.slow
def test_health_reports_the_gateway_connection(harness: Harness) -> None:
    with harness.api() as client:
        before = httpx.get(harness.inbox.url + "/health").json()["checks"]["inbox"]
        assert before["status"] == "healthy" and "first task" in before["message"]
        task_id = client.post("/tasks", json={"content": "hello"}).json()["id"]
        wait_until(lambda: status_of(client, task_id) == "completed")
        connected = httpx.get(harness.inbox.url + "/health").json()["checks"]["inbox"]
        assert connected["status"] == "healthy" and "protocol 4" in connected["message"]
        assert connected["details"]["gateway_url"].endswith("/gateway")
        harness.gateway.stop()
        wait_until(lambda: harness.backend.client.last_error is not None, timeout=20)
        down = httpx.get(harness.inbox.url + "/health").json()
        assert down["checks"]["inbox"]["status"] == "degraded" and down["status"] == "degraded"


@pytest.mark.slow
def test_agents_from_openclaw_json_run_in_their_own_workspace_behind_the_gateway(harness: Harness) -> None:
    config = harness.inbox.settings.openclaw_config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {"agents": {"entries": {"main": {"subagents": {"allowAgents": ["travel"]}}, "travel": {}}}}
        ),
        encoding="utf-8",
    )
    with harness.api() as client:
        task_id = client.post("/tasks", json={"content": "去北京", "agentId": "travel"}).json()["id"]
        wait_until(lambda: status_of(client, task_id) == "completed")
    listed = [f for d, f in harness.frames.frames if d == "out" and f.get("method") == "chat.send"]
    assert listed[-1]["params"]["sessionKey"] == f"agent:travel:inbox-{task_id.lower()}"
    sessions = harness.gateway.settings.workspaces_root / "travel" / "sessions"
    assert (sessions / f"{task_session_name(task_id)}.json").is_file()
    assert not (harness.gateway.settings.paths.sessions / f"{task_session_name(task_id)}.json").exists()

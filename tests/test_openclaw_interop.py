"""Opt-in interoperability test against a REAL OpenClaw gateway (the ``openclaw`` npm package).

``scripts/test`` installs the pinned Node 24 and OpenClaw (``scripts/test-openclaw``) and points
``CLAWLET_OPENCLAW_NODE``/``CLAWLET_OPENCLAW_BIN`` at them; without an installation every test is
skipped with the reason (``CLAWLET_OPENCLAW_REQUIRED=1``, which ``scripts/test`` sets after a
successful install, makes it fail instead). See ``tests/support/openclaw_gateway.py`` and
``docs/openclaw-interop.md``.

When configured, one ``openclaw gateway`` runs for the whole module, on loopback, with a token,
isolated in a temp dir; its only model provider is clawlet's scripted OpenAI-compatible server, so
every reply is deterministic and nothing leaves 127.0.0.1. It checks:

1. clawlet's :class:`GatewayClient` against OpenClaw: protocol 4 handshake, ``agents.list``,
   ``models.list``, ``chat.send`` streaming deltas and a final equal to the scripted reply,
   ``chat.history``, tool events (``agent`` events of stream ``tool``), ``chat.abort`` of a slow
   run (state ``aborted``), idempotent re-send, and how OpenClaw refuses a bad connect;
2. the inbox with backend ``gateway``: a task created through REST runs on OpenClaw and completes
   with the scripted reply; a cancelled task aborts its OpenClaw run; a follow-up sent while the
   session is busy (empty ``final``) and a turn OpenClaw replays after being killed mid-turn each
   get their reply, once, from ``chat.history``; a task created while OpenClaw is down fails within
   its run timeout; the inbox's client reconnects when OpenClaw restarts;
3. real OpenClaw clients against clawlet's own gateway server at ``/gateway``: ``openclaw gateway
   call`` / ``openclaw health``, ``openclaw agent --message`` (prints clawlet's answer), ``openclaw
   tui`` driven in a pseudo-terminal (a typed message is answered on screen; ``/new`` starts a
   session that is chatted in, ``/reset`` empties it, ``/model`` and ``/think`` patch it), and
   ``openclaw logs``,
   ``gateway usage-cost``, ``gateway stability``, ``gateway probe`` and ``status``; a recording proxy
   checks every frame clawlet sends them against the schema.

Frames clawlet sends must validate strictly against ``@openclaw/gateway-protocol``'s JSON Schema;
frames it receives are checked leniently (violations are reported as warnings, never failures:
real servers add fields).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from clawlet.gateway.client import ChatUpdate, GatewayClient
from clawlet.gateway.protocol import GatewayError, message_text, session_key
from clawlet.home import init_home
from clawlet.inbox.backends import GatewayBackend, task_session_name
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.conftest import LiveServer, free_port
from tests.inbox_support import SseClient, wait_until
from tests.support.frame_proxy import FrameProxy
from tests.support.gateway_schema import SchemaUnavailable, load_protocol_schema
from tests.support.openclaw_gateway import OpenClawGateway, OpenClawInstall, real_openclaw
from tests.support.pty_session import PtySession

REAL = real_openclaw()  # at import: the autouse ``clawlet_home`` fixture removes CLAWLET_* variables
pytestmark = [pytest.mark.slow, REAL.skip]

TOKEN = "interop-gateway-token"
CLAWLET_GATEWAY_TOKEN = "clawlet-gateway-token"

REPLY = "Hello from the scripted model, through a real OpenClaw gateway!"
INBOX_REPLY = "收到：这个收件箱任务在 OpenClaw 上完成了。"
TOOL_REPLY = "I listed the workspace."
SLOW_REPLY = "slow " * 80
BUSY_REPLY = "这条消息在会话忙时发出，回复仍然到了收件箱。"
REPLAYED_REPLY = "Replayed after the restart: the interrupted turn is finished."
RESTART_NOTE = "[System] Your previous turn was interrupted by a gateway restart"
UNSCRIPTED = "(no scripted answer for this request)"
INTERNAL_CONTEXT = "BEGIN_OPENCLAW_INTERNAL_CONTEXT"

CHAT_TIMEOUT = 60.0


# -- the scripted model behind OpenClaw --------------------------------------------------------


def _latest_user_index(messages: list[dict[str, Any]]) -> int | None:
    """OpenClaw appends an internal-context user message after the real one; skip it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and INTERNAL_CONTEXT not in message_text(message):
            return index
    return None


def script(body: dict[str, Any]) -> Turn:
    """Answer by the marker in the latest real user message (OpenClaw prefixes a timestamp and
    appends runtime details to it)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    index = _latest_user_index(messages)
    if index is None:
        return text_turn(UNSCRIPTED)
    text = message_text(messages[index])
    if RESTART_NOTE in json.dumps(body, ensure_ascii=False):  # OpenClaw replays a turn cut short
        return text_turn(REPLAYED_REPLY, chunks=3, delay=0.05)
    if "[interop:tool]" in text:
        if any(m.get("role") == "tool" for m in messages[index + 1 :]):
            return text_turn(TOOL_REPLY)
        return tool_turn(ToolCall("ls", {"path": "."}))
    if "[interop:slow]" in text:
        return text_turn(SLOW_REPLY, delay=0.1)
    if "[interop:busy]" in text:
        return text_turn(BUSY_REPLY, chunks=3, delay=0.05)
    if "[interop:inbox]" in text:
        return text_turn(INBOX_REPLY, chunks=4, delay=0.05)
    if "[interop:hello]" in text:
        return text_turn(REPLY, delay=0.05)
    return text_turn(UNSCRIPTED)


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(script, model="scripted-model") as server:
        yield server


@pytest.fixture(scope="module")
def install() -> OpenClawInstall:
    return REAL.require()


@pytest.fixture(scope="module")
def openclaw(
    install: OpenClawInstall, llm: ScriptedOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenClawGateway]:
    home = tmp_path_factory.mktemp("openclaw-gateway")
    gateway = OpenClawGateway(install, home, free_port(), TOKEN, llm.base_url, model=llm.model)
    with gateway:
        yield gateway
    report_schema_notes()


@pytest.fixture
def gateway(openclaw: OpenClawGateway) -> Iterator[OpenClawGateway]:
    """The module's gateway; on failure its log tail shows up in the captured output."""
    yield openclaw
    print(
        f"{openclaw.install.openclaw_version} (Node {openclaw.install.node_version}) on {openclaw.url},"
        f" ready {openclaw.startup_seconds or 0:.1f} s after start"
    )
    print(openclaw.log_tail(40))


# -- frames ----------------------------------------------------------------------------------------


class FrameLog:
    """Every frame a client sent or received, with the method each response answers."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, direction: str, frame: dict[str, Any]) -> None:
        with self._lock:
            self.frames.append((direction, json.loads(json.dumps(frame))))

    def pairs(self, direction: str) -> list[tuple[dict[str, Any], str | None]]:
        methods: dict[str, str] = {}
        out: list[tuple[dict[str, Any], str | None]] = []
        with self._lock:
            frames = list(self.frames)
        for way, frame in frames:
            if way == "out" and frame.get("type") == "req":
                methods[str(frame.get("id"))] = str(frame.get("method"))
            if way == direction:
                answered = methods.get(str(frame.get("id"))) if frame.get("type") == "res" else None
                out.append((frame, answered))
        return out

    def received(self, event: str) -> list[dict[str, Any]]:
        with self._lock:
            return [f for way, f in self.frames if way == "in" and f.get("event") == event]

    def responses(self, method: str) -> list[dict[str, Any]]:
        return [frame for frame, answered in self.pairs("in") if answered == method]

    def sent_all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f for way, f in self.frames if way == "out" and f.get("type") == "req"]

    def sent(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [f for way, f in self.frames if way == "out" and f.get("method") == method]


#: Schema differences of frames received from OpenClaw, over the whole module (see ``openclaw``).
SCHEMA_NOTES: dict[str, int] = {}


def check_frames(frames: FrameLog) -> None:
    """Sent frames must validate; received ones are only noted (real servers add fields)."""
    try:
        schema = load_protocol_schema()
    except SchemaUnavailable as exc:
        warnings.warn(f"protocol schema unavailable, frames not validated: {exc}", stacklevel=2)
        return
    schema.assert_frames_valid(frames.pairs("out"))
    for frame, method in frames.pairs("in"):
        for problem in schema.frame_errors(frame, method=method):
            where, _, what = problem.partition(": ")
            if what.startswith("Additional properties are not allowed"):
                what = "additional properties " + what.partition("(")[2].rstrip(")")
            key = f"{where}: {what[:160]}"
            SCHEMA_NOTES[key] = SCHEMA_NOTES.get(key, 0) + 1


def report_schema_notes() -> None:
    if SCHEMA_NOTES:
        lines = "\n".join(f"  {key} (x{count})" for key, count in sorted(SCHEMA_NOTES.items()))
        warnings.warn(
            f"frames received from OpenClaw that the pinned @openclaw/gateway-protocol schema"
            f" does not allow (informational):\n{lines}",
            stacklevel=2,
        )


def new_client(gateway: OpenClawGateway, frames: FrameLog | None = None, **kwargs: Any) -> GatewayClient:
    return GatewayClient(
        gateway.url, kwargs.pop("token", TOKEN), on_frame=frames, request_timeout=30, **kwargs
    )


async def collect(updates: Any) -> list[ChatUpdate]:
    return [update async for update in updates]


def fresh_key(name: str) -> str:
    return session_key("main", f"interop-{name}-{uuid.uuid4().hex[:8]}")


# -- 1. clawlet's client against OpenClaw -----------------------------------------------------------


async def test_handshake_negotiates_protocol_4_and_lists_agents_and_models(gateway: OpenClawGateway) -> None:
    frames = FrameLog()
    client = new_client(gateway, frames)
    await client.start()
    try:
        assert client.protocol == 4
        hello = client.hello or {}
        assert hello.get("type") == "hello-ok"
        assert hello["server"]["version"] in gateway.install.openclaw_version
        assert set(hello["auth"]["scopes"]) >= {"operator.read", "operator.write"}
        assert hello["snapshot"]["sessionDefaults"]["mainSessionKey"] == "agent:main:main"
        assert client.tick_interval and client.tick_interval > 0
        assert {"chat.send", "chat.abort", "chat.history", "agents.list", "models.list"} <= set(
            hello["features"]["methods"]
        )
        agents = await client.request("agents.list", {})
        assert agents["defaultId"] == "main"
        assert "main" in [agent["id"] for agent in agents["agents"]]
        models = await client.request("models.list", {})
        assert {"id": "scripted-model", "provider": "scripted"} in [
            {"id": m.get("id"), "provider": m.get("provider")} for m in models["models"]
        ]
        health = await client.request("health", {})
        assert health["ok"] is True
    finally:
        await client.close()
    challenge = frames.received("connect.challenge")[0]["payload"]
    assert isinstance(challenge["nonce"], str) and isinstance(challenge["ts"], int)
    check_frames(frames)


async def test_chat_send_streams_deltas_and_a_final_equal_to_the_scripted_reply(
    gateway: OpenClawGateway, llm: ScriptedOpenAIServer
) -> None:
    frames = FrameLog()
    key = fresh_key("chat")
    run_id = str(uuid.uuid4())
    async with new_client(gateway, frames) as client:
        updates = await collect(client.chat(key, "[interop:hello] say hello", run_id, timeout=CHAT_TIMEOUT))
        history = await client.request("chat.history", {"sessionKey": key, "limit": 10})
    assert [u.state for u in updates][-1] == "final", updates
    deltas = [u for u in updates if u.state == "delta"]
    assert len(deltas) >= 2
    assert all(later.text.startswith(earlier.text) for earlier, later in itertools.pairwise(deltas))
    final = updates[-1]
    assert final.run_id == run_id
    assert final.text == REPLY
    assert final.stop_reason == "stop"
    assert "".join(u.delta for u in updates) == REPLY
    # the ack: runId is the idempotency key
    assert frames.responses("chat.send")[0]["payload"] == {"runId": run_id, "status": "started"}
    chat_events = [f["payload"] for f in frames.received("chat") if f["payload"].get("runId") == run_id]
    assert chat_events[-1]["state"] == "final"
    assert all(e["sessionKey"] == key for e in chat_events)
    assert any(isinstance(e.get("deltaText"), str) for e in chat_events if e["state"] == "delta")
    # OpenClaw stored the exchange under the session key clawlet chose
    stored = [m for m in history["messages"] if m.get("role") in ("user", "assistant")]
    assert "[interop:hello] say hello" in message_text(stored[-2])
    assert message_text(stored[-1]) == REPLY
    # and the scripted model saw the message (OpenClaw decorates it with a timestamp and runtime)
    assert any("[interop:hello] say hello" in json.dumps(r, ensure_ascii=False) for r in llm.requests)
    check_frames(frames)


async def test_tool_activity_arrives_as_agent_tool_events(gateway: OpenClawGateway) -> None:
    frames = FrameLog()
    tool_events: list[dict[str, Any]] = []
    key = fresh_key("tool")
    async with new_client(gateway, frames) as client:
        updates = await collect(
            client.chat(
                key,
                "[interop:tool] list the workspace",
                str(uuid.uuid4()),
                timeout=CHAT_TIMEOUT,
                on_tool=lambda run_id, payload: tool_events.append(payload),
            )
        )
    assert updates[-1].state == "final" and updates[-1].text == TOOL_REPLY
    phases = [(e["data"].get("phase"), e["data"].get("name")) for e in tool_events]
    assert ("start", "ls") in phases and ("result", "ls") in phases, phases
    start = next(e["data"] for e in tool_events if e["data"].get("phase") == "start")
    result = next(e["data"] for e in tool_events if e["data"].get("phase") == "result")
    assert start["args"] == {"path": "."} and start["toolCallId"] == result["toolCallId"]
    assert result.get("isError") is False
    check_frames(frames)


async def test_chat_abort_of_a_slow_run_ends_it_with_aborted(
    gateway: OpenClawGateway, llm: ScriptedOpenAIServer
) -> None:
    frames = FrameLog()
    key = fresh_key("abort")
    run_id = str(uuid.uuid4())
    aborted: Any = None
    updates: list[ChatUpdate] = []
    async with new_client(gateway, frames) as client:
        async for update in client.chat(key, "[interop:slow] talk slowly", run_id, timeout=CHAT_TIMEOUT):
            updates.append(update)
            if update.state == "delta" and aborted is None:
                aborted = await client.abort(key, run_id)
        resend = await client.request(
            "chat.send",
            {"sessionKey": key, "message": "[interop:slow] talk slowly", "idempotencyKey": run_id},
        )
        idle = await client.abort(key)
    assert aborted["ok"] is True and aborted["aborted"] is True and run_id in aborted["runIds"]
    last = updates[-1]
    assert last.state == "aborted", updates
    assert last.stop_reason == "rpc"
    assert SLOW_REPLY.startswith(last.text) and len(last.text) < len(SLOW_REPLY)
    # the same idempotency key again starts no new run
    assert resend["runId"] == run_id and resend["status"] != "started", resend
    assert idle["ok"] is True and idle["aborted"] is False
    check_frames(frames)


async def test_openclaw_refuses_a_bad_connect_with_these_errors(gateway: OpenClawGateway) -> None:
    """What real OpenClaw answers (clawlet's server mirrors the token case)."""
    with pytest.raises(GatewayError) as bad_token:
        await new_client(gateway, token="not-the-token").start()
    assert bad_token.value.code == "INVALID_REQUEST"
    assert (bad_token.value.details or {}).get("code") == "AUTH_TOKEN_MISMATCH"

    with pytest.raises(GatewayError) as v3_only:
        await new_client(gateway, max_protocol=3).start()
    assert v3_only.value.code == "INVALID_REQUEST"
    assert (v3_only.value.details or {}).get("code") == "PROTOCOL_MISMATCH"

    with pytest.raises(GatewayError) as no_token:  # device-less and token-less: pairing needed
        await new_client(gateway, token=None).start()
    assert no_token.value.code == "NOT_PAIRED", no_token.value


# -- 2. the inbox with backend ``gateway`` on OpenClaw -------------------------------------------------


@pytest.fixture
def inbox(
    gateway: OpenClawGateway, tmp_path: Path, live_server: Callable[..., LiveServer]
) -> tuple[LiveServer, GatewayBackend, FrameLog]:
    settings = Settings(
        home=tmp_path / "inbox-home",
        inbox_backend="gateway",
        openclaw_gateway_url=gateway.url,
        openclaw_gateway_token=TOKEN,
        openclaw_gateway_timeout=int(CHAT_TIMEOUT * 1000),
        # the agents the inbox lists come from the very openclaw.json the gateway runs with
        openclaw_config_path=gateway.config_file,
    )
    init_home(settings.paths)
    server = live_server(settings)
    backend = server.app.state.inbox.executor.backend
    assert isinstance(backend, GatewayBackend)
    frames = FrameLog()
    backend.client.on_frame = frames
    return server, backend, frames


def test_an_inbox_task_runs_on_openclaw_and_completes_with_the_scripted_reply(
    inbox: tuple[LiveServer, GatewayBackend, FrameLog], gateway: OpenClawGateway
) -> None:
    server, backend, frames = inbox
    content = "[interop:inbox] 请处理这个任务"
    with (
        httpx.Client(base_url=server.url + "/api/v1", timeout=15) as client,
        SseClient(server.url + "/api/v1/events") as events,
    ):
        agents = client.get("/agents").json()
        assert agents[0]["id"] == "main" and agents[0]["model"] == "scripted/scripted-model"
        task = client.post("/tasks", json={"content": content}).json()
        assert task["status"] == "pending"
        events.wait_for(
            lambda evs: any(
                n == "task.updated" and d["id"] == task["id"] and d["status"] in ("completed", "failed")
                for n, d in evs
            ),
            timeout=CHAT_TIMEOUT,
        )
        assert client.get(f"/tasks/{task['id']}").json()["status"] == "completed", client.get(
            f"/tasks/{task['id']}/messages"
        ).json()
        reply = client.get(f"/tasks/{task['id']}/messages").json()[-1]
        assert reply["senderType"] == "agent"
        assert reply["content"] == INBOX_REPLY
        deltas = [d["content"] for d in events.of("message.delta")]
        assert deltas and all(INBOX_REPLY.startswith(d) for d in deltas)
    assert backend.client.protocol == 4
    chat_send = frames.sent("chat.send")[0]["params"]
    assert chat_send["sessionKey"] == f"agent:main:{task_session_name(task['id'])}"
    assert chat_send["message"] == content

    async def history() -> dict[str, Any]:
        async with new_client(gateway) as client:
            result: dict[str, Any] = await client.request(
                "chat.history", {"sessionKey": chat_send["sessionKey"]}
            )
            return result

    stored = [m for m in asyncio.run(history())["messages"] if m.get("role") in ("user", "assistant")]
    assert content in message_text(stored[0]) and message_text(stored[-1]) == INBOX_REPLY
    check_frames(frames)


def test_cancelling_an_inbox_task_aborts_the_openclaw_run(
    inbox: tuple[LiveServer, GatewayBackend, FrameLog],
) -> None:
    server, _, frames = inbox
    with (
        httpx.Client(base_url=server.url + "/api/v1", timeout=15) as client,
        SseClient(server.url + "/api/v1/events") as events,
    ):
        task_id = client.post("/tasks", json={"content": "[interop:slow] a long answer"}).json()["id"]
        events.wait_for(lambda evs: any(n == "message.delta" for n, _ in evs), timeout=CHAT_TIMEOUT)
        cancelled = client.post(f"/tasks/{task_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        wait_until(lambda: not server.app.state.inbox.executor.is_running(task_id), timeout=30)
        assert client.get(f"/tasks/{task_id}").json()["status"] == "cancelled"
    assert frames.sent("chat.abort")
    wait_until(
        lambda: any(f["payload"].get("state") == "aborted" for f in frames.received("chat")), timeout=15
    )
    check_frames(frames)


def agent_messages(client: httpx.Client, task_id: str) -> list[str]:
    messages = client.get(f"/tasks/{task_id}/messages").json()
    return [str(m["content"]) for m in messages if m["senderType"] == "agent"]


def wait_finished(client: httpx.Client, task_id: str) -> str:
    done = ("completed", "failed", "cancelled")
    wait_until(lambda: client.get(f"/tasks/{task_id}").json()["status"] in done, timeout=CHAT_TIMEOUT * 2)
    return str(client.get(f"/tasks/{task_id}").json()["status"])


def test_a_message_sent_while_the_openclaw_session_is_busy_gets_its_reply_once(
    inbox: tuple[LiveServer, GatewayBackend, FrameLog], gateway: OpenClawGateway
) -> None:
    """Another client keeps the task's session busy; OpenClaw acks the inbox's follow-up, sends it
    an empty ``final`` and answers it in a run of its own. The inbox reads that answer from
    ``chat.history`` and stores it once."""
    server, _, frames = inbox
    with httpx.Client(base_url=server.url + "/api/v1", timeout=15) as client:
        task_id = client.post("/tasks", json={"content": "[interop:inbox] first"}).json()["id"]
        assert wait_finished(client, task_id) == "completed"
        key = session_key("main", task_session_name(task_id))
        streaming = threading.Event()

        async def keep_busy() -> None:
            async with new_client(gateway) as other:
                updates = other.chat(
                    key, "[interop:slow] keep the session busy", str(uuid.uuid4()), timeout=60
                )
                async for update in updates:
                    if update.state == "delta":
                        streaming.set()

        busy = threading.Thread(target=asyncio.run, args=(keep_busy(),), daemon=True)
        busy.start()
        assert streaming.wait(CHAT_TIMEOUT), "the other client's run streams"
        sent = client.post(f"/tasks/{task_id}/messages", json={"content": "[interop:busy] second"})
        assert sent.status_code in (200, 201), sent.text
        assert wait_finished(client, task_id) == "completed", agent_messages(client, task_id)
        busy.join(CHAT_TIMEOUT)
        assert agent_messages(client, task_id) == [INBOX_REPLY, BUSY_REPLY]
    follow_up = frames.sent("chat.send")[-1]["params"]
    assert follow_up["message"] == "[interop:busy] second"
    own = [
        f["payload"] for f in frames.received("chat") if f["payload"]["runId"] == follow_up["idempotencyKey"]
    ]
    assert [(p["state"], p.get("message")) for p in own] == [("final", None)], "the busy path was taken"
    assert frames.sent("chat.history"), "the reply came from the transcript"


def test_a_turn_cut_short_by_an_openclaw_crash_is_replayed_and_shown_once(
    inbox: tuple[LiveServer, GatewayBackend, FrameLog], gateway: OpenClawGateway
) -> None:
    """OpenClaw is killed while it streams a reply and started again: it replays the interrupted
    turn under a new run, and the task completes with that reply, stored once."""
    server, backend, frames = inbox
    backend.client.backoff_initial, backend.client.backoff_max = 0.25, 1.0  # keep the test short
    with (
        httpx.Client(base_url=server.url + "/api/v1", timeout=15) as client,
        SseClient(server.url + "/api/v1/events") as events,
    ):
        task_id = client.post("/tasks", json={"content": "[interop:slow] a long answer"}).json()["id"]
        events.wait_for(lambda evs: any(n == "message.delta" for n, _ in evs), timeout=CHAT_TIMEOUT)
        gateway.kill()
        wait_until(lambda: not backend.client.connected, timeout=20)
        assert client.get(f"/tasks/{task_id}").json()["status"] == "running"
        gateway.start()
        assert wait_finished(client, task_id) == "completed", agent_messages(client, task_id)
        assert agent_messages(client, task_id) == [REPLAYED_REPLY]
    assert backend.client.connects >= 2
    check_frames(frames)


def test_the_inbox_reconnects_after_openclaw_restarts(
    inbox: tuple[LiveServer, GatewayBackend, FrameLog], gateway: OpenClawGateway
) -> None:
    """OpenClaw says ``shutdown`` and closes with 1012 when stopped; while starting again it
    refuses ``connect`` with a retryable ``UNAVAILABLE`` for a second or two. The inbox's client
    must ride through both. (Runs last among the tests using the module's gateway.)"""
    server, backend, frames = inbox
    backend.client.backoff_initial, backend.client.backoff_max = 0.25, 1.0  # keep the test short

    def run_task(client: httpx.Client, content: str) -> str:
        task_id = str(client.post("/tasks", json={"content": content}).json()["id"])
        done = ("completed", "failed", "cancelled")
        wait_until(lambda: client.get(f"/tasks/{task_id}").json()["status"] in done, timeout=CHAT_TIMEOUT)
        assert client.get(f"/tasks/{task_id}").json()["status"] == "completed", client.get(
            f"/tasks/{task_id}/messages"
        ).json()[-1]
        return str(client.get(f"/tasks/{task_id}/messages").json()[-1]["content"])

    with httpx.Client(base_url=server.url + "/api/v1", timeout=15) as client:
        assert run_task(client, "[interop:inbox] before the restart") == INBOX_REPLY
        assert backend.client.connects == 1
        gateway.stop()
        wait_until(lambda: not backend.client.connected, timeout=20)
        # a task created while OpenClaw is down fails within its run timeout, saying why
        backend.timeout_seconds = 3
        down = str(client.post("/tasks", json={"content": "[interop:inbox] while down"}).json()["id"])
        assert wait_finished(client, down) == "failed"
        assert "the OpenClaw gateway could not be reached within 3 s" in agent_messages(client, down)[-1]
        backend.timeout_seconds = CHAT_TIMEOUT
        gateway.start()
        assert run_task(client, "[interop:inbox] after the restart") == INBOX_REPLY
        assert backend.client.connects == 2
    assert frames.received("shutdown"), "OpenClaw announces its shutdown"
    check_frames(frames)


# -- 3. a real OpenClaw client against clawlet's gateway server -----------------------------------


def call_json(result: Any) -> Any:
    assert result.stdout.strip(), f"no output (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def test_the_openclaw_cli_drives_clawlets_gateway(
    install: OpenClawInstall,
    tmp_path: Path,
    live_server: Callable[..., LiveServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="clawlet.gateway.server")
    settings = Settings(home=tmp_path / "gateway-home", gateway_token=CLAWLET_GATEWAY_TOKEN)
    init_home(settings.paths)
    server = live_server(settings)
    url = f"ws://127.0.0.1:{server.port}/gateway"
    cli_home = tmp_path / "openclaw-cli"

    def call(method: str, params: dict[str, Any] | None = None, token: str = CLAWLET_GATEWAY_TOKEN) -> Any:
        args = ["gateway", "call", method, "--url", url, "--token", token, "--json"]
        if params is not None:
            args += ["--params", json.dumps(params)]
        return install.cli(cli_home, *args)

    health = call("health")
    assert health.returncode == 0, health.stderr
    assert call_json(health)["ok"] is True
    assert call_json(call("agents.list"))["defaultId"] == "main"
    assert call_json(call("models.list"))["models"]
    key = "agent:main:openclaw-cli"
    ack = call_json(
        call("chat.send", {"sessionKey": key, "message": "hello from openclaw", "idempotencyKey": "cli-1"})
    )
    assert ack == {"runId": "cli-1", "status": "started"}

    def answered() -> list[dict[str, Any]]:
        messages = call_json(call("chat.history", {"sessionKey": key}))["messages"]
        return [m for m in messages if m.get("role") == "assistant" and message_text(m)]

    assistant = wait_until(answered, timeout=30, interval=0.2)
    assert "hello from openclaw" in message_text(assistant[-1])  # the demo model echoes the message

    refused = call("health", token="wrong-token")
    assert refused.returncode != 0
    error = call_json(refused)["error"]
    assert error["code"] == "INVALID_REQUEST" and error["details"]["code"] == "AUTH_TOKEN_MISMATCH"

    # `openclaw health` through a remote-mode config, as a user would point the CLI at clawlet
    state = cli_home / "state"
    remote = {"gateway": {"mode": "remote", "remote": {"url": url, "token": CLAWLET_GATEWAY_TOKEN}}}
    (state / "openclaw.json").write_text(json.dumps({**remote, "update": {"checkOnStart": False}}))
    via_config = install.cli(cli_home, "health", "--json")
    assert via_config.returncode == 0, via_config.stderr
    assert call_json(via_config)["ok"] is True

    connects = [r.getMessage() for r in caplog.records if "gateway client connected" in r.getMessage()]
    assert any("cli/cli v4" in message for message in connects), connects


def openclaw_cli_home(tmp_path: Path, url: str) -> Path:
    """An OpenClaw CLI home whose config points the CLI at clawlet's gateway (remote mode)."""
    cli_home = tmp_path / "openclaw-cli"
    (cli_home / "state").mkdir(parents=True, exist_ok=True)
    remote = {"mode": "remote", "remote": {"url": url, "token": CLAWLET_GATEWAY_TOKEN}}
    config = {"gateway": remote, "update": {"checkOnStart": False}}
    (cli_home / "state" / "openclaw.json").write_text(json.dumps(config))
    return cli_home


@dataclass
class ClawletGateway:
    """clawlet's gateway (scripted model) reached by the OpenClaw CLI through a recording proxy."""

    install: OpenClawInstall
    cli_home: Path
    frames: FrameLog

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self.install.cli(self.cli_home, *args, timeout=timeout)

    def methods(self) -> list[str]:
        return [str(frame.get("method")) for frame in self.frames.sent_all()]


@pytest.fixture
def own_llm() -> Iterator[ScriptedOpenAIServer]:
    """A scripted model per test: langchain-openai caches one HTTP client per base URL, which must
    not outlive the event loop of the test's server."""
    with ScriptedOpenAIServer(script, model="scripted-model") as server:
        yield server


@pytest.fixture
def clawlet_gateway(
    install: OpenClawInstall,
    own_llm: ScriptedOpenAIServer,
    tmp_path: Path,
    live_server: Callable[..., LiveServer],
    caplog: pytest.LogCaptureFixture,
) -> Iterator[ClawletGateway]:
    """Every frame clawlet sends on it must validate against the protocol schema."""
    llm = own_llm
    caplog.set_level(logging.INFO, logger="clawlet.gateway.server")  # logs.tail has lines to show
    settings = Settings(
        home=tmp_path / "gateway-home",
        gateway_token=CLAWLET_GATEWAY_TOKEN,
        provider="openai",
        llm_base_url=llm.base_url,
        llm_model=llm.model,
        llm_api_key="sk-scripted-not-a-secret",
    )
    init_home(settings.paths)
    server = live_server(settings)
    frames = FrameLog()
    with FrameProxy(f"ws://127.0.0.1:{server.port}/gateway", frames) as proxy:
        yield ClawletGateway(install, openclaw_cli_home(tmp_path, proxy.url), frames)
    load_protocol_schema().assert_frames_valid(frames.pairs("in"))


def test_openclaw_agent_command_prints_clawlets_answer(clawlet_gateway: ClawletGateway) -> None:
    key = "agent:main:cli-agent"
    result = clawlet_gateway.cli("agent", "--session-key", key, "--message", "[interop:hello] hi")
    assert result.returncode == 0, result.stdout[-1000:] + result.stderr[-1000:]
    assert REPLY in result.stdout

    as_json = clawlet_gateway.cli(
        "agent", "--session-key", key, "--message", "[interop:hello] again", "--json"
    )
    assert as_json.returncode == 0, as_json.stdout[-1000:] + as_json.stderr[-1000:]
    answer = call_json(as_json)
    assert answer["status"] == "ok" and answer["summary"] == "completed"
    assert answer["result"]["payloads"] == [{"text": REPLY}]
    assert clawlet_gateway.methods().count("agent") == 2
    finals = [
        frame for frame in clawlet_gateway.frames.responses("agent") if frame["payload"].get("status") == "ok"
    ]
    assert len(finals) == 2  # each after its own "accepted" response under the same id


def test_openclaw_tui_chats_with_clawlet(clawlet_gateway: ClawletGateway) -> None:
    """The real TUI in a pseudo-terminal: it starts up, a message is typed, the answer is drawn."""
    install = clawlet_gateway.install
    env = {**install.base_env(clawlet_gateway.cli_home), "TERM": "xterm-256color"}
    env.pop("CI", None)
    command = install.command("tui", "--session", "agent:main:tui")
    with PtySession(command, env=env, cwd=clawlet_gateway.cli_home) as tui:
        assert tui.wait_for("gateway connected | idle", timeout=90), tui.screen[-3000:]
        tui.send_keys("[interop:hello] hello from the tui")
        assert tui.wait_for("hello from the tui"), tui.screen[-3000:]
        tui.send_keys("\r")
        assert tui.wait_for(REPLY, timeout=90), tui.screen[-3000:]
    methods = clawlet_gateway.methods()
    assert "sessions.subscribe" in methods and "chat.send" in methods, methods
    refused = [frame for frame, _ in clawlet_gateway.frames.pairs("in") if frame.get("ok") is False]
    assert not refused, refused


IDLE = "gateway connected | idle"
#: What of IDLE is sure to be drawn when the TUI goes back to idle: it redraws only the part of the
#: status line that changed (after a reply, "gateway" may stay on screen from before and not be sent).
BACK_TO_IDLE = "idle"


def tui_chat(tui: PtySession, message: str) -> None:
    """Type a message, wait for the scripted reply and for the TUI to be idle again."""
    mark = tui.mark()
    tui.send_keys(f"[interop:hello] {message}\r")
    assert tui.wait_for(REPLY, BACK_TO_IDLE, timeout=90, since=mark), tui.screen[-3000:]


def tui_command(tui: PtySession, command: str, outcome: str) -> None:
    """Type a slash command and wait for what it reports, then for the TUI to be idle."""
    mark = tui.mark()
    tui.send_keys(command)
    assert tui.wait_for(command, since=mark), tui.screen[-3000:]
    tui.send_keys("\r")
    assert tui.wait_for(outcome, timeout=60, since=mark), tui.screen[-3000:]


def test_openclaw_tui_starts_a_new_session_chats_in_it_and_resets_it(
    clawlet_gateway: ClawletGateway, own_llm: ScriptedOpenAIServer
) -> None:
    """The TUI's ``/new`` (``sessions.create``) and ``/reset`` (``sessions.reset``) on clawlet."""
    install = clawlet_gateway.install
    env = {**install.base_env(clawlet_gateway.cli_home), "TERM": "xterm-256color"}
    env.pop("CI", None)
    command = install.command("tui", "--session", "agent:main:tui-old")
    with PtySession(command, env=env, cwd=clawlet_gateway.cli_home) as tui:
        assert tui.wait_for(IDLE, timeout=90), tui.screen[-3000:]
        tui_chat(tui, "words of the old session")

        tui_command(tui, "/new", "new session: agent:main:tui-")
        created = clawlet_gateway.frames.responses("sessions.create")
        assert created and created[-1]["ok"] is True, created
        new_key = created[-1]["payload"]["key"]
        tui_chat(tui, "first words of the new session")
        [*_, sent] = clawlet_gateway.frames.sent("chat.send")
        assert sent["params"]["sessionKey"] == new_key
        shown = json.dumps(own_llm.requests[-1]["messages"])
        assert "first words of the new session" in shown and "words of the old session" not in shown

        tui_command(tui, "/reset", f"session {new_key} reset")
        tui_chat(tui, "after the reset")
        shown = json.dumps(own_llm.requests[-1]["messages"])
        assert "after the reset" in shown and "first words of the new session" not in shown

        # sessions.patch: the server's one model is accepted, what clawlet lacks is refused clearly
        tui_command(tui, "/model openai/scripted-model", "model set to openai/scripted-model")
        tui_command(tui, "/models", "openai/scripted-model")  # the picker lists models.list
        mark = tui.mark()
        tui.send_keys("\r")  # picks the one model
        assert tui.wait_for("model set to openai/scripted-model", since=mark), tui.screen[-3000:]
        models = [f["params"].get("model") for f in clawlet_gateway.frames.sent("sessions.patch")]
        assert models == ["openai/scripted-model", "openai/scripted-model"], models
        tui_command(tui, "/think high", "think failed: sessions.patch: clawlet has no equivalent for")
        # back to the first session: its history is drawn again
        tui_command(tui, "/session agent:main:tui-old", "words of the old session")
    methods = clawlet_gateway.methods()
    assert "sessions.create" in methods and "sessions.reset" in methods, methods
    refused = [frame for frame, _ in clawlet_gateway.frames.pairs("in") if frame.get("ok") is False]
    assert [frame["error"]["message"] for frame in refused] == [
        "sessions.patch: clawlet has no equivalent for thinkingLevel"
    ]


#: ``openclaw`` commands that only read the gateway's state, and a line each prints.
OPERATOR_COMMANDS = {
    "logs": (["logs", "--limit", "50"], "gateway client connected"),
    "usage-cost": (["gateway", "usage-cost"], "Missing cost: 1 (scripted-model 1)"),
    "stability": (["gateway", "stability"], "Gateway Stability"),
    "probe": (["gateway", "probe"], "Read probe: ok"),
    "status": (["status"], "Agents"),
}


@pytest.mark.parametrize("name", list(OPERATOR_COMMANDS))
def test_openclaw_operator_commands_against_clawlets_gateway(
    name: str, clawlet_gateway: ClawletGateway
) -> None:
    turn = clawlet_gateway.cli("agent", "--session-key", "agent:main:ops", "--message", "[interop:hello] hi")
    assert turn.returncode == 0, turn.stderr[-1000:]
    args, expected = OPERATOR_COMMANDS[name]
    result = clawlet_gateway.cli(*args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert expected in result.stdout, result.stdout[-3000:]
    refused = [frame for frame, _ in clawlet_gateway.frames.pairs("in") if frame.get("ok") is False]
    assert not refused, refused

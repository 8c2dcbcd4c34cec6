"""The OpenClaw runtime adapter (``clawlet.runtime.openclaw_bridge``) with the real Node.js bridge
process (``bridge/``).

Default tests (need ``node`` ≥ 20 and ``npm ci`` in ``bridge/``, else skipped with the reason): the
OpenClaw side is clawlet's OWN gateway server (``ws://127.0.0.1:<port>/gateway``, the same Gateway
protocol, the offline demo model), reached through ``openclaw_config.gateway_url``. A turn streams
and finishes, ``run: echo hi`` arrives as tool events, cancel, a killed bridge, the bridge's
``request``/``fire_and_forget`` reaching the Python callables, a refused token, stop, and the clear
"unavailable" errors.

The real-OpenClaw test runs on the installation ``scripts/test`` provides (``real_openclaw()`` in
``tests/support/openclaw_gateway.py``; skipped with the reason without one): the bridge spawns a
private ``openclaw gateway`` whose only model is clawlet's scripted OpenAI-compatible server.
See ``docs/openclaw-bridge.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clawlet.config import Settings
from clawlet.events import (
    Event,
    NewSegment,
    RunCancelled,
    TextDelta,
    Thinking,
    ToolEnd,
    ToolStart,
)
from clawlet.gateway.protocol import message_text
from clawlet.home import init_home
from clawlet.runtime.base import RunConfig, UserMessage
from clawlet.runtime.openclaw_bridge import (
    BridgeOptions,
    BridgeSpec,
    OpenClawBridgeAdapter,
    OpenClawBridgeError,
    OpenClawUnavailable,
    TurnEnd,
    TurnError,
    default_bridge_dir,
    find_node,
    probe_openclaw,
    translate_bridge_event,
)
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.conftest import LiveServer
from tests.support.openclaw_gateway import real_openclaw

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

REAL = real_openclaw()  # at import: the autouse ``clawlet_home`` fixture removes CLAWLET_* variables

BRIDGE_DIR = default_bridge_dir()
NODE = shutil.which("node")


def _node_skip_reason() -> str | None:
    if NODE is None:
        return "node is not on PATH (the OpenClaw bridge needs Node.js >= 20)"
    if not (BRIDGE_DIR / "node_modules" / "ws" / "package.json").is_file():
        return f"the bridge's dependencies are not installed: run `npm ci` in {BRIDGE_DIR}"
    return None


NODE_SKIP = _node_skip_reason()
needs_node = pytest.mark.skipif(NODE_SKIP is not None, reason=NODE_SKIP or "")

TOKEN = "bridge-gateway-token"


# -- helpers -----------------------------------------------------------------------------------------


@pytest.fixture
def gateway(tmp_path: Path, live_server: Callable[..., LiveServer]) -> LiveServer:
    """clawlet's own gateway server (the demo model, streaming slowly enough to cancel)."""
    settings = Settings(home=tmp_path / "gateway-home", gateway_token=TOKEN)
    init_home(settings.paths)
    return live_server(settings, demo_token_delay=0.02)


def gateway_url(server: LiveServer) -> str:
    return f"ws://127.0.0.1:{server.port}/gateway"


def make_adapter(server: LiveServer, *, token: str = TOKEN, **spec: Any) -> OpenClawBridgeAdapter:
    openclaw_config = {
        "gateway_url": gateway_url(server),
        "gateway_token": token,
        **spec.pop("openclaw_config", {}),
    }
    return OpenClawBridgeAdapter(
        BridgeSpec(openclaw_config=openclaw_config, **spec),
        BridgeOptions(node=NODE, bridge_dir=BRIDGE_DIR, ready_timeout=20, cancel_grace=10, stop_grace=10),
    )


async def run_turn(adapter: OpenClawBridgeAdapter, text: str) -> list[Event]:
    return [event async for event in adapter.send_message(UserMessage(text))]


def text_of(events: list[Event]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def transcript(server: LiveServer, session_id: str) -> list[dict[str, Any]]:
    path = server.settings.paths.sessions / f"{session_id}.json"
    messages: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["messages"]
    return messages


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/status").is_file() and "zombie" in Path(f"/proc/{pid}/status").read_text()


# -- event translation (no Node needed) ----------------------------------------------------------------


def test_bridge_sse_events_become_clawlet_events() -> None:
    assert translate_bridge_event({"type": "text_chunk", "content": "Hi"}) == TextDelta("Hi")
    assert translate_bridge_event({"type": "text_chunk", "content": ""}) is None
    assert translate_bridge_event({"type": "thinking", "content": "hm", "stage": "openclaw"}) == Thinking(
        "hm"
    )
    assert translate_bridge_event(
        {"type": "tool_call_start", "tool_name": "exec", "tool_input": {"command": "ls"}, "call_id": "c1"}
    ) == ToolStart("exec", '{"command": "ls"}', "c1")
    assert translate_bridge_event(
        {
            "type": "tool_call_complete",
            "tool_name": "exec",
            "result": "a.txt",
            "call_id": "c1",
            "is_error": True,
        }
    ) == ToolEnd("exec", "a.txt", "c1", is_error=True)
    assert translate_bridge_event(
        {"type": "skill_call_start", "skill_name": "pdf", "arguments": {"f": 1}}
    ) == (ToolStart("skill:pdf", '{"f": 1}', "skill:pdf"))
    assert translate_bridge_event({"type": "skill_call_complete", "skill_name": "pdf", "result": "ok"}) == (
        ToolEnd("skill:pdf", "ok", "skill:pdf")
    )
    assert translate_bridge_event({"type": "execution_complete", "content": "done"}) == TurnEnd("done")
    assert translate_bridge_event({"type": "execution_complete", "content": "do", "cancelled": True}) == (
        TurnEnd("do", cancelled=True)
    )
    assert translate_bridge_event({"type": "execution_error", "error": "boom"}) == TurnError("boom")
    assert translate_bridge_event({"type": "execution_error"}) == TurnError("the OpenClaw run failed")
    assert translate_bridge_event({"type": "something_new"}) is None


# -- availability (no Node needed) -----------------------------------------------------------------------


def fake_executable(path: Path, output: str) -> Path:
    path.write_text(f"#!/bin/sh\necho {output}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def fake_bridge(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.mjs").write_text("", encoding="utf-8")
    (root / "node_modules" / "ws").mkdir(parents=True)
    (root / "node_modules" / "ws" / "package.json").write_text("{}", encoding="utf-8")
    return root


def fake_openclaw(root: Path, version: str) -> Path:
    root.mkdir(parents=True)
    (root / "openclaw.mjs").write_text("", encoding="utf-8")
    (root / "package.json").write_text(json.dumps({"name": "openclaw", "version": version}), encoding="utf-8")
    return root


def test_probe_openclaw_explains_what_is_missing(tmp_path: Path) -> None:
    bridge = fake_bridge(tmp_path / "bridge")
    old_node = str(fake_executable(tmp_path / "node20", "v20.20.2"))
    new_node = str(fake_executable(tmp_path / "node24", "v24.21.0"))
    real = fake_openclaw(tmp_path / "openclaw", "2026.9.6")
    placeholder = fake_openclaw(tmp_path / "placeholder", "0.0.1")

    found = probe_openclaw(node=old_node, openclaw_bin=str(real), bridge_dir=bridge)
    assert not found.available and "Node v20.20.2" in found.reason and ">=24.16.0" in found.reason
    found = probe_openclaw(node=new_node, openclaw_bin=str(tmp_path / "nope"), bridge_dir=bridge)
    assert (
        not found.available
        and "openclaw CLI is missing" in found.reason
        and "CLAWLET_OPENCLAW_BIN" in found.reason
    )
    found = probe_openclaw(node=new_node, openclaw_bin=str(placeholder), bridge_dir=bridge)
    assert not found.available and "placeholder" in found.reason
    found = probe_openclaw(node=str(tmp_path / "no-node"), openclaw_bin=str(real), bridge_dir=bridge)
    assert not found.available and "Node.js >= 24.16 is required" in found.reason
    found = probe_openclaw(node=new_node, openclaw_bin=str(real), bridge_dir=tmp_path / "empty")
    assert not found.available and "bridge is missing" in found.reason
    (bridge / "node_modules" / "ws" / "package.json").unlink()
    found = probe_openclaw(node=new_node, openclaw_bin=str(real), bridge_dir=bridge)
    assert not found.available and "npm ci" in found.reason
    fake_bridge(tmp_path / "bridge2")
    probe = probe_openclaw(
        node=new_node, openclaw_bin=str(real / "openclaw.mjs"), bridge_dir=tmp_path / "bridge2"
    )
    assert probe.available and probe.openclaw_version == "2026.9.6" and probe.node_version == "v24.21.0"


def test_find_node_takes_the_argument_then_the_environment_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = fake_executable(tmp_path / "given", "v24.21.0")
    configured = fake_executable(tmp_path / "configured", "v24.21.0")
    monkeypatch.setenv("CLAWLET_OPENCLAW_NODE", str(configured))
    assert find_node(str(given)) == given.resolve()
    assert find_node() == configured.resolve()
    monkeypatch.setenv("CLAWLET_OPENCLAW_NODE", str(tmp_path / "missing"))
    assert find_node() is None
    monkeypatch.delenv("CLAWLET_OPENCLAW_NODE")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    assert find_node() is None


async def test_an_unavailable_openclaw_fails_the_session_clearly(tmp_path: Path) -> None:
    adapter = OpenClawBridgeAdapter(
        BridgeSpec(agent_config={"model": "gpt-4o-mini"}, api_keys={"openai": "sk-x"}),
        BridgeOptions(
            openclaw_node=str(fake_executable(tmp_path / "node", "v20.11.1")),
            openclaw_bin=str(tmp_path / "missing"),
            bridge_dir=fake_bridge(tmp_path / "bridge"),
        ),
    )
    with pytest.raises(OpenClawUnavailable) as checked:  # what the exec plane asks before starting
        adapter.preflight()
    with pytest.raises(OpenClawUnavailable) as caught:
        await adapter.start("s-unavailable", RunConfig(runtime_type="openclaw"))
    message = str(caught.value)
    assert str(checked.value) == message
    assert "OpenClaw is not available on this machine" in message
    assert "Node v20.11.1" in message and "no fallback" in message
    assert "install Node >= 24.16 and openclaw" in message and "CLAWLET_OPENCLAW_BIN=" in message
    assert adapter.pid is None and adapter.starts == 0
    with pytest.raises(OpenClawUnavailable):  # a turn says the same, it never runs elsewhere
        await run_turn(adapter, "hello")


# -- the real bridge against clawlet's own gateway ----------------------------------------------------


@needs_node
async def test_a_turn_streams_text_and_finishes(gateway: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-process-secret")  # must not reach the bridge
    adapter = make_adapter(gateway, api_keys={"openai": "sk-session-key"})
    await adapter.start("bridge-s1", RunConfig(runtime_type="openclaw"))
    try:
        info = adapter.ready_info
        assert info["session_key"] == "agent:main:bridge-s1"
        assert info["gateway"]["spawned"] is False and info["gateway"]["protocol"] == 4
        pid = adapter.pid
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ")
        if environ.is_file():
            names = {item.split("=", 1)[0] for item in environ.read_text().split("\0") if item}
            assert names <= {"PATH", "HOME", "NO_COLOR", "LANG", "LC_ALL", "TZ", "TMPDIR"}
        events = await run_turn(adapter, "你好，bridge! please answer")
        deltas = [event for event in events if isinstance(event, TextDelta)]
        assert len(deltas) >= 2
        assert not any(isinstance(event, RunCancelled) for event in events)
        stored = transcript(gateway, "bridge-s1")
        assert [m["role"] for m in stored] == ["user", "assistant"]
        assert stored[0]["content"] == "你好，bridge! please answer"
        assert stored[1]["content"] == text_of(events)
        # a second turn continues the same OpenClaw session
        await run_turn(adapter, "second message")
        assert [m["role"] for m in transcript(gateway, "bridge-s1")] == ["user", "assistant"] * 2
        assert adapter.get_snapshot()["turns"] == 2
    finally:
        await adapter.stop()
    assert adapter.pid is None and process_gone(pid)


@needs_node
async def test_a_tool_call_arrives_as_tool_start_and_end(gateway: LiveServer) -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    adapter = make_adapter(gateway, on_notify=lambda method, params: notes.append((method, params)))
    await adapter.start("bridge-tool", RunConfig(runtime_type="openclaw"))
    try:
        events = await run_turn(adapter, "run: echo hi")
    finally:
        await adapter.stop()
    starts = [event for event in events if isinstance(event, ToolStart)]
    ends = [event for event in events if isinstance(event, ToolEnd)]
    assert [event.tool for event in starts] == ["terminal"] and "echo hi" in starts[0].input
    assert [event.tool for event in ends] == ["terminal"] and "hi" in ends[0].output
    assert starts[0].call_id and ends[0].call_id == starts[0].call_id and not ends[0].is_error
    index = events.index(ends[0])
    assert isinstance(events[index + 1], NewSegment) and isinstance(events[index + 2], TextDelta)
    assert (
        "audit_log",
        {
            "event": "tool_call",
            "details": {"tool_name": "terminal", "call_id": starts[0].call_id, "is_error": False},
        },
    ) in notes


@needs_node
async def test_cancel_aborts_the_run_and_the_session_goes_on(gateway: LiveServer) -> None:
    adapter = make_adapter(gateway)
    await adapter.start("bridge-cancel", RunConfig(runtime_type="openclaw"))
    try:
        events: list[Event] = []
        async for event in adapter.send_message(UserMessage("a long answer please " * 10)):
            events.append(event)
            if isinstance(event, TextDelta) and len(events) == 1:
                await adapter.cancel()
        assert isinstance(events[-1], RunCancelled)
        assert events[-1].content and events[-1].content == text_of(events)
        assert events[-1].session_id == "bridge-cancel"
        assert len(text_of(events)) < len("a long answer please " * 10)
        follow_up = await run_turn(adapter, "are you still there?")
        assert text_of(follow_up) and not any(isinstance(e, RunCancelled) for e in follow_up)
    finally:
        await adapter.stop()


@needs_node
async def test_a_killed_bridge_fails_the_turn_clearly_and_the_next_turn_restarts_it(
    gateway: LiveServer,
) -> None:
    adapter = make_adapter(gateway)
    await adapter.start("bridge-crash", RunConfig(runtime_type="openclaw"))
    try:
        first_pid = adapter.pid
        assert first_pid is not None
        seen: list[Event] = []
        with pytest.raises(OpenClawBridgeError) as caught:
            async for event in adapter.send_message(UserMessage("a long answer please " * 10)):
                seen.append(event)
                if len(seen) == 1:
                    os.kill(first_pid, signal.SIGKILL)
        assert "the OpenClaw bridge was killed by signal SIGKILL" in str(caught.value)
        assert adapter.pid is None and not adapter.running
        events = await run_turn(adapter, "hello again")  # a new bridge for the same session
        assert text_of(events)
        assert adapter.starts == 2 and adapter.pid not in (None, first_pid)
    finally:
        await adapter.stop()


@needs_node
async def test_requests_and_fire_and_forget_reach_the_python_callables(
    gateway: LiveServer, tmp_path: Path
) -> None:
    requests: list[tuple[str, dict[str, Any]]] = []
    notes: list[tuple[str, dict[str, Any]]] = []

    async def on_request(method: str, params: dict[str, Any]) -> Any:
        requests.append((method, params))
        await asyncio.sleep(0.01)
        if params.get("skill_id") == "missing-skill":
            raise LookupError("not in the catalogue")
        return {"files": [{"path": "SKILL.md", "content": "---\nname: hello\n---\n# 你好 skill"}]}

    async def on_notify(method: str, params: dict[str, Any]) -> None:
        notes.append((method, params))

    state = tmp_path / "openclaw-state"
    adapter = make_adapter(
        gateway,
        skill_index=[{"skill_id": "hello-skill", "version": "1.0"}, {"skill_id": "missing-skill"}],
        state_dir=state,
        on_request=on_request,
        on_notify=on_notify,
    )
    await adapter.start("bridge-rpc", RunConfig(runtime_type="openclaw"))
    try:
        assert requests == [
            ("get_skill_package", {"skill_id": "hello-skill", "version": "1.0"}),
            ("get_skill_package", {"skill_id": "missing-skill", "version": "latest"}),
        ]
        assert (
            (state / "skills" / "hello-skill" / "SKILL.md")
            .read_text(encoding="utf-8")
            .endswith("# 你好 skill")
        )
        skills = adapter.ready_info["skills"]
        assert skills["loaded"] == ["hello-skill"]
        assert skills["unavailable"][0]["skill_id"] == "missing-skill"
        assert "LookupError: not in the catalogue" in skills["unavailable"][0]["error"]
        events = [(method, params["event"], params["details"]["skill_id"]) for method, params in notes]
        assert events == [
            ("audit_log", "skill_loaded", "hello-skill"),
            ("audit_log", "skill_unavailable", "missing-skill"),
        ]
        assert (state / "bridge.log").is_file()  # the bridge's log lives with the state
    finally:
        await adapter.stop()


@needs_node
async def test_a_refused_gateway_token_fails_start_with_the_gateway_error(gateway: LiveServer) -> None:
    adapter = make_adapter(gateway, token="wrong-token")
    with pytest.raises(OpenClawBridgeError) as caught:
        await adapter.start("bridge-badtoken", RunConfig(runtime_type="openclaw"))
    assert "AUTH_TOKEN_MISMATCH" in str(caught.value)
    assert adapter.pid is None
    await adapter.stop()


@needs_node
async def test_stop_ends_a_running_turn_and_the_bridge(gateway: LiveServer) -> None:
    adapter = make_adapter(gateway)
    await adapter.start("bridge-stop", RunConfig(runtime_type="openclaw"))
    pid = adapter.pid
    assert pid is not None
    events: list[Event] = []

    async def consume() -> None:
        async for event in adapter.send_message(UserMessage("a long answer please " * 10)):
            events.append(event)

    consumer = asyncio.create_task(consume())
    while not events:
        await asyncio.sleep(0.01)
    await adapter.stop()
    await asyncio.wait_for(consumer, 10)
    assert isinstance(events[-1], RunCancelled)
    assert adapter.pid is None and process_gone(pid)
    with pytest.raises(OpenClawBridgeError, match="stopped"):
        await run_turn(adapter, "after stop")


# -- a REAL OpenClaw, spawned by the bridge (opt-in) ----------------------------------------------------

REAL_REPLY = "Hello from the scripted model, through the OpenClaw bridge!"
REAL_TOOL_REPLY = "I listed the workspace for the bridge."
SYSTEM_PROMPT_MARKER = "clawlet-bridge-system-prompt-7f3a"
REAL_SKILL_MARKER = "weather-skill-marker-q81"
REAL_SKILL_MD = (
    f"---\nname: bridge-weather\ndescription: Tells the weather ({REAL_SKILL_MARKER})\n---\n# Weather\n"
)
INTERNAL_CONTEXT = "BEGIN_OPENCLAW_INTERNAL_CONTEXT"


def real_script(body: dict[str, Any]) -> Turn:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    users = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "user" and INTERNAL_CONTEXT not in message_text(m)
    ]
    if not users:
        return text_turn("(unscripted)")
    text = message_text(messages[users[-1]])
    if "[bridge:tool]" in text:
        if any(m.get("role") == "tool" for m in messages[users[-1] + 1 :]):
            return text_turn(REAL_TOOL_REPLY)
        return tool_turn(ToolCall("ls", {"path": "."}))
    if "[bridge:slow]" in text:
        return text_turn("slow " * 80, delay=0.1)
    if "[bridge:hello]" in text:
        return text_turn(REAL_REPLY, delay=0.02)
    return text_turn("(unscripted)")


@REAL.skip
@needs_node
async def test_a_real_openclaw_gateway_through_the_bridge(tmp_path: Path) -> None:
    install = REAL.require()
    secret = "sk-bridge-secret-never-on-disk"
    requests: list[tuple[str, dict[str, Any]]] = []
    notes: list[tuple[str, dict[str, Any]]] = []

    async def on_request(method: str, params: dict[str, Any]) -> Any:
        requests.append((method, params))
        return {"files": [{"path": "SKILL.md", "content": REAL_SKILL_MD}]}

    with ScriptedOpenAIServer(real_script, model="scripted-model") as llm:
        adapter = OpenClawBridgeAdapter(
            BridgeSpec(
                agent_config={
                    "model": "scripted-model",
                    "provider": "scripted",
                    "base_url": llm.base_url,
                    "system_prompt": f"Operating rule {SYSTEM_PROMPT_MARKER}: answer briefly.",
                },
                api_keys={"scripted": secret},
                skill_index=[{"skill_id": "bridge-weather", "version": "1.0"}],
                state_dir=tmp_path / "openclaw-state",
                on_request=on_request,
                on_notify=lambda method, params: notes.append((method, params)),
            ),
            BridgeOptions(
                openclaw_node=str(install.node),
                openclaw_bin=str(install.entry),
                bridge_dir=BRIDGE_DIR,
                ready_timeout=150,
            ),
        )
        await adapter.start("real-bridge-1", RunConfig(runtime_type="openclaw"))
        try:
            info = adapter.ready_info
            assert info["gateway"]["spawned"] is True and info["gateway"]["protocol"] == 4
            assert info["gateway"]["openclaw_version"]
            assert info["model"] == "scripted/scripted-model"
            config = (tmp_path / "openclaw-state" / "state" / "openclaw.json").read_text(encoding="utf-8")
            assert secret not in config

            assert requests == [("get_skill_package", {"skill_id": "bridge-weather", "version": "1.0"})]
            assert info["skills"]["loaded"] == ["bridge-weather"]

            events = await run_turn(adapter, "[bridge:hello] hi")
            assert text_of(events) == REAL_REPLY
            prompts = [json.dumps(body["messages"], ensure_ascii=False) for body in llm.requests]
            assert any(SYSTEM_PROMPT_MARKER in prompt for prompt in prompts)  # AGENTS.md
            assert any(REAL_SKILL_MARKER in prompt for prompt in prompts)  # the skill, in OpenClaw's list

            events = await run_turn(adapter, "[bridge:tool] list it")
            starts = [e for e in events if isinstance(e, ToolStart)]
            ends = [e for e in events if isinstance(e, ToolEnd)]
            assert [e.tool for e in starts] == ["ls"] and json.loads(starts[0].input) == {"path": "."}
            assert [e.call_id for e in ends] == [starts[0].call_id] and not ends[0].is_error
            assert text_of(events).endswith(REAL_TOOL_REPLY)
            methods = [(method, params.get("event")) for method, params in notes]
            assert ("audit_log", "skill_loaded") in methods and ("audit_log", "tool_call") in methods
            usage = [params for method, params in notes if method == "usage_report"]
            assert usage and usage[0]["model"] == "scripted/scripted-model" and usage[0]["tokens_out"] > 0

            cancelled: list[Event] = []
            async for event in adapter.send_message(UserMessage("[bridge:slow] go")):
                cancelled.append(event)
                if isinstance(event, TextDelta) and len(text_of(cancelled)) >= 10:
                    await adapter.cancel()
            assert isinstance(cancelled[-1], RunCancelled)
            assert cancelled[-1].content.startswith("slow")
            pid = adapter.pid
        finally:
            await adapter.stop()
        assert pid is not None and process_gone(pid)
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # nothing of the bridge's process group (the gateway) is left

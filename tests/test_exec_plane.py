"""The execution plane (clawlet.execplane: daemon, session_child, session_process, client) against
a scripted control plane: real session processes, a real WebSocket on loopback, the offline demo model.

``openclaw`` sessions run the real Node.js bridge (``bridge/``, needs ``node`` >= 20 and ``npm ci``
there, else those tests skip with the reason); the OpenClaw side is clawlet's own gateway server on
loopback (the same Gateway protocol, the demo model), reached through
``openclaw_config.gateway_url`` as ``tests/test_openclaw_bridge.py`` does. Without Node >= 24.16 and
the ``openclaw`` CLI an ``openclaw`` session must fail with an ``execution_error`` naming what is
missing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from clawlet import secret_env
from clawlet.cli import main as cli_main
from clawlet.config import Settings
from clawlet.controlplane.seed_events import seed_event, to_seed_event
from clawlet.events import (
    EVENT_TYPES,
    ApprovalRequested,
    Event,
    NewSegment,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
    event_from_json,
    event_to_json,
)
from clawlet.execplane.client import ControlPlaneClient, ControlPlaneUnavailable, EventSink, forward_event
from clawlet.execplane.daemon import ExecPlane, bridge_api_keys, openclaw_agent_config, session_settings
from clawlet.execplane.session_child import SessionChild, make_long_term_memory_tool, make_remote_mcp_tool
from clawlet.execplane.session_process import (
    ProcessOptions,
    ProcessSessionAdapter,
    describe_exit,
    start_slots,
)
from clawlet.home import init_home
from clawlet.runtime.openclaw_bridge import BridgeOptions, OpenClawBridgeAdapter, default_bridge_dir
from clawlet.tools.base import ToolError
from tests.conftest import LiveServer
from tests.support.exec_planes import client_for
from tests.support.scripted_control_plane import ScriptedControlPlane

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

USER = "user-1"
FAST = ProcessOptions(heartbeat_interval=0.2, heartbeat_timeout=5.0, cancel_grace=1.0, stop_grace=5.0)
BRIDGE_FAST = BridgeOptions(ready_timeout=60.0, cancel_grace=10.0, stop_grace=10.0)
INIT_KEY = "sk-test-openai-key"
"""The API key the scripted control plane's ``init`` carries."""
GATEWAY_TOKEN = "exec-plane-gateway-token"

BRIDGE_DIR = default_bridge_dir()
BRIDGE_SKIP = (
    None
    if (BRIDGE_DIR / "node_modules" / "ws" / "package.json").is_file()
    else f"the OpenClaw bridge's dependencies are not installed: run `npm ci` in {BRIDGE_DIR}"
)
NODE_SKIP = (
    "node is not on PATH (the OpenClaw bridge needs Node.js >= 20)" if shutil.which("node") is None else None
)
needs_bridge = pytest.mark.skipif(BRIDGE_SKIP is not None, reason=BRIDGE_SKIP or "")
needs_node = pytest.mark.skipif(NODE_SKIP is not None, reason=NODE_SKIP or "")
FINAL_TYPES = ("execution_complete", "execution_error")

MakePlane = Callable[..., Awaitable[ExecPlane]]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def seed_events(plane: ScriptedControlPlane) -> list[tuple[str, dict[str, Any]]]:
    """``(session id, event)`` of every event the exec plane sent that has a seed-001 name, named so
    (as ``/api/cluster/sessions/{id}/events`` shows them)."""
    named = [(frame["session_id"], seed_event(frame["data"])) for frame in plane.sse_events]
    return [(session_id, data) for session_id, data in named if data is not None]


def events_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    return [data for sid, data in seed_events(plane) if sid == session_id]


def finals_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    return [data for data in events_of(plane, session_id) if data["type"] in FINAL_TYPES]


async def wait_finals(
    plane: ScriptedControlPlane, session_id: str, count: int = 1, timeout: float = 20.0
) -> list[dict[str, Any]]:
    await plane.wait_for(lambda: len(finals_of(plane, session_id)) >= count, timeout)
    return finals_of(plane, session_id)


async def until(condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def snapshots_of(plane: ScriptedControlPlane, session_id: str, reason: str) -> list[dict[str, Any]]:
    return [
        record["params"]
        for record in plane.fire_and_forget
        if record["method"] == "snapshot_sync"
        and record["session_id"] == session_id
        and record["params"].get("reason") == reason
    ]


@pytest.fixture
async def plane() -> AsyncIterator[ScriptedControlPlane]:
    async with ScriptedControlPlane() as scripted:
        yield scripted


@pytest.fixture
async def make_plane(plane: ScriptedControlPlane, tmp_path: Path) -> AsyncIterator[MakePlane]:
    made: list[tuple[ExecPlane, ControlPlaneClient]] = []
    pids: set[int] = set()

    async def make(
        *,
        delay: float = 0.0,
        options: ProcessOptions = FAST,
        openclaw_options: BridgeOptions = BRIDGE_FAST,
        snapshot_interval: float = 3600.0,
    ) -> ExecPlane:
        state = tmp_path / "state"
        client = client_for(plane, USER, state)
        exec_plane = ExecPlane(
            client,
            state,
            Settings(provider="demo"),
            process_options=options,
            openclaw_options=openclaw_options,
            snapshot_interval=snapshot_interval,
            demo_token_delay=delay,
        )
        await exec_plane.start()
        await client.connect()
        made.append((exec_plane, client))
        return exec_plane

    def remember_pids() -> None:
        for exec_plane, _ in made:
            pids.update(exec_plane.session_pids().values())

    yield make
    remember_pids()
    for exec_plane, client in made:
        await exec_plane.shutdown()
        await client.close()
    leftovers = [pid for pid in pids if alive(pid)]
    assert leftovers == [], f"session processes left running: {leftovers}"


# -- the event translation ------------------------------------------------------------------------


def test_every_clawlet_event_has_its_seed_form() -> None:
    assert to_seed_event(TextDelta("hi")) == {"type": "text_chunk", "content": "hi"}
    assert to_seed_event(Thinking("hmm")) == {"type": "thinking", "content": "hmm"}
    assert to_seed_event(ToolStart("terminal", "ls", "c1")) == {
        "type": "tool_call_start",
        "tool_name": "terminal",
        "tool_input": "ls",
        "call_id": "c1",
    }
    assert to_seed_event(ToolEnd("terminal", "out", "c1", is_error=True)) == {
        "type": "tool_call_complete",
        "tool_name": "terminal",
        "result": "out",
        "call_id": "c1",
        "is_error": True,
    }
    assert to_seed_event(RunFinished("done", "s")) == {"type": "execution_complete", "content": "done"}
    assert to_seed_event(RunCancelled("s", "par")) == {
        "type": "execution_complete",
        "content": "par",
        "cancelled": True,
    }
    assert to_seed_event(RunFailed("boom", "s")) == {"type": "execution_error", "error": "boom"}
    for silent in (RunStarted("s", "r"), Retrieval("q", []), NewSegment(), Usage(1, 2), Title("s", "t")):
        assert to_seed_event(silent) is None
    # the edge reads what travels over /ws/vm: clawlet's events in their JSON encoding
    assert seed_event(event_to_json(TextDelta("hi"))) == {"type": "text_chunk", "content": "hi"}
    for unknown in ({"type": "text_chunk", "content": "a seed event"}, {"kind": "Nope"}, "text", None):
        assert seed_event(unknown) is None


async def test_every_event_goes_out_as_it_is_and_usage_also_as_a_usage_report() -> None:
    class Sink:
        def __init__(self) -> None:
            self.sse: list[tuple[str, Any]] = []
            self.usage: list[tuple[str, str, int, int]] = []

        async def send_sse_event(self, session_id: str, data: Any) -> int:
            self.sse.append((session_id, data))
            return len(self.sse)

        async def report_usage(
            self, session_id: str, model: str, tokens_in: int, tokens_out: int, **extra: Any
        ) -> None:
            self.usage.append((session_id, model, tokens_in, tokens_out))

    sink = Sink()
    checked: EventSink = sink
    sent: list[Event] = [Usage(10, 3), TextDelta("a"), NewSegment(), Usage(0, 0)]
    for event in sent:
        await forward_event(checked, "s1", event, model="gpt-x")
    assert sink.usage == [("s1", "gpt-x", 10, 3)]
    assert sink.sse == [("s1", event_to_json(event)) for event in sent]


def test_every_event_survives_its_json_encoding() -> None:
    approval = ApprovalRequested("a1", "terminal", {"command": "ls"}, "c1", "ls", ["approve"], "why")
    question = QuestionAsked("a2", "Which one?", "c2")
    samples: list[Event] = [
        RunStarted("s", "r"),
        Retrieval("q", [{"source": "memory/MEMORY.md", "text": "t", "score": 0.5}]),
        TextDelta("x 你好"),
        Thinking("hmm"),
        ToolStart("terminal", "ls", "c1"),
        ToolEnd("t", "o", "c", True),
        NewSegment(),
        Usage(10, 3),
        RunFinished("done", "s"),
        RunCancelled("s", "part"),
        RunFailed("boom", "s"),
        RunWaiting("s", "so far", [approval, question]),
        approval,
        question,
        Title("s", "A title"),
    ]
    assert {type(event) for event in samples} == set(EVENT_TYPES.values())  # every kind
    for event in samples:
        assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
        encoded = event_to_json(event)  # what dataclasses.asdict gives, its lists and dicts copies
        reference = {"kind": type(event).__name__, **dataclasses.asdict(event)}
        if isinstance(event, RunWaiting):
            reference["pending"] = [event_to_json(item) for item in event.pending]
        assert encoded == reference
        for value in encoded.values():
            if isinstance(value, dict | list):
                value.clear()
        assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    assert event_to_json(question) == {
        "kind": "QuestionAsked",
        "approval_id": "a2",
        "question": "Which one?",
        "call_id": "c2",
        "allowed_decisions": ["answer", "reject"],
    }
    bad: list[Any] = [
        {"kind": "Nope"},
        {"kind": "TextDelta"},
        {"text": "x"},
        {"kind": "RunWaiting", "session_id": "s", "content": "", "pending": 1},
        {
            "kind": "RunWaiting",
            "session_id": "s",
            "content": "",
            "pending": [{"kind": "TextDelta", "text": ""}],
        },
        "TextDelta",
    ]
    for data in bad:
        with pytest.raises(ValueError):
            event_from_json(data)
    assert describe_exit(-signal.SIGKILL) == "was killed by signal SIGKILL"
    assert describe_exit(3) == "exited with code 3"


def test_session_settings_take_the_control_planes_keys_and_the_agents_model() -> None:
    base = Settings(provider="auto")
    settings = session_settings(base, {"model": "gpt-4o", "temperature": 0.2}, {"openai": "sk-1", "x": "y"})
    assert (settings.provider, settings.llm_model, settings.openai_api_key) == ("openai", "gpt-4o", "sk-1")
    assert settings.temperature == 0.2
    claude = session_settings(base, {"model": "claude-sonnet-4-5"}, {"anthropic": "sk-ant"})
    assert (claude.resolved_provider, claude.anthropic_api_key) == ("anthropic", "sk-ant")
    demo = session_settings(Settings(provider="demo"), {"model": "gpt-4o"}, {"openai": "sk-1"})
    assert demo.resolved_provider == "demo"


def test_session_settings_take_the_models_provider_prefix_and_base_url() -> None:
    own = Settings(provider="openai", llm_model="local-model", llm_base_url="http://127.0.0.1:9/v1")
    assert session_settings(own, {}, {}).llm_model == "local-model"  # no model given: the machine's own
    claude = session_settings(own, {"model": "anthropic/claude-x"}, {"anthropic": "sk-ant"})
    # another provider than the machine's: not the machine's endpoint
    assert (claude.provider, claude.llm_model, claude.llm_base_url) == ("anthropic", "claude-x", None)
    remote = session_settings(own, {"model": "openai/gpt-4o", "base_url": "http://127.0.0.1:8/v1"}, {})
    assert (remote.provider, remote.llm_model, remote.llm_base_url) == (
        "openai",
        "gpt-4o",
        "http://127.0.0.1:8/v1",
    )
    named = session_settings(
        Settings(provider="auto"), {"model": "deepseek-chat", "provider": "deepseek"}, {}
    )
    assert (named.provider, named.llm_model) == ("deepseek", "deepseek-chat")
    other = session_settings(Settings(provider="auto"), {"model": "meta/llama-3"}, {"openai": "sk-1"})
    assert (other.provider, other.llm_model) == ("openai", "meta/llama-3")  # not a provider clawlet knows


def test_an_openclaw_session_without_a_model_gets_the_machines_own() -> None:
    own = Settings(provider="openai", llm_model="scripted-model", llm_base_url="http://127.0.0.1:9/v1")
    assert openclaw_agent_config(own, {"system_prompt": "Be brief."}) == {
        "system_prompt": "Be brief.",
        "model": "scripted-model",
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
    }
    given = {"model": "anthropic/claude-x", "system_prompt": "Be brief."}
    assert openclaw_agent_config(own, given) == given  # the control plane's model wins
    deepseek = openclaw_agent_config(Settings(provider="deepseek", deepseek_api_key="sk-d"), {})
    assert deepseek == {
        "model": "deepseek-chat",
        "provider": "deepseek",
        "base_url": "https://api.deepseek.com",
    }
    assert openclaw_agent_config(Settings(provider="demo"), {}) == {}  # OpenClaw cannot use the demo model
    assert openclaw_agent_config(Settings(provider="openai"), {}) == {}  # no CLAWLET_LLM_MODEL


# -- sessions -------------------------------------------------------------------------------------


async def test_a_turn_streams_text_chunks_then_execution_complete_and_is_kept_in_memory(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    # the user message comes right behind start_session: it must wait for the process, not be lost
    await plane.start_session("s1", runtime_type="semigraph", agent_config={"system_prompt": "Be brief."})
    await plane.user_message("s1", {"content": "hello there"})
    (final,) = await wait_finals(plane, "s1")
    events = events_of(plane, "s1")
    assert final == events[-1]
    assert final["type"] == "execution_complete", final
    assert "cancelled" not in final
    chunks = [data["content"] for data in events if data["type"] == "text_chunk"]
    # every chunk once, in order (chunks the link could not send at once go merged, so how many
    # there are depends on the machine's speed)
    assert chunks and "".join(chunks) == final["content"]
    assert "hello there" in final["content"] and "demo" in final["content"]

    pid = exec_plane.session_pids()["s1"]
    assert pid != os.getpid() and alive(pid)
    conversation = (exec_plane.sessions_dir / "s1" / "memory" / "conversation.md").read_text(encoding="utf-8")
    assert "## [user] " in conversation and "\n\nhello there\n" in conversation
    assert "## [assistant] " in conversation and final["content"] in conversation
    assert list((exec_plane.sessions_dir / "s1" / "checkpoints").iterdir())  # the turn was checkpointed

    # the seed's spelling of the message ({message}) works too, in the same process
    await plane.user_message("s1", {"message": "second message"})
    finals = await wait_finals(plane, "s1", 2)
    assert finals[1]["type"] == "execution_complete" and "second message" in finals[1]["content"]
    assert exec_plane.session_pids()["s1"] == pid


async def test_long_term_memory_and_remote_mcp_go_to_the_control_plane(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def memory_search(params: dict[str, Any]) -> list[dict[str, Any]]:
        asked.append(("memory_search", params))
        return [{"text": "用户最喜欢乌龙茶", "score": 0.9}]

    def mcp_call(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("mcp_call", params))
        return {"content": [{"type": "text", "text": "42"}]}

    plane.methods["memory_search"] = memory_search
    plane.methods["mcp_call"] = mcp_call
    await make_plane()
    await plane.start_session("s1", mcp_servers=[{"name": "tools"}])
    await plane.user_message("s1", {"content": 'call: long_term_memory {"query": "茶"}'})
    (final,) = await wait_finals(plane, "s1")
    assert "用户最喜欢乌龙茶" in final["content"]
    call = 'call: remote_mcp {"server": "tools", "tool": "add", "arguments": {"a": 2, "b": 40}}'
    await plane.user_message("s1", {"content": call})
    finals = await wait_finals(plane, "s1", 2)
    assert "42" in finals[1]["content"]
    assert asked == [
        ("memory_search", {"query": "茶", "top_k": 5}),
        ("mcp_call", {"server": "tools", "tool": "add", "arguments": {"a": 2, "b": 40}}),
    ]


async def test_cluster_tools_degrade_to_answers_the_agent_can_plan_around() -> None:
    """Degraded mode (seed 001 §8): with the control plane unreachable the client answers
    ``memory_search`` with nothing and fails ``mcp_call`` (tests/test_cluster_client.py); the tools
    turn that into an empty search result and an error tool message."""

    async def offline(method: str, params: dict[str, Any]) -> Any:
        if method == "memory_search":
            return []
        raise ControlPlaneUnavailable("control plane unreachable; remote MCP is unavailable offline")

    memory = make_long_term_memory_tool(offline)
    assert "No long-term memories matched" in await memory.ainvoke({"query": "茶"})
    mcp = make_remote_mcp_tool(["tools"], offline)
    with pytest.raises(ToolError, match="remote MCP call failed: control plane unreachable"):
        await mcp.ainvoke({"server": "tools", "tool": "add", "arguments": {}})
    with pytest.raises(ToolError, match="unknown MCP server 'other'"):
        await mcp.ainvoke({"server": "other", "tool": "add"})


async def test_a_tool_call_streams_tool_call_start_and_complete(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    await make_plane()
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "run: echo hi"})
    (final,) = await wait_finals(plane, "s1")
    assert final["type"] == "execution_complete"
    types = [data["type"] for data in events_of(plane, "s1")]
    assert (
        types.index("tool_call_start") < types.index("tool_call_complete") < types.index("execution_complete")
    )
    start = next(data for data in events_of(plane, "s1") if data["type"] == "tool_call_start")
    complete = next(data for data in events_of(plane, "s1") if data["type"] == "tool_call_complete")
    assert (start["tool_name"], start["tool_input"]) == ("terminal", "echo hi")
    assert (complete["tool_name"], complete["result"], complete["is_error"]) == ("terminal", "hi", False)
    assert complete["call_id"] == start["call_id"]


async def test_the_exec_planes_held_secrets_are_masked_in_a_session_processs_tool_output(
    plane: ScriptedControlPlane, make_plane: MakePlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exec plane moved its secrets into memory (clawlet.secret_env): its session processes do
    not have them in their environment, yet mask them when a tool prints one; the VM token is not
    passed on at all."""
    monkeypatch.setattr(
        secret_env,
        "_held",
        {"AWS_SECRET_ACCESS_KEY": "aws-held-0123456789", "VM_TOKEN": "vm-token-0123456789"},
    )
    await make_plane()
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "run: echo aws-held-0123456789 vm-token-0123456789"})
    (final,) = await wait_finals(plane, "s1")
    assert final["type"] == "execution_complete"
    complete = next(data for data in events_of(plane, "s1") if data["type"] == "tool_call_complete")
    assert complete["result"] == "[redacted] vm-token-0123456789"


async def test_two_sessions_run_at_the_same_time_in_their_own_processes(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane(delay=0.03)
    await plane.start_session("s1")
    await plane.start_session("s2")
    await plane.user_message("s1", {"content": "one"})
    await plane.user_message("s2", {"content": "two"})
    await wait_finals(plane, "s1")
    await wait_finals(plane, "s2")
    pids = exec_plane.session_pids()
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
    order = [(session_id, data["type"]) for session_id, data in seed_events(plane)]
    # the streams interleave: each session had streamed before the other one finished
    assert order.index(("s2", "text_chunk")) < order.index(("s1", "execution_complete"))
    assert order.index(("s1", "text_chunk")) < order.index(("s2", "execution_complete"))
    for sid, said in (("s1", "one"), ("s2", "two")):
        (final,) = finals_of(plane, sid)
        assert final["type"] == "execution_complete" and f"“{said}”" in final["content"]
        memory = exec_plane.sessions_dir / sid / "memory" / "conversation.md"
        assert f"\n\n{said}\n" in memory.read_text(encoding="utf-8")


async def test_sessions_started_together_all_start(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    """They open the shared home's SQLite indexes at the same moment (once: "database is locked"),
    and no more than ``start_concurrency`` start at once (the others wait for a slot)."""
    exec_plane = await make_plane(options=dataclasses.replace(FAST, start_concurrency=2))
    names = [f"s{i}" for i in range(4)]
    for sid in names:
        await plane.start_session(sid)
    for sid in names:
        await plane.user_message(sid, {"content": f"hi {sid}"})
    for sid in names:
        (final,) = await wait_finals(plane, sid, timeout=30)
        assert final["type"] == "execution_complete", final
    assert len(set(exec_plane.session_pids().values())) == 4
    assert start_slots().most == 2 and start_slots().starting == 0


async def test_a_killed_session_process_fails_only_its_own_turn(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane(delay=0.03)
    await plane.start_session("victim")
    await plane.start_session("bystander")
    await plane.user_message("victim", {"content": "a long answer please"})
    await plane.user_message("bystander", {"content": "me too"})
    await plane.wait_for(lambda: len(events_of(plane, "victim")) >= 2, 20)
    pids = exec_plane.session_pids()
    os.kill(pids["victim"], signal.SIGKILL)

    (error,) = await wait_finals(plane, "victim")
    assert error["type"] == "execution_error"
    assert "SIGKILL" in error["error"], error
    (final,) = await wait_finals(plane, "bystander")
    assert final["type"] == "execution_complete" and "me too" in final["content"]
    assert exec_plane.session_pids()["bystander"] == pids["bystander"]
    await until(lambda: not alive(pids["victim"]))

    # the next message starts a new process for the session, which continues from its files
    await plane.user_message("victim", {"content": "are you back?"})
    finals = await wait_finals(plane, "victim", 2)
    assert finals[1]["type"] == "execution_complete" and "are you back?" in finals[1]["content"]
    assert exec_plane.session_pids()["victim"] not in (pids["victim"], pids["bystander"])


async def test_an_unknown_runtime_type_is_refused_without_a_process(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    await plane.start_session("odd", runtime_type="quantum")
    (odd,) = await wait_finals(plane, "odd")
    assert odd["type"] == "execution_error"
    assert "unknown runtime_type 'quantum'" in odd["error"], odd
    assert "supported: engine, openclaw" in odd["error"] and "no fallback" in odd["error"]
    assert exec_plane.session_pids() == {}
    assert not (exec_plane.sessions_dir / "odd").exists()

    await plane.user_message("odd", {"content": "hello?"})
    finals = await wait_finals(plane, "odd", 2)
    assert finals[1]["type"] == "execution_error" and "quantum" in finals[1]["error"]
    assert exec_plane.session_pids() == {}


async def test_a_session_process_that_cannot_start_is_reported_and_tried_again(
    plane: ScriptedControlPlane, make_plane: MakePlane, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'no engine here' >&2\nexit 3\n", encoding="utf-8")
    broken.chmod(0o755)
    exec_plane = await make_plane(options=ProcessOptions(python=str(broken)))
    await plane.start_session("s1")
    (error,) = await wait_finals(plane, "s1")
    assert error["type"] == "execution_error"
    assert "failed to start" in error["error"] and "exited with code 3" in error["error"], error
    await plane.user_message("s1", {"content": "hello"})
    errors = await wait_finals(plane, "s1", 2)
    assert errors[1]["type"] == "execution_error" and "exited with code 3" in errors[1]["error"]
    adapter = exec_plane.adapter("s1")
    assert isinstance(adapter, ProcessSessionAdapter) and adapter.starts == 2
    assert "no engine here" in (exec_plane.sessions_dir / "s1" / "process.log").read_text(encoding="utf-8")


async def test_cancel_ends_a_slow_turn_with_its_partial_text(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane(delay=2.0)  # the demo reply would take about 80 s
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "take your time"})
    await plane.wait_for(lambda: len(events_of(plane, "s1")) >= 2, 60)
    await plane.cancel("s1")
    # the turn ends at once (30 s: any loaded machine), not when its reply would have been done
    (final,) = await wait_finals(plane, "s1", timeout=30)
    assert final["type"] == "execution_complete" and final["cancelled"] is True
    streamed = "".join(data["content"] for data in events_of(plane, "s1") if data["type"] == "text_chunk")
    assert final["content"] == streamed and streamed.startswith("[demo]")
    assert "take your time" not in streamed  # it was cut short
    # the session process saves the partial reply once the cancel reached it (the final event comes
    # from the SessionManager, which does not wait for that)
    memory = exec_plane.sessions_dir / "s1" / "memory" / "conversation.md"
    conversation = await until(lambda: "## [assistant] " in (text := memory.read_text("utf-8")) and text)
    assert streamed in conversation
    pid = exec_plane.session_pids()["s1"]  # the process survives a cancel
    assert alive(pid)


async def test_a_cancel_right_behind_the_message_cancels_without_killing_the_process(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    options = ProcessOptions(heartbeat_interval=0.2, heartbeat_timeout=5.0, cancel_grace=10.0)
    exec_plane = await make_plane(delay=0.2, options=options)
    await plane.start_session("s1")
    adapter = await until(lambda: exec_plane.adapter("s1"))
    assert isinstance(adapter, ProcessSessionAdapter)
    await until(lambda: adapter.ready, 60)
    pid = adapter.pid
    await plane.user_message("s1", {"content": "take your time"})
    await plane.cancel("s1")
    (final,) = await wait_finals(plane, "s1", timeout=5)
    assert final["type"] == "execution_complete" and final["cancelled"] is True
    # the SessionManager cancelled it before or after it reached the session process; either way
    # the process was not killed (the grace period is 10 s) and answers the next message
    assert adapter.turns <= 1
    assert adapter.pid == pid and adapter.ready
    await plane.user_message("s1", {"content": "python: 6 * 7"})
    finals = await wait_finals(plane, "s1", 2, timeout=30)
    assert finals[1]["type"] == "execution_complete" and "42" in finals[1]["content"], finals
    assert adapter.pid == pid


async def test_the_session_process_honours_a_cancel_that_arrives_before_its_turn_started(
    tmp_path: Path,
) -> None:
    """Driven in-process through its pipe protocol: ``message`` and ``cancel`` arrive in one read."""

    class Writer:
        def __init__(self) -> None:
            self.messages: list[dict[str, Any]] = []

        def write(self, data: bytes) -> None:
            self.messages += [json.loads(line) for line in data.decode().splitlines()]

        async def drain(self) -> None:
            return None

    def line(message: dict[str, Any]) -> bytes:
        return (json.dumps(message) + "\n").encode()

    def final_kinds() -> list[str]:
        kinds = [m["event"]["kind"] for m in writer.messages if m["type"] == "event"]
        return [kind for kind in kinds if kind in ("RunFinished", "RunCancelled", "RunFailed")]

    settings = Settings(provider="demo", home=tmp_path / "home")
    init_home(settings.paths)
    reader = asyncio.StreamReader()
    writer = Writer()
    child = SessionChild(reader, writer)  # type: ignore[arg-type]
    init = {
        "type": "init",
        "session_id": "s1",
        "session_dir": str(tmp_path / "s1"),
        "settings": settings.model_dump(mode="json"),
        "demo_token_delay": 0.2,
    }
    reader.feed_data(
        line(init)
        + line({"type": "message", "turn": "t1", "text": "take your time", "context": {}})
        + line({"type": "cancel", "turn": "t1"})
    )
    serving = asyncio.create_task(child.serve())
    await until(final_kinds, 5)
    assert final_kinds() == ["RunCancelled"]
    reader.feed_data(line({"type": "message", "turn": "t2", "text": "python: 6 * 7", "context": {}}))
    await until(lambda: len(final_kinds()) == 2, 10)
    assert final_kinds()[1] == "RunFinished"
    reader.feed_eof()  # the parent went away: the child ends
    assert await asyncio.wait_for(serving, 10) == 0
    assert writer.messages[0]["type"] == "ready" and writer.messages[-1]["type"] == "stopped"


async def test_a_session_process_that_ignores_cancel_is_killed_after_the_grace_period(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    options = ProcessOptions(heartbeat_interval=0.2, heartbeat_timeout=30.0, cancel_grace=0.5)
    exec_plane = await make_plane(delay=0.2, options=options)
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "take your time"})
    await plane.wait_for(lambda: len(events_of(plane, "s1")) >= 2, 20)
    pid = exec_plane.session_pids()["s1"]
    os.kill(pid, signal.SIGSTOP)  # hung: it will not answer the cancel
    await plane.cancel("s1")
    (final,) = await wait_finals(plane, "s1", timeout=5)
    assert final["type"] == "execution_complete" and final["cancelled"] is True
    await until(lambda: not alive(pid))


async def test_a_silent_session_process_is_killed_as_hung(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    options = ProcessOptions(heartbeat_interval=0.1, heartbeat_timeout=1.0)
    exec_plane = await make_plane(delay=0.2, options=options)
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "take your time"})
    await plane.wait_for(lambda: len(events_of(plane, "s1")) >= 2, 20)
    pid = exec_plane.session_pids()["s1"]
    os.kill(pid, signal.SIGSTOP)
    (final,) = await wait_finals(plane, "s1", timeout=60)
    assert final["type"] == "execution_error" and "hung" in final["error"], final
    await until(lambda: not alive(pid))


async def test_stop_session_cancels_the_turn_ends_the_process_and_sends_a_last_snapshot(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane(delay=0.2)
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "take your time"})
    await plane.wait_for(lambda: len(events_of(plane, "s1")) >= 2, 20)
    pid = exec_plane.session_pids()["s1"]
    await plane.stop_session("s1")
    (final,) = await wait_finals(plane, "s1", timeout=60)
    assert final["type"] == "execution_complete" and final["cancelled"] is True
    await until(lambda: not alive(pid))
    await until(lambda: "s1" not in exec_plane.sessions)
    assert exec_plane.session_pids() == {}
    (snapshot,) = await plane.wait_for(lambda: snapshots_of(plane, "s1", "stop"))
    memory = snapshot["short_term_memory"]
    assert "take your time" in memory["conversation"] and final["content"] in memory["conversation"]
    assert set(memory) == {"conversation", "context", "scratchpad"}
    assert snapshot["checkpoint"]["thread_id"].startswith("s1:")
    assert snapshot["process_alive"] is False

    await plane.user_message("s1", {"content": "anyone?"})  # unregistered: dropped, nothing started
    await asyncio.sleep(0.2)
    assert exec_plane.session_pids() == {}


async def test_a_session_started_again_right_after_its_stop_continues_in_a_new_process(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "first life"})
    await wait_finals(plane, "s1")
    old_pid = exec_plane.session_pids()["s1"]
    await plane.stop_session("s1")
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "second life"})
    finals = await wait_finals(plane, "s1", 2)
    assert finals[1]["type"] == "execution_complete" and "second life" in finals[1]["content"], finals
    assert not alive(old_pid) and exec_plane.session_pids()["s1"] != old_pid
    conversation = (exec_plane.sessions_dir / "s1" / "memory" / "conversation.md").read_text(encoding="utf-8")
    assert conversation.index("first life") < conversation.index("second life")


async def test_snapshots_are_synced_periodically_and_skipped_while_disconnected(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane(delay=0.05, snapshot_interval=0.3)
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "remember this"})
    (final,) = await wait_finals(plane, "s1")
    periodic = await plane.wait_for(
        lambda: [
            s
            for s in snapshots_of(plane, "s1", "periodic")
            if final["content"] in s["short_term_memory"]["conversation"]
        ],
        5,
    )
    assert periodic[-1]["checkpoint"] is not None

    # degraded mode: the control plane goes away in the middle of a turn
    before = len(events_of(plane, "s1"))
    await plane.user_message("s1", {"content": "keep going offline"})
    await plane.wait_for(lambda: len(events_of(plane, "s1")) > before + 1, 20)
    await plane.stop()
    await until(lambda: not exec_plane.client.connected)
    skipped = exec_plane.snapshot_rounds_skipped
    sent = exec_plane.snapshots_sent
    conversation = exec_plane.sessions_dir / "s1" / "memory" / "conversation.md"
    # the turn finishes without the control plane: its reply lands in the session's memory
    await until(lambda: conversation.read_text(encoding="utf-8").count("## [assistant]") == 2, 15)
    await until(lambda: exec_plane.snapshot_rounds_skipped >= skipped + 2)
    assert exec_plane.snapshots_sent == sent

    await plane.start()  # back: the buffered events arrive and snapshots resume
    finals = await wait_finals(plane, "s1", 2, timeout=60)
    assert finals[1]["type"] == "execution_complete" and "keep going offline" in finals[1]["content"]
    await plane.wait_for(
        lambda: any(
            "keep going offline" in s["short_term_memory"]["conversation"]
            for s in snapshots_of(plane, "s1", "periodic")
        ),
        5,
    )


async def test_load_skill_requests_fill_the_shared_cache_inside_the_home(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    fetched: list[dict[str, Any]] = []

    def package(params: dict[str, Any]) -> dict[str, Any]:
        fetched.append(params)
        return {"package": {"files": [{"path": "SKILL.md", "content": "---\nname: pdf\n---\nUse pdftk."}]}}

    plane.methods["get_skill_package"] = package
    index = [
        {"id": "pdf", "name": "pdf", "description": "PDF tools"},
        {"id": "gone", "requires": {"bins": ["no-such-binary-xyz"]}},
    ]
    await plane.start_session("s1", skill_index=index)
    await until(lambda: "s1" in exec_plane.session_pids())
    context = exec_plane.session_context("s1")
    assert context is not None
    assert "<name>pdf</name>" in context.extra_system_prompt and "load_skill" in context.extra_system_prompt
    assert "gone" not in context.extra_system_prompt  # its requirements are not met here

    adapter = exec_plane.adapter("s1")
    assert isinstance(adapter, ProcessSessionAdapter) and adapter.spec.on_request is not None
    result = await adapter.spec.on_request("load_skill", {"skill_id": "pdf", "version": "latest"})
    assert "Use pdftk." in result["skill_md"]
    assert Path(result["path"]) == exec_plane.skills_dir / "pdf"
    with pytest.raises(LookupError):
        await adapter.spec.on_request("load_skill", {"skill_id": "gone"})
    assert [p["skill_id"] for p in fetched] == ["pdf"]

    # the cached package is inside the shared home: the agent's own tools read it
    await plane.user_message("s1", {"content": "read .skills/pdf/SKILL.md"})
    (final,) = await wait_finals(plane, "s1")
    complete = next(data for data in events_of(plane, "s1") if data["type"] == "tool_call_complete")
    assert "Use pdftk." in complete["result"] and final["type"] == "execution_complete"


# -- openclaw sessions ------------------------------------------------------------------------------


@pytest.fixture
def make_gateway(tmp_path: Path, live_server: Callable[..., LiveServer]) -> Callable[..., LiveServer]:
    """clawlet's own gateway server on loopback, the fake OpenClaw the bridge connects to."""

    def make(delay: float = 0.02) -> LiveServer:
        settings = Settings(home=tmp_path / "fake-openclaw", gateway_token=GATEWAY_TOKEN)
        init_home(settings.paths)
        return live_server(settings, demo_token_delay=delay)

    return make


def fake_openclaw_config(server: LiveServer) -> dict[str, Any]:
    return {"gateway_url": f"ws://127.0.0.1:{server.port}/gateway", "gateway_token": GATEWAY_TOKEN}


def fake_node(path: Path, version: str) -> str:
    path.write_text(f"#!/bin/sh\necho {version}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def text_chunks(plane: ScriptedControlPlane, session_id: str) -> str:
    return "".join(data["content"] for data in events_of(plane, session_id) if data["type"] == "text_chunk")


def records_of(plane: ScriptedControlPlane, session_id: str, method: str) -> list[dict[str, Any]]:
    return [
        record["params"]
        for record in plane.fire_and_forget
        if record["session_id"] == session_id and record["method"] == method
    ]


def test_the_bridge_gets_inits_keys_over_the_machines_own() -> None:
    settings = Settings(provider="demo", openai_api_key="sk-local", anthropic_api_key="sk-ant-local")
    assert bridge_api_keys(settings, {"openai": "sk-init", "OpenRouter": "sk-or", "empty": ""}) == {
        "openai": "sk-init",
        "anthropic": "sk-ant-local",
        "openrouter": "sk-or",
    }


@needs_bridge
@needs_node
async def test_an_openclaw_session_runs_through_the_bridge_and_streams_the_seeds_events(
    plane: ScriptedControlPlane,
    make_gateway: Callable[..., LiveServer],  # before make_plane: the fake OpenClaw outlives the sessions
    make_plane: MakePlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gateway = make_gateway()
    fetched: list[dict[str, Any]] = []

    def package(params: dict[str, Any]) -> dict[str, Any]:
        fetched.append(params)
        skill_md = "---\nname: pdf\ndescription: PDF tools\n---\nUse pdftk."
        return {"package": {"files": [{"path": "SKILL.md", "content": skill_md}]}}

    plane.methods["get_skill_package"] = package
    exec_plane = await make_plane()
    await plane.start_session(
        "oc1",
        runtime_type="openclaw",
        agent_config={"model": "gpt-4o-mini", "system_prompt": "Be brief."},
        skill_index=[{"id": "pdf", "name": "pdf", "description": "PDF tools"}],
        # the machine's own programs and directories cannot be chosen by the control plane
        openclaw_config={
            **fake_openclaw_config(gateway),
            "node": "/nonexistent/node",
            "openclaw_bin": "/nonexistent/openclaw.mjs",
            "state_dir": "/nonexistent/state",
        },
    )
    # the user message comes right behind start_session: it waits for the bridge's ready
    await plane.user_message("oc1", {"content": "hello openclaw"})
    (final,) = await wait_finals(plane, "oc1", timeout=60)
    events = events_of(plane, "oc1")
    assert final == events[-1]
    assert final["type"] == "execution_complete", final
    assert "cancelled" not in final
    chunks = [data["content"] for data in events if data["type"] == "text_chunk"]
    assert chunks and "".join(chunks) == final["content"]
    assert "hello openclaw" in final["content"] and "demo" in final["content"]

    adapter = exec_plane.adapter("oc1")
    assert isinstance(adapter, OpenClawBridgeAdapter)
    pid = exec_plane.session_pids()["oc1"]
    assert pid == adapter.pid and pid != os.getpid() and alive(pid)
    assert adapter.ready_info["session_key"] == "agent:main:oc1"
    assert adapter.spec.api_keys == {"openai": INIT_KEY}  # init's key, in memory, for the bridge
    environ = Path(f"/proc/{pid}/environ")
    if environ.is_file():
        assert INIT_KEY.encode() not in environ.read_bytes()
    # the turn ran on the fake OpenClaw, under the bridge's session key
    stored = json.loads((gateway.settings.paths.sessions / "oc1.json").read_text(encoding="utf-8"))
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [
        ("user", "hello openclaw"),
        ("assistant", final["content"]),
    ]
    # the skill came from the control plane into the shared cache, and from there to OpenClaw
    assert [params["skill_id"] for params in fetched] == ["pdf"]
    state = exec_plane.sessions_dir / "oc1" / "openclaw-memory"
    assert (exec_plane.skills_dir / "pdf" / "SKILL.md").is_file()
    assert (state / "skills" / "pdf" / "SKILL.md").read_text(encoding="utf-8").endswith("Use pdftk.")
    assert adapter.ready_info["skills"] == {"loaded": ["pdf"], "unavailable": []}
    assert (state / "bridge.log").is_file() and not Path("/nonexistent").exists()
    assert "ignoring openclaw_config node, openclaw_bin, state_dir" in caplog.text
    audit = records_of(plane, "oc1", "audit_log")
    assert audit and audit[0]["event"] == "skill_loaded" and audit[0]["details"]["skill_id"] == "pdf"
    # the bridge's other requests reach the control plane for this session (OpenClaw has nothing
    # that sends them yet: asked here the way the bridge would)
    plane.methods["memory_search"] = lambda params: [{"text": f"hit for {params['query']}"}]
    plane.methods["mcp_call"] = lambda params: {"content": f"{params['server']}/{params['tool']}"}
    assert adapter.spec.on_request is not None
    assert await adapter.spec.on_request("memory_search", {"query": "q", "top_k": 2}) == [
        {"text": "hit for q"}
    ]
    assert await adapter.spec.on_request("mcp_call", {"server": "s", "tool": "t", "arguments": {}}) == {
        "content": "s/t"
    }
    with pytest.raises(LookupError):  # only skills of the session's index
        await adapter.spec.on_request("get_skill_package", {"skill_id": "other"})
    assert {frame["session_id"] for frame in plane.frames("request")} == {"oc1"}

    # a tool call arrives as tool_call_start / tool_call_complete, on the same bridge
    await plane.user_message("oc1", {"content": "run: echo hi"})
    finals = await wait_finals(plane, "oc1", 2, timeout=60)
    assert finals[1]["type"] == "execution_complete", finals
    second = events_of(plane, "oc1")[len(events) :]
    start = next(data for data in second if data["type"] == "tool_call_start")
    complete = next(data for data in second if data["type"] == "tool_call_complete")
    assert (start["tool_name"], start["call_id"]) == ("terminal", complete["call_id"])
    assert "echo hi" in start["tool_input"] and "hi" in complete["result"] and not complete["is_error"]
    assert exec_plane.session_pids()["oc1"] == pid and adapter.starts == 1
    await plane.wait_for(
        lambda: any(r["event"] == "tool_call" for r in records_of(plane, "oc1", "audit_log")), 30
    )

    await plane.stop_session("oc1")
    (snapshot,) = await plane.wait_for(lambda: snapshots_of(plane, "oc1", "stop"), 60)
    assert snapshot["runtime_type"] == "openclaw" and snapshot["turns"] == 2
    assert snapshot["session_key"] == "agent:main:oc1"
    await until(lambda: not alive(pid), 30)
    assert exec_plane.session_pids() == {}
    # init's API key is on no disk and in no log line
    for path in exec_plane.state_dir.rglob("*"):
        if path.is_file():
            assert INIT_KEY.encode() not in path.read_bytes(), path
    assert INIT_KEY not in caplog.text


@needs_bridge
@needs_node
async def test_an_openclaw_turn_is_cancelled_and_a_killed_bridge_fails_only_its_turn(
    plane: ScriptedControlPlane, make_gateway: Callable[..., LiveServer], make_plane: MakePlane
) -> None:
    gateway = make_gateway(delay=0.05)
    exec_plane = await make_plane(delay=0.03)
    await plane.start_session("oc", runtime_type="openclaw", openclaw_config=fake_openclaw_config(gateway))
    await plane.start_session("bystander")  # an engine session next to it
    long_message = "a long answer please " * 10

    await plane.user_message("oc", {"content": long_message})
    await plane.wait_for(lambda: len(events_of(plane, "oc")) >= 2, 60)
    await plane.cancel("oc")
    (cancelled,) = await wait_finals(plane, "oc", timeout=30)
    assert cancelled["type"] == "execution_complete" and cancelled["cancelled"] is True, cancelled
    assert cancelled["content"] and cancelled["content"] == text_chunks(plane, "oc")
    assert len(cancelled["content"]) < len(long_message)  # it was cut short
    first_pid = exec_plane.session_pids()["oc"]  # the bridge survives a cancel

    before = len(events_of(plane, "oc"))
    await plane.user_message("oc", {"content": long_message})
    await plane.user_message("bystander", {"content": "me too"})
    await plane.wait_for(lambda: len(events_of(plane, "oc")) >= before + 2, 60)
    os.kill(first_pid, signal.SIGKILL)
    finals = await wait_finals(plane, "oc", 2, timeout=30)
    assert finals[1]["type"] == "execution_error", finals
    assert "the OpenClaw bridge was killed by signal SIGKILL" in finals[1]["error"]
    (bystander,) = await wait_finals(plane, "bystander", timeout=60)
    assert bystander["type"] == "execution_complete" and "me too" in bystander["content"]

    # the next message starts a new bridge for the session; OpenClaw continues the conversation
    await plane.user_message("oc", {"content": "are you back?"})
    finals = await wait_finals(plane, "oc", 3, timeout=60)
    assert finals[2]["type"] == "execution_complete" and "are you back?" in finals[2]["content"], finals
    adapter = exec_plane.adapter("oc")
    assert isinstance(adapter, OpenClawBridgeAdapter) and adapter.starts == 2
    assert exec_plane.session_pids()["oc"] not in (first_pid, exec_plane.session_pids()["bystander"])
    stored = json.loads((gateway.settings.paths.sessions / "oc.json").read_text(encoding="utf-8"))
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"][-1] == "are you back?"


@needs_bridge
async def test_an_openclaw_session_without_node_24_or_openclaw_fails_naming_what_is_missing(
    plane: ScriptedControlPlane, make_plane: MakePlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exec_plane = await make_plane()
    # the configuration a user gives the daemon: Node 20 as OpenClaw's Node
    monkeypatch.setenv("CLAWLET_OPENCLAW_NODE", fake_node(tmp_path / "node20", "v20.11.1"))
    monkeypatch.setenv("CLAWLET_OPENCLAW_BIN", str(tmp_path / "no-openclaw"))
    await plane.start_session("old-node", runtime_type="openclaw", agent_config={"model": "gpt-4o-mini"})
    (error,) = await wait_finals(plane, "old-node", timeout=30)
    assert error["type"] == "execution_error", error
    assert "OpenClaw is not available on this machine" in error["error"]
    assert "is Node v20.11.1; OpenClaw needs >=24.16.0" in error["error"]
    # a Node that would do, but no openclaw CLI where the configuration says
    monkeypatch.setenv("CLAWLET_OPENCLAW_NODE", fake_node(tmp_path / "node24", "v24.21.0"))
    await plane.start_session("no-cli", runtime_type="openclaw", agent_config={"model": "gpt-4o-mini"})
    (missing,) = await wait_finals(plane, "no-cli", timeout=30)
    assert missing["type"] == "execution_error", missing
    assert "the openclaw CLI is missing" in missing["error"] and "no-openclaw" in missing["error"]
    for message in (error["error"], missing["error"]):
        assert "install Node >= 24.16 and openclaw" in message
        assert "CLAWLET_OPENCLAW_BIN=" in message and "CLAWLET_OPENCLAW_NODE=" in message
        assert "no fallback" in message
    # nothing was started or created, and later messages get the same error
    assert exec_plane.session_pids() == {}
    assert (
        not (exec_plane.sessions_dir / "old-node").exists()
        and not (exec_plane.sessions_dir / "no-cli").exists()
    )
    await plane.user_message("no-cli", {"content": "hello?"})
    finals = await wait_finals(plane, "no-cli", 2, timeout=30)
    assert finals[1] == missing
    assert exec_plane.session_pids() == {} and exec_plane.adapter("no-cli") is None


@needs_bridge
async def test_an_openclaw_session_with_no_model_anywhere_says_where_to_set_one(
    plane: ScriptedControlPlane, make_plane: MakePlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No model from the control plane and only the demo model on this machine: a clear refusal
    (before issue 15 the bridge said "agent_config.model is required"). Node and OpenClaw are fakes
    that pass the probe; nothing is started."""
    exec_plane = await make_plane()  # Settings(provider="demo")
    package = tmp_path / "openclaw"
    package.mkdir()
    (package / "openclaw.mjs").write_text("", encoding="utf-8")
    (package / "package.json").write_text(json.dumps({"version": "2026.9.6"}), encoding="utf-8")
    monkeypatch.setenv("CLAWLET_OPENCLAW_NODE", fake_node(tmp_path / "node24", "v24.21.0"))
    monkeypatch.setenv("CLAWLET_OPENCLAW_BIN", str(package))
    await plane.start_session("no-model", runtime_type="openclaw", agent_config={"system_prompt": "hi"})
    (error,) = await wait_finals(plane, "no-model", timeout=30)
    assert error["type"] == "execution_error", error
    assert "the openclaw runtime needs a model" in error["error"]
    assert (
        "set-runtime USER --model provider/model" in error["error"] and "CLAWLET_LLM_MODEL" in error["error"]
    )
    assert exec_plane.session_pids() == {} and not (exec_plane.sessions_dir / "no-model").exists()


# -- the command ----------------------------------------------------------------------------------


def test_the_command_without_its_environment_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("USER_ID", "VM_TOKEN", "VM_TICKET", "CONTROL_PLANE_WS"):
        monkeypatch.delenv(name, raising=False)
    assert cli_main(["exec-plane", "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert "missing: USER_ID, VM_TOKEN, CONTROL_PLANE_WS" in err

    monkeypatch.setenv("VM_TOKEN", "very-secret-token-value")
    monkeypatch.setenv("USER_ID", "u1")
    assert cli_main(["exec-plane", "--state-dir", str(tmp_path / "state")]) == 2
    captured = capsys.readouterr()
    assert "missing: CONTROL_PLANE_WS" in captured.err
    assert "very-secret-token-value" not in captured.err + captured.out

    monkeypatch.setenv("CONTROL_PLANE_WS", "http://127.0.0.1:1/ws/vm")
    assert cli_main(["exec-plane", "--state-dir", str(tmp_path / "state")]) == 2
    captured = capsys.readouterr()
    assert "ws:// or wss://" in captured.err
    assert "very-secret-token-value" not in captured.err + captured.out


async def test_the_daemon_serves_sessions_and_stops_them_on_sigterm(
    plane: ScriptedControlPlane, tmp_path: Path
) -> None:
    state = tmp_path / "daemon"
    token = plane.issue_token(USER)
    env = {
        **os.environ,
        "USER_ID": USER,
        "VM_TOKEN": token,
        "VM_TICKET": plane.issue_ticket(USER),
        "CONTROL_PLANE_WS": plane.url,
        "PYTHONUNBUFFERED": "1",
    }
    daemon = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "clawlet",
        "exec-plane",
        "--state-dir",
        str(state),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await plane.wait_connections(1, timeout=20)
        await plane.start_session("s1")
        await plane.user_message("s1", {"content": "hello daemon"})
        (final,) = await wait_finals(plane, "s1")
        assert final["type"] == "execution_complete" and "hello daemon" in final["content"]
        log_text = (state / "sessions" / "s1" / "process.log").read_text(encoding="utf-8")
        child_pid = int(log_text.split("ready (pid ")[1].split(")")[0])
        assert alive(child_pid)

        daemon.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(daemon.communicate(), 20)
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    assert daemon.returncode == 0, err.decode()
    await until(lambda: not alive(child_pid))
    await plane.wait_for(lambda: snapshots_of(plane, "s1", "stop"))
    output = (out + err).decode()
    assert token not in output and token not in log_text
    assert "sk-test-openai-key" not in output and "sk-test-openai-key" not in log_text
    for path in state.rglob("*"):
        if path.is_file():
            assert b"sk-test-openai-key" not in path.read_bytes(), path

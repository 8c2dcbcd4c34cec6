"""The exec plane owns the conversation (issue 15, cluster mode v2 §1): ``ExecPlane.api_app`` is the
user's local-mode app over the exec plane's home, and every turn — from the seed frames or from an
API request — runs through its ``SessionManager``, which keeps the session's only transcript; the
session process is a pure runtime fed each turn's history, pause point and decision.

Real pieces: a scripted control plane on loopback (WebSocket), session processes (forked from the
session template), the scripted OpenAI-compatible model server; ``api_app`` is driven in-process
over ASGI (its lifespan runs in ``ExecPlane.start``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import RuntimeConfig, Settings
from clawlet.controlplane.seed_events import seed_event
from clawlet.engine.compression import SUMMARY_REQUEST_MARKER
from clawlet.engine.tool_approvals import Decision, InvalidDecision
from clawlet.events import ApprovalRequested, event_from_json
from clawlet.execplane.daemon import ExecPlane
from clawlet.execplane.session_process import ProcessOptions, ProcessSessionAdapter
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.support.exec_planes import client_for
from tests.support.scripted_control_plane import ScriptedControlPlane

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

USER = "user-1"
DEADLINE = 60.0
FAST = ProcessOptions(heartbeat_interval=0.2, heartbeat_timeout=30.0, cancel_grace=5.0, stop_grace=10.0)
FINAL_TYPES = ("execution_complete", "execution_error")
SUMMARY = "SUMMARY: the user said one, two and three"

MakePlane = Callable[[], Awaitable[ExecPlane]]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def scripted_reply(body: dict[str, Any]) -> Turn:
    """A summary for a compression; ``run: <command>`` → the terminal tool; after a tool, its
    output; anything else is echoed."""
    messages = [item for item in body.get("messages") or [] if isinstance(item, dict)]
    if messages and SUMMARY_REQUEST_MARKER in text_of(messages[0]):
        return text_turn(SUMMARY)
    last = messages[-1] if messages else {}
    text = text_of(last).strip()
    if last.get("role") == "tool":
        return text_turn(f"the tool said: {text}")
    if text.startswith("run:"):
        return tool_turn(ToolCall("terminal", {"command": text.removeprefix("run:").strip()}))
    return text_turn(f"you said: {text}")


def agent_requests(llm: ScriptedOpenAIServer) -> list[list[dict[str, Any]]]:
    """The messages of every agent turn's model request (not a compression's), oldest first."""
    found = []
    for body in llm.requests:
        messages = [item for item in body.get("messages") or [] if isinstance(item, dict)]
        if messages and SUMMARY_REQUEST_MARKER not in text_of(messages[0]):
            found.append(messages)
    return found


def events_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    named = [seed_event(frame["data"]) for frame in plane.sse_events if frame["session_id"] == session_id]
    return [data for data in named if data is not None]


def kinds_of(plane: ScriptedControlPlane, session_id: str) -> list[str]:
    """The clawlet event kinds the control plane got for the session, in order."""
    return [frame["data"]["kind"] for frame in plane.sse_events if frame["session_id"] == session_id]


def finals_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    return [data for data in events_of(plane, session_id) if data["type"] in FINAL_TYPES]


async def wait_finals(plane: ScriptedControlPlane, session_id: str, count: int = 1) -> list[dict[str, Any]]:
    await plane.wait_for(lambda: len(finals_of(plane, session_id)) >= count, DEADLINE)
    return finals_of(plane, session_id)


def records_of(plane: ScriptedControlPlane, session_id: str, method: str) -> list[dict[str, Any]]:
    return [
        record["params"]
        for record in plane.fire_and_forget
        if record["session_id"] == session_id and record["method"] == method
    ]


async def until(condition: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
async def plane() -> AsyncIterator[ScriptedControlPlane]:
    async with ScriptedControlPlane() as scripted:
        yield scripted


@contextlib.asynccontextmanager
async def open_exec_plane(
    plane: ScriptedControlPlane, state: Path, settings: Settings
) -> AsyncIterator[ExecPlane]:
    """An exec plane started and connected as ``run_exec_plane`` does, shut down on leaving."""
    client = client_for(plane, USER, state)
    made = ExecPlane(client, state, settings, process_options=FAST)
    await made.start()
    await client.connect()
    made.apply_init()
    try:
        yield made
    finally:
        await made.shutdown()
        await client.close()


@pytest.fixture
async def exec_plane(
    plane: ScriptedControlPlane, llm: ScriptedOpenAIServer, tmp_path: Path
) -> AsyncIterator[ExecPlane]:
    settings = Settings(
        provider="openai", llm_base_url=llm.base_url, llm_model=llm.model, openai_api_key="test-key"
    )
    async with open_exec_plane(plane, tmp_path / "state", settings) as made:
        yield made


@pytest.fixture
async def api(exec_plane: ExecPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(exec_plane) as client:
        yield client


@contextlib.asynccontextmanager
async def api_client(exec_plane: ExecPlane) -> AsyncIterator[httpx.AsyncClient]:
    """``api_app`` in-process (no token: the control plane authenticates the user)."""
    transport = httpx.ASGITransport(app=exec_plane.api_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://exec-plane", timeout=DEADLINE
    ) as client:
        yield client


async def history(api: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    response = await api.get(f"/api/sessions/{session_id}/history")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def pairs(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(str(item["role"]), str(item["content"])) for item in messages]


async def test_a_seed_turn_is_kept_once_in_the_homes_transcript_and_the_next_turn_continues_it(
    plane: ScriptedControlPlane, exec_plane: ExecPlane, api: httpx.AsyncClient, llm: ScriptedOpenAIServer
) -> None:
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "one"})
    (final,) = await wait_finals(plane, "s1")
    assert final == {"type": "execution_complete", "content": "you said: one"}
    assert pairs((await history(api, "s1"))["messages"]) == [("user", "one"), ("assistant", "you said: one")]
    assert (exec_plane.home / "sessions" / "s1.json").is_file()  # the one transcript, in the home
    assert not (exec_plane.sessions_dir / "s1" / "transcript").exists()  # none in the session process
    assert "you said: one" in (exec_plane.sessions_dir / "s1" / "memory" / "conversation.md").read_text(
        encoding="utf-8"
    )

    await plane.user_message("s1", {"content": "two"})
    await wait_finals(plane, "s1", 2)
    second = agent_requests(llm)[-1]
    assert [(m["role"], text_of(m)) for m in second[1:]] == [
        ("user", "one"),
        ("assistant", "you said: one"),
        ("user", "two"),
    ]
    stored = (await history(api, "s1"))["messages"]
    assert pairs(stored) == [
        ("user", "one"),
        ("assistant", "you said: one"),
        ("user", "two"),
        ("assistant", "you said: two"),
    ]
    # every event exactly once, the manager's lifecycle around the runtime's
    assert kinds_of(plane, "s1").count("RunStarted") == 2 and kinds_of(plane, "s1").count("RunFinished") == 2
    # after each turn, the transcript as the history route has it, at least once
    synced = await plane.wait_for(
        lambda: [r for r in records_of(plane, "s1", "transcript_sync") if len(r["messages"]) == 4], DEADLINE
    )
    assert synced[-1]["session_id"] == "s1" and synced[-1]["workspace"] == ""
    assert synced[-1]["messages"] == stored and "title" in synced[-1]


async def test_compress_on_api_app_changes_what_the_next_seed_turn_sends_the_model(
    plane: ScriptedControlPlane, exec_plane: ExecPlane, api: httpx.AsyncClient, llm: ScriptedOpenAIServer
) -> None:
    await plane.start_session("s1")
    for count, word in enumerate(("one", "two", "three"), start=1):
        await plane.user_message("s1", {"content": word})
        await wait_finals(plane, "s1", count)
    response = await api.post("/api/sessions/s1/compress")
    assert response.status_code == 200, response.text
    assert response.json()["summary"] == SUMMARY
    await plane.user_message("s1", {"content": "four"})
    await wait_finals(plane, "s1", 4)
    sent = [text_of(m) for m in agent_requests(llm)[-1][1:]]
    assert any(SUMMARY in text for text in sent)
    assert "one" not in sent and "you said: one" not in sent  # archived: the summary stands for them
    assert sent[-1] == "four"


async def test_an_api_turns_events_reach_the_control_plane_once_each(
    plane: ScriptedControlPlane, exec_plane: ExecPlane, api: httpx.AsyncClient
) -> None:
    response = await api.post(
        "/api/chat", json={"message": "over http", "session_id": "api1", "stream": False}
    )
    assert response.status_code == 200, response.text
    assert response.json()["content"] == "you said: over http"
    await plane.wait_for(lambda: "Title" in kinds_of(plane, "api1"), DEADLINE)
    kinds = kinds_of(plane, "api1")
    assert kinds[0] == "RunStarted" and kinds.count("RunFinished") == 1 and kinds.count("RunStarted") == 1
    frames = [frame for frame in plane.sse_events if frame["session_id"] == "api1"]
    text = "".join(frame["data"]["text"] for frame in frames if frame["data"]["kind"] == "TextDelta")
    assert text == "you said: over http"  # no event twice
    assert [frame["seq"] for frame in frames] == list(range(1, len(frames) + 1))
    usage = [frame["data"] for frame in frames if frame["data"]["kind"] == "Usage"]
    assert usage  # the scripted model reports usage: it also goes out as a usage report
    # the title's model call is reported too, as a record of its own
    titles = [frame["data"] for frame in frames if frame["data"]["kind"] == "Title"]
    assert len(titles) == 1 and titles[0]["input_tokens"] > 0 and titles[0]["output_tokens"] > 0
    await plane.wait_for(lambda: len(records_of(plane, "api1", "usage_report")) == len(usage) + 1, DEADLINE)
    reports = records_of(plane, "api1", "usage_report")
    turn_reports = [report for report in reports if "purpose" not in report]
    assert [(report["tokens_in"], report["tokens_out"]) for report in turn_reports] == [
        (item["input_tokens"], item["output_tokens"]) for item in usage
    ]
    title_reports = [report for report in reports if report.get("purpose") == "title"]
    assert [(report["tokens_in"], report["tokens_out"]) for report in title_reports] == [
        (titles[0]["input_tokens"], titles[0]["output_tokens"])
    ]
    adapter = exec_plane.adapter("api1")  # the API's session runs in a session process too
    assert isinstance(adapter, ProcessSessionAdapter) and adapter.alive
    synced = await plane.wait_for(lambda: records_of(plane, "api1", "transcript_sync"), DEADLINE)
    assert pairs(synced[-1]["messages"]) == [("user", "over http"), ("assistant", "you said: over http")]
    assert await exec_plane.sync_snapshots() == 1  # its snapshot goes out like a seed session's
    (snapshot,) = await plane.wait_for(lambda: records_of(plane, "api1", "snapshot_sync"), DEADLINE)
    assert "you said: over http" in snapshot["short_term_memory"]["conversation"]


async def test_a_v1_turns_sampling_options_reach_the_model_from_the_session_process(
    exec_plane: ExecPlane, api: httpx.AsyncClient, llm: ScriptedOpenAIServer
) -> None:
    body = {
        "model": "clawlet",
        "messages": [{"role": "user", "content": "sampled"}],
        "temperature": 0,
        "max_tokens": 5,
        "stop": ["END"],
    }
    response = await api.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert isinstance(exec_plane.adapter(response.headers["x-session-id"]), ProcessSessionAdapter)
    sent = [r for r in llm.requests if any(m.get("content") == "sampled" for m in r["messages"])]
    assert sent  # through the session process's pipe, the client's options reached the model
    assert all((r["temperature"], r["max_completion_tokens"], r["stop"]) == (0, 5, ["END"]) for r in sent)


async def test_an_ask_tool_waits_is_approved_over_api_app_and_runs_once(
    plane: ScriptedControlPlane, exec_plane: ExecPlane, api: httpx.AsyncClient, llm: ScriptedOpenAIServer
) -> None:
    RuntimeConfig(exec_plane.settings.paths.config_file).set_tool_approvals({"terminal": "ask"})
    await plane.start_session("s1")
    command = "echo ran >> counted.txt && wc -l < counted.txt"
    await plane.user_message("s1", {"content": f"run: {command}", "approval_mode": "ask"})
    (waiting,) = await wait_finals(plane, "s1")
    assert waiting["type"] == "execution_complete" and waiting["waiting"] is True, waiting
    (asked,) = [data for data in events_of(plane, "s1") if data["type"] == "approval_required"]
    assert asked["tool_name"] == "terminal" and asked["args"] == {"command": command}

    listed = (await api.get("/api/sessions/s1/approvals")).json()
    assert listed["waiting"] is True and [p["approval_id"] for p in listed["pending"]] == waiting["pending"]
    approval_id = waiting["pending"][0]
    # an invalid edit gets local mode's error, and changes nothing
    bad = await api.post(f"/api/sessions/s1/approvals/{approval_id}", json={"decision": "edit", "args": {}})
    assert bad.status_code == 422, bad.text
    pending = event_from_json(
        next(f["data"] for f in plane.sse_events if f["data"]["kind"] == "ApprovalRequested")
    )
    assert isinstance(pending, ApprovalRequested)
    with pytest.raises(InvalidDecision) as local:
        exec_plane.workspaces.default.engine.check_decision(pending, Decision("edit", {}))
    assert bad.json()["error"]["message"] == str(local.value)

    approved = await api.post(
        f"/api/sessions/s1/approvals/{approval_id}", json={"decision": "approve", "stream": False}
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["content"] == "the tool said: 1"  # ran exactly once
    finals = await wait_finals(plane, "s1", 2)  # the continuation's events reach the control plane
    assert finals[1] == {"type": "execution_complete", "content": "the tool said: 1"}
    stored = (await history(api, "s1"))["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "assistant"]
    assert stored[1]["tool_calls"][0]["output"] == "1" and stored[-1]["content"] == "the tool said: 1"
    assert (await history(api, "s1"))["waiting"] is False
    tool_results = [m for body in agent_requests(llm) for m in body if m.get("role") == "tool"]
    assert [text_of(m) for m in tool_results] == ["1"]


async def test_a_named_workspaces_session_runs_there_and_goes_out_under_its_workspace(
    plane: ScriptedControlPlane, exec_plane: ExecPlane, api: httpx.AsyncClient
) -> None:
    body = {"prompt": "in the team workspace", "session-id": "w1", "workspace": "team"}
    response = await api.post("/api/agent", json=body)
    assert response.status_code == 200, response.text
    assert '"result": "you said: in the team workspace"' in response.text
    await plane.wait_for(lambda: "RunFinished" in kinds_of(plane, "team:w1"), DEADLINE)
    assert kinds_of(plane, "w1") == []  # not mixed up with a default-workspace session of that id
    synced = await plane.wait_for(lambda: records_of(plane, "team:w1", "transcript_sync"), DEADLINE)
    assert synced[-1]["workspace"] == "team" and synced[-1]["session_id"] == "w1"
    assert (exec_plane.home / "workspaces" / "team" / "sessions" / "w1.json").is_file()
    assert (exec_plane.state_dir / "workspaces" / "team" / "sessions" / "w1" / "process.log").is_file()
    assert isinstance(exec_plane.adapter("team:w1"), ProcessSessionAdapter)
    assert "team:w1" in exec_plane.session_pids()


async def test_inits_model_and_keys_serve_api_turns_and_the_titles_made_here(
    plane: ScriptedControlPlane, llm: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    """A machine whose own model is unreachable and that has no key: ``init``'s ``agent_config`` and
    API key are what its sessions (in their processes) and its titles (in this one) use."""
    plane.init_extra["agent_config"] = {
        "model": "init-model",
        "base_url": llm.base_url,
        "system_prompt": "INIT-PROMPT",
    }
    machine = Settings(provider="openai", llm_base_url="http://127.0.0.1:9/v1", llm_model="machine-model")
    async with (
        open_exec_plane(plane, tmp_path / "state", machine) as exec_plane,
        api_client(exec_plane) as api,
    ):
        response = await api.post("/api/chat", json={"message": "hello", "session_id": "c1", "stream": False})
        assert response.status_code == 200, response.text
        assert response.json()["content"] == "you said: hello"
        assert response.json()["title"].startswith("you said")  # the model's, not the fallback ("hello")
    turn, title = llm.requests
    assert turn["model"] == title["model"] == "init-model"
    assert "INIT-PROMPT" in text_of(turn["messages"][0])
    assert llm.authorizations == [f"Bearer {plane.api_keys['openai']}"] * 2

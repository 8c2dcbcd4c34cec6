"""The session template (clawlet.execplane.session_template): an exec plane's session processes are
forked from one pre-loaded process and behave exactly like spawned ones.

Real components throughout: a real exec plane (:class:`~clawlet.execplane.daemon.ExecPlane`) on a
real WebSocket to the scripted control plane, its real template and session processes, and the
scripted OpenAI-compatible server as the model (``provider=openai``), so a turn goes through
langchain-openai, the OpenAI SDK and a socket inside the forked process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clawlet.config import Settings
from clawlet.controlplane.seed_events import seed_event
from clawlet.execplane import session_template
from clawlet.execplane.client import ControlPlaneClient
from clawlet.execplane.daemon import ExecPlane
from clawlet.execplane.session_process import (
    EXIT_UNKNOWN,
    ProcessOptions,
    ProcessSessionAdapter,
    describe_exit,
)
from clawlet.execplane.session_template import SessionTemplate, TemplateChild, template_supported
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.support.exec_planes import client_for
from tests.support.scripted_control_plane import ScriptedControlPlane

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not template_supported(), reason="the session template needs Linux"),
]

USER = "user-1"
FAST = ProcessOptions(heartbeat_interval=0.2, heartbeat_timeout=30.0, cancel_grace=2.0, stop_grace=5.0)
ENV_SECRET = "sk-env-secret-0123456789"
"""An API key in the test process's environment: no session process may have it in its own."""
DEADLINE = 60.0
FINAL_TYPES = ("execution_complete", "execution_error")

MakePlane = Callable[[], Awaitable[ExecPlane]]


def scripted_reply(body: dict[str, Any]) -> Turn:
    """``run: <command>`` → the terminal tool; after a tool, its output; ``slow:`` → a long answer."""
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = str(content or "").strip()
    if last.get("role") == "tool":
        return text_turn(f"the tool said: {text}")
    if text.startswith("run:"):
        return tool_turn(ToolCall("terminal", {"command": text.removeprefix("run:").strip()}))
    if text.startswith("slow:"):
        return text_turn(" ".join(["word"] * 100), chunks=100, delay=0.1)
    return text_turn(f"you said: {text}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    return int(stat.rpartition(")")[2].split()[1])


def events_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    """The session's events that have a seed-001 name, named so (``text_chunk``, …)."""
    named = [seed_event(frame["data"]) for frame in plane.sse_events if frame["session_id"] == session_id]
    return [data for data in named if data is not None]


def finals_of(plane: ScriptedControlPlane, session_id: str) -> list[dict[str, Any]]:
    return [data for data in events_of(plane, session_id) if data["type"] in FINAL_TYPES]


async def wait_finals(plane: ScriptedControlPlane, session_id: str, count: int = 1) -> list[dict[str, Any]]:
    await plane.wait_for(lambda: len(finals_of(plane, session_id)) >= count, DEADLINE)
    return finals_of(plane, session_id)


async def until(condition: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def forked_adapter(exec_plane: ExecPlane, session_id: str) -> ProcessSessionAdapter:
    adapter = exec_plane.adapter(session_id)
    assert isinstance(adapter, ProcessSessionAdapter)
    return adapter


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
async def plane() -> AsyncIterator[ScriptedControlPlane]:
    async with ScriptedControlPlane() as scripted:
        yield scripted


@pytest.fixture
async def make_plane(
    plane: ScriptedControlPlane,
    llm: ScriptedOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[MakePlane]:
    """An exec plane on the scripted model, started with a secret in the environment it hands on."""
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    made: list[tuple[ExecPlane, ControlPlaneClient]] = []
    pids: set[int] = set()

    async def make() -> ExecPlane:
        state = tmp_path / "state"
        client = client_for(plane, USER, state)
        settings = Settings(
            provider="openai", llm_base_url=llm.base_url, llm_model=llm.model, openai_api_key="test-key"
        )
        exec_plane = ExecPlane(client, state, settings, process_options=FAST)
        await exec_plane.start()
        await client.connect()
        made.append((exec_plane, client))
        return exec_plane

    yield make
    for exec_plane, client in made:
        pids.update(exec_plane.session_pids().values())
        if exec_plane.template is not None and exec_plane.template.pid is not None:
            pids.add(exec_plane.template.pid)
        await exec_plane.shutdown()
        await client.close()
    for pid in pids:
        await until(lambda pid=pid: not alive(pid), 30)  # type: ignore[misc]


async def test_a_session_process_is_forked_from_the_preloaded_template_and_runs_a_tool_turn(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    template = exec_plane.template
    assert template is not None
    await plane.start_session("s1")
    await plane.user_message("s1", {"content": "run: echo forked"})
    (final,) = await wait_finals(plane, "s1")
    assert final["type"] == "execution_complete", final
    assert "the tool said: forked" in final["content"]
    types = [data["type"] for data in events_of(plane, "s1")]
    assert types.index("tool_call_start") < types.index("tool_call_complete") < types.index(final["type"])

    # the mechanism: the session process is a fork of the template (its parent, its command line),
    # which had imported the engine before it was asked for a session
    adapter = forked_adapter(exec_plane, "s1")
    pid = exec_plane.session_pids()["s1"]
    assert (adapter.starts, adapter.forked, template.forks) == (1, 1, 1)
    assert template.pid is not None and parent_of(pid) == template.pid
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"clawlet.execplane.session_template" in cmdline
    assert Path(f"/proc/{template.pid}/cmdline").read_bytes() == Path(f"/proc/{pid}/cmdline").read_bytes()
    log_text = (exec_plane.state_dir / "session-template.log").read_text(encoding="utf-8")
    assert "modules preloaded" in log_text

    # no secret in either process's environment (the key of the test's environment, the API key the
    # session got over its pipe)
    for process in (pid, template.pid):
        environ = Path(f"/proc/{process}/environ").read_bytes()
        assert ENV_SECRET.encode() not in environ and b"test-key" not in environ
        assert b"OPENAI_API_KEY=" not in environ
    # the session's own stderr is its process.log, as for a spawned process
    assert os.path.realpath(f"/proc/{pid}/fd/2") == str(exec_plane.sessions_dir / "s1" / "process.log")

    # a second turn runs in the same forked process
    await plane.user_message("s1", {"content": "and again"})
    finals = await wait_finals(plane, "s1", 2)
    assert finals[1]["type"] == "execution_complete" and "you said: and again" in finals[1]["content"]
    assert exec_plane.session_pids()["s1"] == pid


async def test_a_killed_forked_session_fails_only_its_own_turn(
    plane: ScriptedControlPlane, make_plane: MakePlane
) -> None:
    exec_plane = await make_plane()
    await plane.start_session("victim")
    await plane.start_session("bystander")
    await plane.user_message("victim", {"content": "slow: please"})
    await plane.user_message("bystander", {"content": "slow: me too"})
    await plane.wait_for(lambda: len(events_of(plane, "victim")) >= 2, DEADLINE)
    pids = exec_plane.session_pids()
    assert forked_adapter(exec_plane, "victim").forked == 1
    os.kill(pids["victim"], signal.SIGKILL)

    (error,) = await wait_finals(plane, "victim")
    assert error["type"] == "execution_error"
    assert "was killed by signal SIGKILL" in error["error"], error  # the template reported how it ended
    (final,) = await wait_finals(plane, "bystander")
    assert final["type"] == "execution_complete", final
    assert exec_plane.session_pids()["bystander"] == pids["bystander"]
    await until(lambda: not alive(pids["victim"]))  # reaped by the template: not left a zombie

    await plane.user_message("victim", {"content": "are you back?"})
    finals = await wait_finals(plane, "victim", 2)
    assert finals[1]["type"] == "execution_complete" and "are you back?" in finals[1]["content"]
    adapter = forked_adapter(exec_plane, "victim")
    assert (adapter.starts, adapter.forked) == (2, 2)


async def test_a_killed_template_is_replaced_and_sessions_start_meanwhile(
    plane: ScriptedControlPlane,
    make_plane: MakePlane,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="clawlet.execplane.session_template")
    monkeypatch.setattr(session_template, "RESTART_DELAYS", (2.0,))  # the gap a spawn must fill
    exec_plane = await make_plane()
    template = exec_plane.template
    assert template is not None
    await plane.start_session("before")
    await plane.user_message("before", {"content": "hello"})
    await wait_finals(plane, "before")
    old_template, before_pid = template.pid, exec_plane.session_pids()["before"]
    assert old_template is not None

    os.kill(old_template, signal.SIGKILL)
    await until(lambda: not template.ready)
    # a session started while there is no template: a plain process (and a log line saying so)
    await plane.start_session("meanwhile")
    await plane.user_message("meanwhile", {"content": "hello meanwhile"})
    (final,) = await wait_finals(plane, "meanwhile")
    assert final["type"] == "execution_complete", final
    meanwhile = forked_adapter(exec_plane, "meanwhile")
    assert (meanwhile.starts, meanwhile.forked) == (1, 0)
    assert parent_of(exec_plane.session_pids()["meanwhile"]) == os.getpid()
    assert "starting a session process the plain way" in caplog.text
    assert "restarting the session template" in caplog.text

    # the session the dead template had forked lives on and keeps working
    await plane.user_message("before", {"content": "still there?"})
    finals = await wait_finals(plane, "before", 2)
    assert finals[1]["type"] == "execution_complete" and "still there?" in finals[1]["content"]
    assert exec_plane.session_pids()["before"] == before_pid

    # a new template replaces it, and new sessions are forked from that one
    await until(lambda: template.ready and template.pid not in (None, old_template))
    assert template.starts == 2
    await plane.start_session("after")
    await plane.user_message("after", {"content": "run: echo after"})
    (final,) = await wait_finals(plane, "after")
    assert final["type"] == "execution_complete" and "the tool said: after" in final["content"], final
    assert forked_adapter(exec_plane, "after").forked == 1
    assert parent_of(exec_plane.session_pids()["after"]) == template.pid

    # the orphan's end is still noticed (through its pidfd; its status is unknown by then)
    orphan = forked_adapter(exec_plane, "before")
    os.kill(before_pid, signal.SIGKILL)
    await until(lambda: not orphan.alive)
    assert orphan.last_exit == describe_exit(EXIT_UNKNOWN)
    await plane.user_message("before", {"content": "once more"})  # a new process, forked
    finals = await wait_finals(plane, "before", 3)
    assert finals[2]["type"] == "execution_complete", finals[2]
    assert (orphan.starts, orphan.forked) == (2, 2)


async def test_a_template_that_cannot_start_leaves_sessions_to_plain_processes(tmp_path: Path) -> None:
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'no template here' >&2\nexit 3\n", encoding="utf-8")
    broken.chmod(0o755)
    template = SessionTemplate(str(broken), tmp_path / "home", tmp_path / "template.log", start_timeout=30)
    template.start()
    try:
        assert await template.spawn(tmp_path, 2) is None  # waited for the first start, then gave up
        assert not template.ready and template.forks == 0
        assert "no template here" in (tmp_path / "template.log").read_text(encoding="utf-8")
    finally:
        await template.close()


async def test_a_forked_child_reports_its_exit_status(tmp_path: Path) -> None:
    """Below the adapter: a child forked on request, its pipes, its exit code from the template."""
    import sys

    template = SessionTemplate(sys.executable, tmp_path, tmp_path / "template.log", start_timeout=60)
    template.start()
    try:
        assert await template.wait_ready(60)
        with open(tmp_path / "child.log", "ab") as stderr:
            child = await template.spawn(tmp_path, stderr.fileno())
        assert isinstance(child, TemplateChild) and child.stdin is not None and child.stdout is not None
        child.stdin.write(b"this is not an init line\n")  # the session process refuses it: exit 2
        assert await asyncio.wait_for(child.wait(), DEADLINE) == 2
        assert child.returncode == 2 and await child.stdout.read() == b""
        child_log = (tmp_path / "child.log").read_text(encoding="utf-8")
        assert "the first line on the pipe was not init" in child_log
    finally:
        await template.close()

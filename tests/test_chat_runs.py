"""Chat turns as runs: cancel, client disconnects, concurrency, multi-turn history (the prompt each
turn is rebuilt from disk: tests/test_engine_turns.py)."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from tests.conftest import LiveServer, host_processes_with, parent_pid, parse_sse
from tests.support.transcripts import calls_shown


def chat(server: LiveServer, session_id: str, message: str) -> list[tuple[str, dict[str, Any]]]:
    response = httpx.post(
        f"{server.url}/api/chat", json={"message": message, "session_id": session_id}, timeout=60
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def stored(server: LiveServer, session_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (server.settings.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8")
    )
    return data


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (it is gone, or a zombie waiting to be reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def wait_until(predicate: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_cancel_a_running_turn(live_server: Callable[..., LiveServer], settings: Settings) -> None:
    server = live_server(settings.model_copy(update={"python_timeout": 900.0}))  # outlasts the code's sleep
    marker = f"1000.{secrets.randbelow(10**9)}"  # found from the host, sandboxed or not
    code = f"import subprocess, time; subprocess.Popen(['sleep', '{marker}']); time.sleep(600)"
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{server.url}/api/chat", json={"message": f"python: {code}", "session_id": "c1"}
        ) as stream,
    ):
        lines = stream.iter_lines()
        assert any(line.startswith("event: tool_start") for line in lines)
        assert wait_until(lambda: host_processes_with(marker))
        child = parent_pid(host_processes_with(marker)[0])  # the python process
        assert child is not None and not process_gone(child)
        started = time.monotonic()
        response = client.post(f"{server.url}/api/sessions/c1/cancel")
        assert response.json() == {"session_id": "c1", "cancelled": True}
        events = parse_sse("\n".join(lines) + "\n\n")
        elapsed = time.monotonic() - started
    assert elapsed < 300  # the turn sleeps 600 s: the cancel did not wait for it
    assert events[-1][0] == "done"
    assert events[-1][1]["cancelled"] is True
    assert "Running that Python code." in str(events[-1][1]["content"])
    assert not any(name == "title" for name, _ in events)
    assert wait_until(lambda: process_gone(child), timeout=5), "the python subprocess survived the cancel"
    assert wait_until(lambda: not host_processes_with(marker)), "its child survived the cancel"

    messages = stored(server, "c1")["messages"]
    assert messages[0] == {"role": "user", "content": f"python: {code}"}
    assert messages[1]["role"] == "assistant"
    assert messages[1]["content"] == "Running that Python code."
    assert calls_shown(messages[1]["tool_calls"]) == [{"tool": "python_repl", "input": code, "output": ""}]
    assert len(messages) == 2
    history = httpx.get(f"{server.url}/api/sessions/c1/history").json()
    assert history["running"] is False
    # The session takes new turns after a cancel, and the cancelled turn is in its history.
    assert chat(server, "c1", "run: echo after")[-1][0] in ("done", "title")
    agent_view = httpx.get(f"{server.url}/api/sessions/c1/messages").json()["messages"]
    assert [m["role"] for m in agent_view] == ["system", "user", "assistant", "user", "assistant"]


@pytest.mark.slow
def test_client_disconnect_does_not_lose_the_reply(server: LiveServer) -> None:
    message = "python: import time; time.sleep(1); print('finished-late')"
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{server.url}/api/chat", json={"message": message, "session_id": "d1"}
        ) as stream,
    ):
        for line in stream.iter_lines():
            if line.startswith("event: token"):
                break
        # Leaving the block closes the connection mid-stream.
    assert httpx.get(f"{server.url}/api/sessions/d1/history").json()["running"] is True

    def finished() -> bool:
        history = httpx.get(f"{server.url}/api/sessions/d1/history").json()
        return history["running"] is False and len(history["messages"]) == 3

    assert wait_until(finished)
    data = stored(server, "d1")
    messages = data["messages"]
    assert messages[0] == {"role": "user", "content": message}
    assert messages[1]["tool_calls"][0]["tool"] == "python_repl"
    assert messages[1]["tool_calls"][0]["output"] == "finished-late"
    assert "finished-late" in messages[2]["content"]
    assert wait_until(lambda: stored(server, "d1")["title"] != "")


def test_turns_on_two_sessions_run_concurrently(server: LiveServer) -> None:
    """The slow turn waits for a file the test writes only once the fast turn has finished: had
    the fast turn waited for the slow one, it would never finish (no timing is measured)."""
    results: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    release = server.settings.paths.workspace / "release-slow"

    def turn(session_id: str, message: str) -> None:
        results[session_id] = chat(server, session_id, message)

    waits = f"any(os.path.exists({str(release)!r}) or time.sleep(0.05) for _ in range(2400))"
    slow = threading.Thread(
        target=turn, args=("slow", f"python: import os, time; {waits}; print('slow-done')")
    )
    fast = threading.Thread(target=turn, args=("fast", "run: echo fast-done"))
    slow.start()
    assert wait_until(lambda: httpx.get(f"{server.url}/api/sessions/slow/history").json().get("running"))
    fast.start()
    fast.join(120)
    assert set(results) == {"fast"}, "the fast session waited for the slow one"
    release.write_text("go", encoding="utf-8")
    slow.join(120)
    assert set(results) == {"slow", "fast"}
    slow_events, fast_events = results["slow"], results["fast"]
    for events, marker in ((slow_events, "slow-done"), (fast_events, "fast-done")):
        done = next(data for name, data in events if name == "done")
        assert marker in str(done["content"])
    assert stored(server, "slow")["messages"][1]["tool_calls"][0]["output"] == "slow-done"
    assert stored(server, "fast")["messages"][1]["tool_calls"][0]["output"] == "fast-done"


def test_multi_turn_history_continuity(server: LiveServer) -> None:
    chat(server, "mt", "my name is Ada")
    chat(server, "mt", "run: echo second")
    messages = httpx.get(f"{server.url}/api/sessions/mt/messages").json()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "my name is Ada"
    assert "my name is Ada" in messages[2]["content"]
    assert messages[3]["content"] == "run: echo second"
    # The two assistant segments of the tool turn are merged into one message for the model.
    assert "Running `echo second`" in messages[4]["content"] and "second" in messages[4]["content"]
    assert "\n\n" in messages[4]["content"]
    assert len(stored(server, "mt")["messages"]) == 5  # user, assistant, user, 2 segments
    assert os.path.getsize(server.settings.paths.sessions / "mt.json") > 0


def test_cancel_right_after_start_closes_the_run(settings: Any) -> None:
    """Regression: cancelling a turn before its task took a first step left the run open forever
    (no RunCancelled, the session stuck busy)."""
    import asyncio

    from clawlet.events import RunCancelled
    from clawlet.services import build_services

    async def scenario() -> list[object]:
        services = build_services(settings)
        run = await services.sessions.start_turn("early-cancel", "hello", title=False)
        assert await services.sessions.cancel("early-cancel") is True
        events = [event async for event in run.events()]
        assert not services.sessions.is_running("early-cancel")
        second = await services.sessions.start_turn("early-cancel", "again", title=False)
        await second.wait()
        return events

    events = asyncio.run(asyncio.wait_for(scenario(), timeout=20))
    assert isinstance(events[-1], RunCancelled)

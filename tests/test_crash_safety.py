"""Crash safety: a real ``clawlet serve`` process killed while it writes sessions never corrupts one,
and a turn it was killed in is marked as interrupted when it starts again.

Every wait is on a condition with a generous deadline (the suite must pass on a loaded machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.sessions.store import INTERRUPTED_NOTE
from tests.conftest import ServeProcess, parse_sse

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

V2_KEYS = {"title", "created_at", "updated_at", "compressed_context", "messages"}
DEADLINE = 120.0
"""Seconds any wait here may take: far beyond what it needs on an idle machine."""


def wait_until(condition: Callable[[], bool], describe: Callable[[], str], timeout: float = DEADLINE) -> None:
    """Return once ``condition()`` holds; fail with ``describe()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, describe()
        time.sleep(0.05)


def check_sessions(home: Path) -> dict[str, dict[str, Any]]:
    """Every session file parses as a complete v2 object; returns them by id."""
    found = {}
    for path in sorted((home / "sessions").glob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert text.endswith("}\n"), f"{path.name} is truncated"
        data = json.loads(text)
        assert isinstance(data, dict) and set(data) == V2_KEYS, path.name
        assert isinstance(data["messages"], list)
        for message in data["messages"]:
            assert message["role"] in ("user", "assistant")
            assert isinstance(message["content"], str)
            for call in message.get("tool_calls", []):
                assert set(call) == {"tool", "input", "output", "call_id", "is_error"}
        found[path.stem] = data
    return found


def round_has_messages(home: Path, prefix: str, at_least: int) -> bool:
    """Whether the sessions whose id starts with ``prefix`` hold ``at_least`` messages."""
    total = 0
    for path in (home / "sessions").glob(f"{prefix}*.json"):
        try:
            total += len(json.loads(path.read_text(encoding="utf-8"))["messages"])
        except (OSError, ValueError, KeyError):
            continue
    return total >= at_least


def hammer(url: str, session_ids: list[str], stop: threading.Event) -> None:
    messages = [
        "run: echo crash-test",
        "python: print('x' * 50)",
        "你好，写点东西吧",
        "read workspace/SOUL.md",
    ]
    with httpx.Client(timeout=DEADLINE) as client:
        turn = 0
        while not stop.is_set():
            for session_id in session_ids:
                try:
                    client.post(
                        f"{url}/api/chat",
                        json={"message": messages[turn % len(messages)], "session_id": session_id},
                    )
                except httpx.TransportError:
                    return
                turn += 1


def test_sigkill_during_concurrent_writes_never_corrupts_a_session(
    serve: list[ServeProcess], clawlet_home: Path
) -> None:
    total_seen = 0
    for round_number in range(2):
        proc = ServeProcess(clawlet_home)
        serve.append(proc)
        # The sessions that survived the previous crash are all listed after the restart.
        listed = httpx.get(f"{proc.url}/api/sessions", timeout=DEADLINE).json()
        assert len(listed) == len(check_sessions(clawlet_home))
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=hammer,
                args=(proc.url, [f"r{round_number}t{i}s{j}" for j in range(3)] + ["shared"], stop),
                daemon=True,
            )
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        # killed while writes go on: once this round's turns have written a few dozen messages
        wait_until(partial(round_has_messages, clawlet_home, f"r{round_number}", 24), proc.output)
        os.kill(proc.process.pid, signal.SIGKILL)
        proc.process.wait(DEADLINE)
        stop.set()
        for thread in threads:
            thread.join(DEADLINE)
        sessions = check_sessions(clawlet_home)
        assert len(sessions) >= 8 * (round_number + 1)
        assert sum(len(data["messages"]) for data in sessions.values()) > total_seen
        total_seen = sum(len(data["messages"]) for data in sessions.values())
        # Every turn's user message is saved before its reply, so no session starts with a reply.
        for data in sessions.values():
            messages = data["messages"]
            assert isinstance(messages, list)
            if messages:
                assert messages[0]["role"] == "user"


SLOW_TURN = "python: import time; time.sleep(600)"
"""A turn far longer than any deadline here: a stop that waited for it would fail the test."""


def start_slow_turn(proc: ServeProcess, session_id: str) -> tuple[threading.Thread, list[str]]:
    """POST ``SLOW_TURN`` and read its stream in a thread; returns once its tool has started."""
    chunks: list[str] = []

    def stream() -> None:
        try:
            with httpx.stream(
                "POST",
                f"{proc.url}/api/chat",
                json={"message": SLOW_TURN, "session_id": session_id},
                timeout=DEADLINE,
            ) as response:
                for text in response.iter_text():
                    chunks.append(text)
        except httpx.TransportError:
            pass

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    wait_until(lambda: any("tool_start" in chunk for chunk in chunks), proc.output)
    return reader, chunks


def test_sigterm_stops_gracefully_and_saves_the_partial_turn(
    serve: list[ServeProcess], clawlet_home: Path
) -> None:
    proc = ServeProcess(clawlet_home)
    serve.append(proc)
    reader, chunks = start_slow_turn(proc, "term")
    proc.process.send_signal(signal.SIGTERM)
    try:
        code = proc.process.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"SIGTERM waited for the running turn (it sleeps 600 s):\n{proc.output()}")
    # uvicorn re-raises the signal after its graceful shutdown, so the exit status reflects SIGTERM.
    assert code in (0, -signal.SIGTERM), proc.output()
    assert "Application shutdown complete" in proc.output()
    reader.join(DEADLINE)
    messages = check_sessions(clawlet_home)["term"]["messages"]
    assert isinstance(messages, list)
    assert messages[0] == {"role": "user", "content": SLOW_TURN}
    assert messages[1]["content"] == "Running that Python code."
    assert messages[1]["tool_calls"][0]["tool"] == "python_repl"
    events = parse_sse("".join(chunks))
    if events and events[-1][0] == "done":
        assert events[-1][1].get("cancelled") is True


def test_a_turn_cut_by_sigkill_is_marked_interrupted_after_the_restart(
    serve: list[ServeProcess], clawlet_home: Path
) -> None:
    proc = ServeProcess(clawlet_home)
    serve.append(proc)
    answered = httpx.post(
        f"{proc.url}/api/chat", json={"message": "hello", "session_id": "fine"}, timeout=DEADLINE
    )
    assert answered.status_code == 200, answered.text
    reader, _ = start_slow_turn(proc, "cut")
    os.kill(proc.process.pid, signal.SIGKILL)
    proc.process.wait(DEADLINE)
    reader.join(DEADLINE)
    assert check_sessions(clawlet_home)["cut"]["messages"] == [{"role": "user", "content": SLOW_TURN}]

    again = ServeProcess(clawlet_home)
    serve.append(again)
    history = httpx.get(f"{again.url}/api/sessions/cut/history", timeout=DEADLINE).json()
    assert history["running"] is False
    assert history["messages"] == [
        {"role": "user", "content": SLOW_TURN},
        {"role": "assistant", "content": INTERRUPTED_NOTE, "interrupted": True},
    ]
    # an answered session gets no marker
    fine = httpx.get(f"{again.url}/api/sessions/fine/history", timeout=DEADLINE).json()
    assert not any(message.get("interrupted") for message in fine["messages"])
    # the model sees a short note in the interrupted turn's place, and the session goes on
    model_view = httpx.get(f"{again.url}/api/sessions/cut/messages", timeout=DEADLINE).json()["messages"]
    assert [(m["role"], m["content"]) for m in model_view[1:]] == [
        ("user", SLOW_TURN),
        ("assistant", INTERRUPTED_NOTE),
    ]
    reply = httpx.post(
        f"{again.url}/api/chat", json={"message": "hello again", "session_id": "cut"}, timeout=DEADLINE
    )
    assert reply.status_code == 200, reply.text
    messages = httpx.get(f"{again.url}/api/sessions/cut/history", timeout=DEADLINE).json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "interrupted" not in messages[3]

    # marked once: a further restart adds nothing
    again.close()
    third = ServeProcess(clawlet_home)
    serve.append(third)
    assert httpx.get(f"{third.url}/api/sessions/cut/history", timeout=DEADLINE).json()["messages"] == messages

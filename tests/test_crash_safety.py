"""Crash safety: a real ``clawlet serve`` process killed while it writes sessions never corrupts one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, parse_sse

V2_KEYS = {"title", "created_at", "updated_at", "compressed_context", "messages"}


class ServeProcess:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.log = home.parent / f"serve-{self.port}.log"
        env = {**os.environ, "CLAWLET_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.handle = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clawlet", "serve", "--port", str(self.port)],
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/api/status", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"clawlet serve did not start:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.handle.close()


@pytest.fixture
def serve(clawlet_home: Path) -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for proc in started:
        proc.close()


def check_sessions(home: Path) -> dict[str, dict[str, object]]:
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
                assert set(call) == {"tool", "input", "output"}
        found[path.stem] = data
    return found


def hammer(url: str, session_ids: list[str], stop: threading.Event) -> None:
    messages = [
        "run: echo crash-test",
        "python: print('x' * 50)",
        "你好，写点东西吧",
        "read workspace/SOUL.md",
    ]
    with httpx.Client(timeout=10) as client:
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
        listed = httpx.get(f"{proc.url}/api/sessions", timeout=5).json()
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
        deadline = time.monotonic() + 10
        while len(list((clawlet_home / "sessions").glob(f"r{round_number}*.json"))) < 8:
            assert time.monotonic() < deadline, proc.output()
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(proc.process.pid, signal.SIGKILL)
        proc.process.wait(10)
        stop.set()
        for thread in threads:
            thread.join(15)
        sessions = check_sessions(clawlet_home)
        assert len(sessions) >= 8 * (round_number + 1)
        assert sum(len(data["messages"]) for data in sessions.values()) > total_seen  # type: ignore[arg-type]
        total_seen = sum(len(data["messages"]) for data in sessions.values())  # type: ignore[arg-type]
        # Every turn's user message is saved before its reply, so no session starts with a reply.
        for data in sessions.values():
            messages = data["messages"]
            assert isinstance(messages, list)
            if messages:
                assert messages[0]["role"] == "user"


def test_sigterm_stops_gracefully_and_saves_the_partial_turn(
    serve: list[ServeProcess], clawlet_home: Path
) -> None:
    proc = ServeProcess(clawlet_home)
    serve.append(proc)
    chunks: list[str] = []

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{proc.url}/api/chat",
            json={"message": "python: import time; time.sleep(30)", "session_id": "term"},
            timeout=60,
        ) as response:
            try:
                for text in response.iter_text():
                    chunks.append(text)
            except httpx.TransportError:
                pass

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while not any("tool_start" in chunk for chunk in chunks):
        assert time.monotonic() < deadline, proc.output()
        time.sleep(0.05)
    started = time.monotonic()
    proc.process.send_signal(signal.SIGTERM)
    code = proc.process.wait(15)
    assert time.monotonic() - started < 8, "SIGTERM waited for the running turn"
    # uvicorn re-raises the signal after its graceful shutdown, so the exit status reflects SIGTERM.
    assert code in (0, -signal.SIGTERM), proc.output()
    assert "Application shutdown complete" in proc.output()
    reader.join(5)
    messages = check_sessions(clawlet_home)["term"]["messages"]
    assert isinstance(messages, list)
    assert messages[0] == {"role": "user", "content": "python: import time; time.sleep(30)"}
    assert messages[1]["content"] == "Running that Python code."
    assert messages[1]["tool_calls"][0]["tool"] == "python_repl"
    events = parse_sse("".join(chunks))
    if events and events[-1][0] == "done":
        assert events[-1][1].get("cancelled") is True

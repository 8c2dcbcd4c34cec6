"""Engine workers (``CLAWLET_ENGINE_WORKERS``): turns run in worker processes, the server keeps
the sessions, and every guarantee holds as in one process.

The behaviour tests of approvals, questions and cancelling are run again here on a server with two
engine workers (the imported ``test_*`` functions use this module's ``server`` / ``scripted``
fixtures); turns go round the workers, so a paused turn is continued by the other worker. The rest
checks what is particular to workers: they are other processes, one that dies fails only its turn
and is started again, and closing the server stops them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from clawlet.config import Settings
from clawlet.runtime.engine_pool import PooledEngineAdapter
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests.conftest import LiveServer, free_port, parse_sse
from tests.test_approvals import (
    chat,
    names,
    one,
    set_policies,
    test_approve_runs_the_tool_exactly_once,
    test_cancel_drops_what_a_session_waits_for,
    test_parallel_calls_each_wait_and_each_runs_once,
    test_the_agent_asks_a_question_and_the_answer_resumes_it,
)
from tests.test_chat_runs import process_gone, test_cancel_a_running_turn, wait_until

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

__all__ = [  # run here again, on engine workers
    "test_approve_runs_the_tool_exactly_once",
    "test_cancel_a_running_turn",
    "test_cancel_drops_what_a_session_waits_for",
    "test_parallel_calls_each_wait_and_each_runs_once",
    "test_the_agent_asks_a_question_and_the_answer_resumes_it",
]

WORKERS = 2


@pytest.fixture
def server(live_server: Callable[..., LiveServer], settings: Settings) -> LiveServer:
    return live_server(settings.model_copy(update={"engine_workers": WORKERS}))


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as upstream:
        yield upstream


@pytest.fixture
def scripted(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(
        Settings(
            provider="openai",
            llm_base_url=llm.base_url,
            llm_model="m",
            llm_api_key="k",
            engine_workers=WORKERS,
        )
    )


def worker_pids(server: LiveServer) -> list[int]:
    pool = server.app.state.engine_pool
    return [process.pid for process in pool.workers()]


def test_turns_run_in_worker_processes(server: LiveServer) -> None:
    events = chat(server, "w1", "你好")
    assert names(events)[-2:] == ["done", "title"]
    assert one(events, "done")["content"].startswith("[demo]")
    adapter = server.app.state.services.sessions.adapters["w1"]
    assert isinstance(adapter, PooledEngineAdapter) and adapter.turns == 1
    assert wait_until(lambda: len(worker_pids(server)) == WORKERS)
    pids = worker_pids(server)
    assert os.getpid() not in pids and all(not process_gone(pid) for pid in pids)
    # the OpenAI-compatible edge runs on them too
    body = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"].startswith("[demo]")


def test_a_worker_that_dies_fails_only_its_turn(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(settings.model_copy(update={"engine_workers": 1}), demo_token_delay=0.2)
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", f"{server.url}/api/chat", json={"message": "hello", "session_id": "k1"}
        ) as stream,
    ):
        lines = stream.iter_lines()
        assert any(line.startswith("event: token") for line in lines)
        (pid,) = worker_pids(server)
        os.kill(pid, signal.SIGKILL)
        events = parse_sse("\n".join(lines) + "\n\n")
    error = one(events, "error")
    assert "engine worker exited" in str(error["error"]) and str(-signal.SIGKILL) in str(error["error"])
    assert wait_until(lambda: process_gone(pid))
    # the next turn starts a new worker; the session's history kept the failed turn's message
    assert names(chat(server, "k1", "again"))[-1] == "done"
    assert worker_pids(server) != [pid]
    history = httpx.get(f"{server.url}/api/sessions/k1/history", timeout=30).json()["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == ["hello", "again"]


def test_stopping_the_server_stops_its_workers(
    live_server: Callable[..., LiveServer], settings: Settings, tmp_path: Path
) -> None:
    server = live_server(settings.model_copy(update={"engine_workers": WORKERS}))
    assert names(chat(server, "s1", "hello"))[-1] in ("done", "title")
    assert wait_until(lambda: len(worker_pids(server)) == WORKERS)
    pids = worker_pids(server)
    server.stop()
    assert wait_until(lambda: all(process_gone(pid) for pid in pids)), "an engine worker outlived the server"


def test_a_named_workspace_keeps_the_main_homes_policies(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})  # the main home's; the workspace "team" sets none
    body = {"prompt": "run: echo n > workspace/n.txt", "workspace": "team"}
    response = httpx.post(f"{server.url}/api/agent", json=body, timeout=60)
    assert response.status_code == 200, response.text
    lines = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1]["subtype"] == "success" and "not available" in lines[-1]["result"]
    team = server.settings.workspaces_root / "team"
    assert not (team / "workspace" / "n.txt").exists()


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_clawlet_serve_runs_its_turns_on_engine_workers(clawlet_home: Path) -> None:
    """The real command: it says how many workers it has, they are its child processes, they
    answer its turns, and they end with it."""
    port = free_port()
    env = {**os.environ, "CLAWLET_HOME": str(clawlet_home), "CLAWLET_ENGINE_WORKERS": "2"}
    server = subprocess.Popen(
        [sys.executable, "-m", "clawlet", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    workers: list[int] = []
    try:
        assert server.stdout is not None
        assert "· 2 engine workers" in server.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: ready(url), timeout=120), "clawlet serve did not get ready"
        assert wait_until(lambda: len(children_of(server.pid)) == 2, timeout=120)
        workers = children_of(server.pid)
        for pid in workers:
            assert "clawlet.runtime.engine_worker" in Path(f"/proc/{pid}/cmdline").read_text()
        response = httpx.post(f"{url}/api/chat", json={"message": "hello", "session_id": "cli"}, timeout=120)
        assert one(parse_sse(response.text), "done")["content"].startswith("[demo]")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)
    assert wait_until(lambda: all(process_gone(pid) for pid in workers)), "a worker outlived clawlet serve"


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False

"""Approvals in cluster mode (issue 15's acceptance): a tool set to ``ask`` pauses on the user's
execution plane (its checkpointer keeps the paused turn), is approved from the workbench API and
from the inbox through the control plane, and runs exactly once; a control plane killed and
restarted while a turn waits changes nothing.

A real cluster (control plane and execution plane as OS processes on loopback, the offline demo
model: ``run: <command>`` calls ``terminal``), driven only through the control plane's HTTP API.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.cluster.local_cluster import LocalCluster
from tests.conftest import free_port, lines_of, parse_sse

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

TIMEOUT = 90.0
APPEND = "run: echo once >> workspace/{name} && wc -l < workspace/{name}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    started = LocalCluster(tmp_path / "cluster", ["alice"], free_port())
    try:
        started.start()
        yield started
    finally:
        started.stop()


def client(cluster: LocalCluster) -> httpx.Client:
    headers = {"Authorization": f"Bearer {cluster.tokens['alice']}"}
    return httpx.Client(base_url=cluster.base_url, headers=headers, timeout=TIMEOUT)


def workspace_file(cluster: LocalCluster, name: str) -> Path:
    """A file in the workspace on alice's machine (where the tool runs)."""
    return cluster.data_dir / "exec-planes" / "alice" / "home" / "workspace" / name


def sse(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def ask_for_terminal(api: httpx.Client) -> None:
    response = api.put("/api/config/tool-approvals", json={"policies": {"terminal": "ask"}})
    assert response.status_code == 200, response.text


def waiting_turn(api: httpx.Client, session_id: str, message: str) -> dict[str, Any]:
    events = sse(api.post("/api/chat", json={"message": message, "session_id": session_id}))
    assert [name for name, _ in events][-2:] == ["approval_required", "waiting"], events
    return next(data for name, data in events if name == "approval_required")


def test_a_tool_set_to_ask_is_approved_from_the_workbench_and_runs_once(cluster: LocalCluster) -> None:
    with client(cluster) as api:
        ask_for_terminal(api)
        request = waiting_turn(api, "w1", APPEND.format(name="side.txt"))
        assert request["tool"] == "terminal"
        assert not workspace_file(cluster, "side.txt").exists(), "the tool ran before it was approved"
        listed = api.get("/api/sessions/w1/approvals").json()
        assert listed["waiting"] is True and [item["approval_id"] for item in listed["pending"]] == [
            request["approval_id"]
        ]
        continued = sse(
            api.post(f"/api/sessions/w1/approvals/{request['approval_id']}", json={"decision": "approve"})
        )
        names = [name for name, _ in continued]
        assert names[0] == "tool_end" and names[-2:] == ["done", "title"], names
        assert next(data for name, data in continued if name == "tool_end")["output"] == "1"
        assert lines_of(workspace_file(cluster, "side.txt")) == ["once"]
        again = api.post(f"/api/sessions/w1/approvals/{request['approval_id']}", json={"decision": "approve"})
        assert again.status_code == 409
        assert lines_of(workspace_file(cluster, "side.txt")) == ["once"]


def test_an_inbox_task_waits_and_is_approved_once(cluster: LocalCluster) -> None:
    with client(cluster) as api:
        ask_for_terminal(api)
        created = api.post("/api/v1/tasks", json={"content": APPEND.format(name="task.txt")})
        assert created.status_code in (200, 201), created.text
        task_id = created.json()["id"]
        task = wait_status(api, task_id, "waiting")
        [item] = task["waitingFor"]
        assert not workspace_file(cluster, "task.txt").exists()
        decided = api.post(
            f"/api/v1/tasks/{task_id}/approvals/{item['approvalId']}", json={"decision": "approve"}
        )
        assert decided.status_code < 300, decided.text
        wait_status(api, task_id, "completed")
        assert lines_of(workspace_file(cluster, "task.txt")) == ["once"]


def test_a_waiting_turn_survives_a_restart_of_the_control_plane(cluster: LocalCluster) -> None:
    with client(cluster) as api:
        ask_for_terminal(api)
        request = waiting_turn(api, "r1", APPEND.format(name="restart.txt"))
    cluster.kill("control-plane")
    cluster.start_control_plane()
    cluster.wait_connected(1)
    with client(cluster) as api:
        listed = api.get("/api/sessions/r1/approvals").json()
        assert [item["approval_id"] for item in listed["pending"]] == [request["approval_id"]]
        assert not workspace_file(cluster, "restart.txt").exists()
        continued = sse(
            api.post(f"/api/sessions/r1/approvals/{request['approval_id']}", json={"decision": "approve"})
        )
        assert next(data for name, data in continued if name == "tool_end")["output"] == "1"
        assert lines_of(workspace_file(cluster, "restart.txt")) == ["once"]
        history = api.get("/api/sessions/r1/history").json()
        assert [m["role"] for m in history["messages"]] == ["user", "assistant", "assistant"]


def wait_status(api: httpx.Client, task_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        task: dict[str, Any] = api.get(f"/api/v1/tasks/{task_id}").json()
        if task.get("status") == status:
            return task
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} never became {status}")

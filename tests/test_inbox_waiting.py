"""Inbox tasks that wait for the user (issue 9): tool approvals (allow / ask / deny) and the agent's
questions move a task to ``waiting`` with the question as the agent's message and ``waitingFor`` on
the Task; approve / reject / answer (or a plain message) resume the same run (``waiting →
running``), never a second one; side effects happen exactly once; a restarted server keeps the task
waiting and resumes it.

Everything runs against a real server (the app on uvicorn, local backend, the offline demo model:
``run: <command>`` calls ``terminal``, ``ask: <question>`` calls ``ask_user``) and real files.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from clawlet.inbox.backends import task_session_name
from tests.conftest import LiveServer, assert_error, lines_of
from tests.inbox_support import SseClient, wait_until
from tests.support.transcripts import calls_shown

TIMEOUT = 60.0  # s: generous, the machine may be busy; nothing here asserts a duration
APPEND = "run: echo once >> workspace/side.txt && wc -l < workspace/side.txt"
COMMAND = APPEND[len("run: ") :]


# -- helpers -----------------------------------------------------------------------------------


def api(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1", timeout=30)


def set_policies(server: LiveServer, policies: dict[str, str], workspace: str | None = None) -> None:
    params = {"workspace": workspace} if workspace else {}
    response = httpx.put(
        f"{server.url}/api/config/tool-approvals", params=params, json={"policies": policies}, timeout=30
    )
    assert response.status_code == 200, response.text


def create(client: httpx.Client, content: str, agent_id: str | None = None) -> str:
    body: dict[str, Any] = {"content": content}
    if agent_id:
        body["agentId"] = agent_id
    response = client.post("/tasks", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_status(client: httpx.Client, task_id: str, *statuses: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
        return task if task["status"] in statuses else None

    return wait_until(done, TIMEOUT)  # type: ignore[no-any-return]


def messages(client: httpx.Client, task_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.get(f"/tasks/{task_id}/messages").json()
    return found


def decide(client: httpx.Client, task_id: str, approval_id: str, **body: Any) -> httpx.Response:
    return client.post(f"/tasks/{task_id}/approvals/{approval_id}", json=body)


def transcript(sessions: Path, task_id: str) -> list[dict[str, Any]]:
    data = json.loads((sessions / f"{task_session_name(task_id)}.json").read_text(encoding="utf-8"))
    stored: list[dict[str, Any]] = data["messages"]
    return stored


def waiting_task(client: httpx.Client, content: str, agent_id: str | None = None) -> dict[str, Any]:
    """Create a task and wait until it waits for the user."""
    return wait_status(client, create(client, content, agent_id), "waiting")


def statuses_of(events: SseClient) -> list[str]:
    return [data["status"] for data in events.of("task.updated")]


# -- questions ---------------------------------------------------------------------------------


def test_a_question_waits_and_the_answer_resumes_the_same_run(server: LiveServer, settings: Settings) -> None:
    with api(server) as client, SseClient(server.url + "/api/v1/events") as events:
        task_id = create(client, "ask: which colour do you like?")
        waiting = wait_status(client, task_id, "waiting")
        [item] = waiting["waitingFor"]
        assert item == {
            "kind": "question",
            "approvalId": item["approvalId"],
            "question": "which colour do you like?",
            "callId": item["callId"],
            "allowedDecisions": ["answer", "reject"],
        }
        assert item["callId"]  # the pending item's one shape, camelCased (tool_approvals.pending_to_json)
        assert "completedAt" not in waiting
        asked = messages(client, task_id)
        assert [m["senderType"] for m in asked] == ["user", "agent"]
        assert asked[1]["content"] == "I need to ask you first.\n\n❓ which colour do you like?"

        # the SSE stream announces it like any status change, the Task carrying waitingFor
        events.wait_for(lambda evs: any(n == "task.updated" and d["status"] == "waiting" for n, d in evs))
        assert events.names() == [
            "task.created",
            "message.created",
            "task.updated",
            "message.created",
            "task.updated",
        ]
        assert events.of("task.updated")[-1] == waiting
        assert events.of("message.created")[-1] == asked[1]

        # the "Needs reply" filter and the list show it, with what it waits for
        listed = client.get("/tasks", params={"status": "waiting"}).json()
        assert [t["id"] for t in listed] == [task_id]
        assert listed[0]["waitingFor"] == [item]
        assert listed[0]["lastMessage"]["content"].startswith("I need to ask you first.")

        answered = decide(client, task_id, item["approvalId"], decision="answer", message="green")
        assert answered.status_code == 200 and answered.json() == {"ok": True}
        done = wait_status(client, task_id, "completed")
        assert "waitingFor" not in done
        events.wait_for(
            lambda evs: [d["status"] for n, d in evs if n == "task.updated"][-1:] == ["completed"]
        )
        assert statuses_of(events) == ["running", "waiting", "running", "completed"]
        final = messages(client, task_id)
        assert [(m["senderType"], m["content"]) for m in final[2:]] == [
            ("user", "green"),
            ("agent", "[demo] You answered: green"),
        ]
    # one turn, continued: the answer is the tool's result, not a second user message
    stored = transcript(settings.paths.sessions, task_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "assistant"]
    assert calls_shown(stored[1]["tool_calls"]) == [
        {"tool": "ask_user", "input": "which colour do you like?", "output": "green"}
    ]


def test_a_plain_message_answers_the_question(server: LiveServer, settings: Settings) -> None:
    with api(server) as client:
        task_id = waiting_task(client, "问：你喜欢什么颜色？")["id"]
        sent = client.post(f"/tasks/{task_id}/messages", json={"content": "蓝色"})
        assert sent.status_code == 200 and sent.json() == {"ok": True}
        wait_status(client, task_id, "completed")
        assert messages(client, task_id)[-1]["content"] == "[demo] You answered: 蓝色"
    stored = transcript(settings.paths.sessions, task_id)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["问：你喜欢什么颜色？"]


# -- tool approvals ----------------------------------------------------------------------------


def test_approve_runs_the_tool_exactly_once(server: LiveServer, settings: Settings) -> None:
    set_policies(server, {"terminal": "ask"})
    side = settings.paths.workspace / "side.txt"
    with api(server) as client:
        waiting = waiting_task(client, APPEND)
        task_id = waiting["id"]
        [item] = waiting["waitingFor"]
        assert item["kind"] == "tool" and item["tool"] == "terminal"
        assert item["args"] == {"command": COMMAND} and item["input"] == COMMAND
        assert item["allowedDecisions"] == ["approve", "edit", "reject"]
        assert item["callId"] and item["description"]
        question = messages(client, task_id)[-1]
        assert question["senderType"] == "agent"
        assert question["content"].startswith(f"Running `{COMMAND}` in the terminal.\n\n")
        assert "May I run `terminal`" in question["content"] and f"```\n{COMMAND}\n```" in question["content"]
        assert not side.exists(), "the tool ran before it was approved"

        assert decide(client, task_id, item["approvalId"], decision="approve").json() == {"ok": True}
        wait_status(client, task_id, "completed")
        assert lines_of(side) == ["once"]
        final = messages(client, task_id)
        assert [(m["senderType"], m["content"]) for m in final[2:]] == [
            ("user", "✅ Approved"),
            ("agent", "[demo] `terminal` returned:\n\n```\n1\n```"),
        ]

        again = decide(client, task_id, item["approvalId"], decision="approve")
        error = assert_error(again, 409, "approval_decided")
        assert error["details"] == {
            "taskId": task_id,
            "approvalId": item["approvalId"],
            "decision": "approve",
        }
        assert len(messages(client, task_id)) == 4  # the refused decision saved nothing
        # the task goes on as usual
        client.post(f"/tasks/{task_id}/messages", json={"content": "thanks"})
        wait_status(client, task_id, "completed")
        assert "thanks" in messages(client, task_id)[-1]["content"]
    assert lines_of(side) == ["once"]


def test_reject_with_a_reason_tells_the_agent_and_nothing_runs(
    server: LiveServer, settings: Settings
) -> None:
    set_policies(server, {"terminal": "ask"})
    with api(server) as client:
        waiting = waiting_task(client, "run: echo nope > workspace/rejected.txt")
        task_id, approval = waiting["id"], waiting["waitingFor"][0]["approvalId"]
        decided = decide(client, task_id, approval, decision="reject", message="  not on my machine ")
        assert decided.status_code == 200
        wait_status(client, task_id, "completed")
        final = messages(client, task_id)
        assert final[2] == {**final[2], "senderType": "user", "content": "🚫 Rejected: not on my machine"}
        assert "not on my machine" in final[3]["content"] and "reported an error" in final[3]["content"]
    assert not (settings.paths.workspace / "rejected.txt").exists()


def test_edit_runs_the_tool_with_the_edited_arguments(server: LiveServer, settings: Settings) -> None:
    set_policies(server, {"terminal": "ask"})
    workspace = settings.paths.workspace
    with api(server) as client:
        waiting = waiting_task(client, "run: echo original > workspace/edited.txt")
        task_id, approval = waiting["id"], waiting["waitingFor"][0]["approvalId"]
        edited = "echo changed > workspace/edited.txt"
        decided = decide(client, task_id, approval, decision="edit", args={"command": edited})
        assert decided.status_code == 200 and decided.json() == {"ok": True}
        wait_status(client, task_id, "completed")
        final = messages(client, task_id)
        assert final[2]["senderType"] == "user"
        assert final[2]["content"] == f"✏️ Approved with edited input\n\n```\n{edited}\n```"
        assert final[3]["content"].startswith("[demo] `terminal` returned:")
        again = decide(client, task_id, approval, decision="approve")
        assert assert_error(again, 409, "approval_decided")["details"]["decision"] == "edit"
    assert (workspace / "edited.txt").read_text(encoding="utf-8") == "changed\n"
    stored = transcript(settings.paths.sessions, task_id)
    assert stored[1]["tool_calls"][0]["input"] == edited


@pytest.mark.slow
def test_a_plain_message_to_a_tool_approval_rejects_it_and_never_starts_a_second_run(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(demo_token_delay=0.05)  # the continuation takes a while: time for a 2nd message
    set_policies(server, {"terminal": "ask"})
    with api(server) as client:
        task_id = waiting_task(client, "run: echo yes > workspace/typed.txt")["id"]
        sent = client.post(f"/tasks/{task_id}/messages", json={"content": "yes please"})
        assert sent.status_code == 200
        # the reply continues the paused run; more messages wait for it (no second run)
        busy = client.post(f"/tasks/{task_id}/messages", json={"content": "and again"})
        assert_error(busy, 409, "task_busy")
        wait_status(client, task_id, "completed")
        final = messages(client, task_id)
        assert [m["content"] for m in final if m["senderType"] == "user"] == [
            "run: echo yes > workspace/typed.txt",
            "yes please",  # saved as typed
        ]
        assert "yes please" in final[-1]["content"] and "reported an error" in final[-1]["content"]
    # free text is not consent: the command never ran
    assert not (settings.paths.workspace / "typed.txt").exists()
    stored = transcript(settings.paths.sessions, task_id)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["run: echo yes > workspace/typed.txt"]
    assert "yes please" in stored[1]["tool_calls"][0]["output"]


@pytest.mark.parametrize("policy", ["allow", "ask", "deny"])
def test_the_policy_decides_at_the_inbox_surface(server: LiveServer, settings: Settings, policy: str) -> None:
    set_policies(server, {"terminal": policy})
    side = settings.paths.workspace / "side.txt"
    with api(server) as client:
        task_id = create(client, APPEND)
        task = wait_status(client, task_id, "completed", "waiting")
        reply = messages(client, task_id)[-1]["content"]
    if policy == "allow":
        assert task["status"] == "completed" and "waitingFor" not in task
        assert reply.endswith("[demo] `terminal` returned:\n\n```\n1\n```")  # it ran at once
        assert lines_of(side) == ["once"]
    elif policy == "deny":
        assert task["status"] == "completed" and "waitingFor" not in task
        assert reply == "[demo] The `terminal` tool is not available in this run."
        assert not side.exists()
    else:
        assert task["status"] == "waiting" and task["waitingFor"][0]["tool"] == "terminal"
        assert not side.exists()


@pytest.mark.slow
def test_an_agents_own_workspace_policy_applies_to_its_tasks(server: LiveServer, settings: Settings) -> None:
    with api(server) as client:
        assert client.post("/agents", json={"id": "ops", "name": "Ops"}).status_code == 201
        set_policies(server, {"terminal": "ask"}, workspace="ops")
        main_task = create(client, "run: echo main")
        assert wait_status(client, main_task, "completed", "waiting")["status"] == "completed"
        ops = waiting_task(client, "run: echo ops > workspace/ops.txt", agent_id="ops")
        assert not (settings.workspaces_root / "ops" / "workspace" / "ops.txt").exists()
        decide(client, ops["id"], ops["waitingFor"][0]["approvalId"], decision="approve")
        wait_status(client, ops["id"], "completed")
    assert lines_of(settings.workspaces_root / "ops" / "workspace" / "ops.txt") == ["ops"]


def test_decisions_are_checked_before_anything_is_saved(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    with api(server) as client:
        tool = waiting_task(client, "run: echo x")
        question = waiting_task(client, "ask: why?")
        tool_id, tool_approval = tool["id"], tool["waitingFor"][0]["approvalId"]
        question_id, question_approval = question["id"], question["waitingFor"][0]["approvalId"]

        assert_error(decide(client, tool_id, "no-such-id", decision="approve"), 404, "approval_not_found")
        assert_error(
            decide(client, "01NOSUCHTASK0000000000000", tool_approval, decision="approve"),
            404,
            "task_not_found",
        )
        assert_error(
            decide(client, tool_id, question_approval, decision="approve"), 404, "approval_not_found"
        )
        assert_error(
            decide(client, tool_id, tool_approval, decision="answer", message="x"), 422, "invalid_decision"
        )
        assert_error(decide(client, tool_id, tool_approval, decision="edit"), 422, "invalid_request")
        assert_error(
            decide(client, tool_id, tool_approval, decision="approve", args={}), 422, "invalid_request"
        )
        assert_error(decide(client, tool_id, tool_approval), 422, "invalid_request")
        assert_error(
            decide(client, question_id, question_approval, decision="approve"), 422, "invalid_decision"
        )
        assert_error(
            decide(client, question_id, question_approval, decision="answer", message="  "),
            422,
            "invalid_request",  # the workbench's rules (api.decision_request), the same errors
        )
        bad_args = decide(client, tool_id, tool_approval, decision="edit", args={"cmd": "x"})
        assert "command" in assert_error(bad_args, 422, "invalid_decision")["message"]
        assert_error(
            decide(client, question_id, question_approval, decision="edit", args={"question": "x"}),
            422,
            "invalid_decision",
        )
        for task_id, approval in ((tool_id, tool_approval), (question_id, question_approval)):
            task = client.get(f"/tasks/{task_id}").json()
            assert task["status"] == "waiting" and task["waitingFor"][0]["approvalId"] == approval
            assert len(messages(client, task_id)) == 2

        # a question may be declined
        assert decide(client, question_id, question_approval, decision="reject").status_code == 200
        wait_status(client, question_id, "completed")
        assert messages(client, question_id)[2]["content"] == "🚫 Rejected"


def test_cancel_or_delete_drops_what_a_task_waits_for(server: LiveServer, settings: Settings) -> None:
    set_policies(server, {"terminal": "ask"})
    sessions = server.app.state.services.sessions
    with api(server) as client:
        cancelled = waiting_task(client, "run: echo never > workspace/cancelled.txt")
        approval = cancelled["waitingFor"][0]["approvalId"]
        response = client.post(f"/tasks/{cancelled['id']}/cancel")
        assert response.status_code == 200 and response.json()["status"] == "cancelled"
        assert "waitingFor" not in response.json()
        assert not sessions.is_waiting(task_session_name(cancelled["id"]))
        error = assert_error(
            decide(client, cancelled["id"], approval, decision="approve"), 409, "approval_decided"
        )
        assert error["details"]["decision"] == "cancelled"
        assert_error(
            client.post(f"/tasks/{cancelled['id']}/messages", json={"content": "ok"}),
            409,
            "invalid_transition",
        )

        deleted = waiting_task(client, "run: echo never > workspace/deleted.txt")
        assert sessions.is_waiting(task_session_name(deleted["id"]))
        assert client.delete(f"/tasks/{deleted['id']}").status_code == 204
        assert not sessions.is_waiting(task_session_name(deleted["id"]))
    assert not (settings.paths.workspace / "cancelled.txt").exists()
    assert not (settings.paths.workspace / "deleted.txt").exists()


# -- restarts ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_restart_keeps_waiting_tasks_waiting_and_resumable(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    first = live_server()
    set_policies(first, {"terminal": "ask"})
    side = settings.paths.workspace / "side.txt"
    with api(first) as client:
        tool = waiting_task(client, APPEND)
        question = waiting_task(client, "ask: still there?")
    first.stop()
    assert not side.exists()

    second = live_server()  # a new app on the same home: new services, executor, database engine
    with api(second) as client:
        for before in (tool, question):
            after = client.get(f"/tasks/{before['id']}").json()
            assert after["status"] == "waiting" and after["waitingFor"] == before["waitingFor"]
            assert len(messages(client, before["id"])) == 2  # no "stopped while running" note
        assert {t["id"] for t in client.get("/tasks", params={"status": "waiting"}).json()} == {
            tool["id"],
            question["id"],
        }
        decide(client, tool["id"], tool["waitingFor"][0]["approvalId"], decision="approve")
        client.post(f"/tasks/{question['id']}/messages", json={"content": "yes"})
        wait_status(client, tool["id"], "completed")
        wait_status(client, question["id"], "completed")
        assert messages(client, tool["id"])[-1]["content"] == "[demo] `terminal` returned:\n\n```\n1\n```"
        assert messages(client, question["id"])[-1]["content"] == "[demo] You answered: yes"
    assert lines_of(side) == ["once"]  # exactly once across the pause and the restart


def test_a_run_stopped_between_its_pause_and_the_status_change_waits_after_a_restart(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    first = live_server()
    with api(first) as client:
        task = waiting_task(client, "ask: which way?")
    first.stop()
    # as if the server had stopped after the run paused but before the task said so
    database = sqlite3.connect(settings.paths.root / "data" / "agent_channel_v2.db")
    with database:
        database.execute("UPDATE tasks SET status = 'running' WHERE id = ?", (task["id"],))
        database.execute("DELETE FROM messages WHERE task_id = ? AND sender_type = 'agent'", (task["id"],))
    database.close()

    second = live_server()
    with api(second) as client:
        recovered = wait_status(client, task["id"], "waiting")
        assert recovered["waitingFor"] == task["waitingFor"]
        assert messages(client, task["id"])[-1]["content"] == "❓ which way?"
        decide(client, task["id"], task["waitingFor"][0]["approvalId"], decision="answer", message="left")
        wait_status(client, task["id"], "completed")
        assert messages(client, task["id"])[-1]["content"] == "[demo] You answered: left"


def test_session_refusals_are_the_one_mapping_in_the_inbox_format() -> None:
    from clawlet.engine.tool_approvals import InvalidDecision
    from clawlet.events import ApprovalRequested
    from clawlet.inbox.backends import refused
    from clawlet.inbox.models import Task
    from clawlet.runtime.base import RuntimeFailure
    from clawlet.runtime.manager import ApprovalDecided, ApprovalNotFound, SessionBusy, SessionWaiting
    from clawlet.runtime.session_errors import session_error

    task = Task("01TASK", "main", "t", False, "running", 1, 1)
    session = task_session_name(task.id)
    pending = [ApprovalRequested("ap1", "terminal", {"command": "ls"}, "c1", "ls")]
    refusals: list[Exception] = [
        SessionBusy(session),
        SessionWaiting(session, list(pending)),
        ApprovalDecided("ap1", "approve"),
        ApprovalNotFound("ap9"),
        InvalidDecision("no"),
        RuntimeFailure("gone"),
    ]
    for exc in refusals:
        outcome = refused(exc, task, "ap1")
        assert outcome.state == "error" and outcome.text == ""
        assert outcome.error is not None and outcome.error.startswith(
            session_error(exc, session, "ap1").message.split(";")[0]
        )
    waiting = refused(SessionWaiting(session, list(pending)), task).error or ""
    assert f"/api/v1/tasks/{task.id}/approvals/" in waiting and "/api/sessions/" not in waiting

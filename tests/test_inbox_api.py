"""The inbox REST API and its SSE streams, against a real server on loopback (local backend,
offline demo model): every endpoint, the response shapes of the seed's section 13, ordering,
refused transitions over HTTP, and events seen by a real SSE client."""

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
from clawlet.inbox.db import create_db_engine
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task
from clawlet.inbox.repository import InboxRepository
from tests.conftest import LiveServer
from tests.inbox_support import SseClient, wait_until

TASK_KEYS = {"id", "agentId", "title", "titleLocked", "status", "createdAt", "updatedAt"}
MESSAGE_KEYS = {"id", "taskId", "senderType", "content", "timestamp"}


def api(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1", timeout=15)


def task_status(client: httpx.Client, task_id: str) -> str:
    return str(client.get(f"/tasks/{task_id}").json()["status"])


def wait_status(client: httpx.Client, task_id: str, *statuses: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = client.get(f"/tasks/{task_id}").json()
        return task if task["status"] in statuses else None

    return wait_until(done)  # type: ignore[no-any-return]


def repository(settings: Settings) -> InboxRepository:
    return InboxRepository(create_db_engine(settings.inbox_database_url))


def seed_task(settings: Settings, status: str, *, agent: str = "main", at: int = 1000) -> Task:
    """Put a task in any status straight into the database (the API can't reach every one)."""
    task = Task(new_ulid(), agent, f"seeded {status}", False, status, at, at)  # type: ignore[arg-type]
    repository(settings).create_task(task, Message(new_ulid(), task.id, "user", "seeded", at))
    return task


def test_create_task_runs_it_and_answers_the_seeds_shapes(server: LiveServer, settings: Settings) -> None:
    with api(server) as client, SseClient(server.url + "/api/v1/events") as events:
        response = client.post("/tasks", json={"content": "帮我查快递，单号是 SF1234567890123，谢谢"})
        assert response.status_code == 201
        task = response.json()
        assert set(task) == TASK_KEYS  # no completedAt yet
        assert task["status"] == "pending" and task["agentId"] == "main"
        assert task["title"] == "帮我查快递，单号是 SF12345678" and task["titleLocked"] is False
        assert len(task["id"]) == 26

        done = wait_status(client, task["id"], "completed")
        assert set(done) == TASK_KEYS | {"completedAt"}
        messages = client.get(f"/tasks/{task['id']}/messages").json()
        assert [m["senderType"] for m in messages] == ["user", "agent"]
        assert all(set(m) == MESSAGE_KEYS for m in messages)
        assert messages[0]["content"] == "帮我查快递，单号是 SF1234567890123，谢谢"
        assert "帮我查快递" in messages[1]["content"]  # the demo model echoes it

        events.wait_for(lambda evs: any(n == "task.updated" and d["status"] == "completed" for n, d in evs))
        assert events.names() == [
            "task.created",
            "message.created",
            "task.updated",
            "message.created",
            "task.updated",
        ]
        assert events.of("task.created") == [task]
        assert events.of("message.created") == messages  # full Message objects
        assert [t["status"] for t in events.of("task.updated")] == ["running", "completed"]
        assert events.of("task.updated")[-1] == done  # the full Task, as GET returns it
        assert events.retry == 3000

    # each task is its own conversation in the agent's transcripts
    transcript = settings.paths.sessions / f"{task_session_name(task['id'])}.json"
    stored = json.loads(transcript.read_text(encoding="utf-8"))
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]


def test_task_input_is_validated_with_clear_errors(server: LiveServer) -> None:
    with api(server) as client:
        for body in ({}, {"content": ""}, {"content": "   "}, {"content": "x" * 100_001}, {"content": 5}):
            response = client.post("/tasks", json=body)
            assert response.status_code == 422, body
            assert response.json()["error"]["code"] == "invalid_request"
        bad_json = client.post("/tasks", content=b"{nope", headers={"content-type": "application/json"})
        assert bad_json.status_code == 422
        unknown = client.post("/tasks", json={"content": "hi", "agentId": "ghost"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "agent_not_found"
        assert client.get("/tasks").json() == []  # nothing was created
        missing = client.get("/tasks/01NOSUCHTASK0000000000000")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "task_not_found"
        for path in ("/messages", "/cancel", "/events"):
            method = "POST" if path == "/cancel" else "GET"
            assert client.request(method, f"/tasks/nope{path}").status_code == 404
        assert client.delete("/tasks/nope").status_code == 404
        assert client.patch("/tasks/nope", json={"title": "x"}).status_code == 404
        assert client.post("/tasks/nope/messages", json={"content": "x"}).status_code == 404
        assert client.get("/tasks?limit=0").status_code == 422
        assert client.get("/tasks?status=done").json()["error"]["code"] == "invalid_request"


def test_list_is_a_plain_array_sorted_and_filtered(server: LiveServer, settings: Settings) -> None:
    seeded = [
        seed_task(settings, status, agent=agent, at=1000 + index)
        for index, (status, agent) in enumerate(
            [
                ("completed", "main"),
                ("running", "main"),
                ("cancelled", "main"),
                ("waiting", "travel"),
                ("failed", "travel"),
                ("pending", "main"),
                ("running", "travel"),
            ]
        )
    ]
    with api(server) as client:
        listed = client.get("/tasks").json()
        assert isinstance(listed, list)
        assert [t["status"] for t in listed] == [
            "running",
            "running",
            "waiting",
            "pending",
            "completed",
            "failed",
            "cancelled",
        ]
        assert listed[0]["id"] == seeded[6].id  # the more recently updated running task first
        assert {t["id"] for t in client.get("/tasks?agentId=travel").json()} == {
            seeded[3].id,
            seeded[4].id,
            seeded[6].id,
        }
        assert [t["status"] for t in client.get("/tasks?status=running,waiting").json()] == [
            "running",
            "running",
            "waiting",
        ]
        assert [t["id"] for t in client.get("/tasks?agentId=main&status=running").json()] == [seeded[1].id]
        assert len(client.get("/tasks?limit=2").json()) == 2


def test_rename_locks_the_title(server: LiveServer, settings: Settings) -> None:
    task = seed_task(settings, "completed")
    with api(server) as client, SseClient(f"{server.url}/api/v1/tasks/{task.id}/events") as events:
        renamed = client.patch(f"/tasks/{task.id}", json={"title": "  新的  标题 "})
        assert renamed.status_code == 200
        assert renamed.json()["title"] == "新的 标题" and renamed.json()["titleLocked"] is True
        assert renamed.json()["status"] == "completed"
        assert client.patch(f"/tasks/{task.id}", json={"title": "   "}).status_code == 422
        assert client.patch(f"/tasks/{task.id}", json={"title": "x" * 201}).status_code == 422
        assert client.patch(f"/tasks/{task.id}", json={}).json() == renamed.json()
        events.wait_for(lambda evs: evs)
        assert events.of("task.updated") == [renamed.json()]


@pytest.mark.parametrize("status", ["completed", "failed", "waiting"])
def test_a_follow_up_resumes_the_same_conversation(
    server: LiveServer, settings: Settings, status: str
) -> None:
    with api(server) as client:
        if status == "completed":
            task_id = client.post("/tasks", json={"content": "first question"}).json()["id"]
            wait_status(client, task_id, "completed")
        else:
            task_id = seed_task(settings, status).id
        with SseClient(f"{server.url}/api/v1/tasks/{task_id}/events") as events:
            sent = client.post(f"/tasks/{task_id}/messages", json={"content": "second question"})
            assert sent.status_code == 200 and sent.json() == {"ok": True}
            wait_status(client, task_id, "completed")
            events.wait_for(
                lambda evs: [d["status"] for n, d in evs if n == "task.updated"][-1:] == ["completed"]
            )
        assert events.names() == ["message.created", "task.updated", "message.created", "task.updated"]
        messages = client.get(f"/tasks/{task_id}/messages").json()
        assert messages[-2]["content"] == "second question" and messages[-1]["senderType"] == "agent"
    transcript = json.loads((settings.paths.sessions / f"{task_session_name(task_id)}.json").read_text())
    users = [m["content"] for m in transcript["messages"] if m["role"] == "user"]
    assert users[-1] == "second question"
    if status == "completed":
        assert users == ["first question", "second question"]


@pytest.mark.parametrize("status", ["pending", "running", "cancelled"])
def test_a_follow_up_is_refused_and_nothing_saved(
    server: LiveServer, settings: Settings, status: str
) -> None:
    task = seed_task(settings, status)
    with api(server) as client:
        response = client.post(f"/tasks/{task.id}/messages", json={"content": "more"})
        assert response.status_code == 409
        assert response.json()["error"]["code"] == (
            "invalid_transition" if status == "cancelled" else "task_busy"
        )
        assert [m["content"] for m in client.get(f"/tasks/{task.id}/messages").json()] == ["seeded"]
        assert task_status(client, task.id) == status


@pytest.mark.parametrize("status", ["pending", "waiting"])
def test_cancel_from_pending_or_waiting(server: LiveServer, settings: Settings, status: str) -> None:
    task = seed_task(settings, status)
    with api(server) as client:
        response = client.post(f"/tasks/{task.id}/cancel")
        assert response.status_code == 200
        assert response.json()["status"] == "cancelled" and "completedAt" in response.json()


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_cancel_is_refused_where_the_table_says_so(
    server: LiveServer, settings: Settings, status: str
) -> None:
    task = seed_task(settings, status)
    before = (
        sqlite3.connect(settings.paths.root / "data" / "agent_channel_v2.db")
        .execute("SELECT * FROM tasks WHERE id = ?", (task.id,))
        .fetchone()
    )
    with api(server) as client:
        response = client.post(f"/tasks/{task.id}/cancel")
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "invalid_transition"
        assert error["details"] == {"taskId": task.id, "from": status, "to": "cancelled"}
        assert status in error["message"]
    after = (
        sqlite3.connect(settings.paths.root / "data" / "agent_channel_v2.db")
        .execute("SELECT * FROM tasks WHERE id = ?", (task.id,))
        .fetchone()
    )
    assert after == before


def test_cancel_a_running_task_aborts_its_run(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(demo_token_delay=0.05)
    with api(server) as client, SseClient(server.url + "/api/v1/events") as events:
        task_id = client.post("/tasks", json={"content": "tell me a long story " * 5}).json()["id"]
        events.wait_for(lambda evs: any(n == "message.delta" for n, _ in evs))
        assert task_status(client, task_id) == "running"
        cancelled = client.post(f"/tasks/{task_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        # the run stops: the partial reply is kept as the agent's message, the status stays cancelled
        events.wait_for(lambda evs: [n for n, _ in evs if n == "message.created"][1:])
        assert task_status(client, task_id) == "cancelled"
        partial = client.get(f"/tasks/{task_id}/messages").json()[-1]
        assert partial["senderType"] == "agent" and partial["content"]
        delta = events.of("message.delta")[0]
        assert delta["taskId"] == task_id and partial["content"].startswith(delta["content"][:10])
        assert not server.app.state.inbox.executor.is_running(task_id)
        assert client.post(f"/tasks/{task_id}/cancel").status_code == 409  # cancelled is final


def test_delete_removes_task_and_messages_and_stops_its_run(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(demo_token_delay=0.05)
    with api(server) as client:
        task_id = client.post("/tasks", json={"content": "a long one " * 10}).json()["id"]
        wait_until(lambda: server.app.state.inbox.executor.is_running(task_id))
        response = client.delete(f"/tasks/{task_id}")
        assert response.status_code == 204 and response.content == b""
        assert client.get(f"/tasks/{task_id}").status_code == 404
        assert client.get(f"/tasks/{task_id}/messages").status_code == 404
        wait_until(lambda: not server.app.state.inbox.executor.is_running(task_id))
    db = sqlite3.connect(settings.paths.root / "data" / "agent_channel_v2.db")
    assert db.execute("SELECT COUNT(*) FROM messages WHERE task_id = ?", (task_id,)).fetchone() == (0,)


def test_tasks_never_share_context(server: LiveServer, settings: Settings) -> None:
    with api(server) as client:
        first = client.post("/tasks", json={"content": "secret: 42"}).json()["id"]
        second = client.post("/tasks", json={"content": "what is the secret?"}).json()["id"]
        wait_status(client, first, "completed")
        wait_status(client, second, "completed")
    for task_id, text in ((first, "secret: 42"), (second, "what is the secret?")):
        stored = json.loads((settings.paths.sessions / f"{task_session_name(task_id)}.json").read_text())
        assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [text]


def test_per_task_stream_only_carries_that_task(server: LiveServer, settings: Settings) -> None:
    other = seed_task(settings, "completed")
    mine = seed_task(settings, "completed")
    with api(server) as client, SseClient(f"{server.url}/api/v1/tasks/{mine.id}/events") as events:
        client.post(f"/tasks/{other.id}/messages", json={"content": "not mine"})
        client.post(f"/tasks/{mine.id}/messages", json={"content": "mine"})
        wait_status(client, other.id, "completed")
        wait_status(client, mine.id, "completed")
        events.wait_for(lambda evs: [d for n, d in evs if n == "task.updated" and d["status"] == "completed"])
        ids = {d.get("taskId", d.get("id")) for _, d in events.events}
        assert ids == {mine.id}


def test_heartbeat_and_disconnected_clients_are_cleaned_up(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(settings.model_copy(update={"inbox_heartbeat_seconds": 0.2}))
    broadcaster = server.app.state.inbox.broadcaster
    with SseClient(server.url + "/api/v1/events") as events:
        beat = events.wait_for(lambda evs: [d for n, d in evs if n == "heartbeat"])[0]
        assert set(beat) == {"timestamp"} and isinstance(beat["timestamp"], int)
        assert broadcaster.client_count == 1
    wait_until(lambda: broadcaster.client_count == 0)


def test_agents_models_and_inbox_health(server: LiveServer, settings: Settings) -> None:
    config = settings.openclaw_config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {
                        "model": {"primary": "openai-codex/gpt-5.3-codex"},
                        "models": {
                            "openai-codex/gpt-5.3-codex": {"alias": "Codex"},
                            "deepseek/deepseek-chat": {},
                        },
                    },
                    "list": [
                        {"id": "main", "name": "通用助手", "subagents": {"allowAgents": ["travel"]}},
                        {"id": "travel", "name": "旅行助手", "model": "deepseek/deepseek-chat"},
                        {"id": "hidden", "name": "not allowed"},
                    ],
                }
            },
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    seed_task(settings, "completed", agent="travel")
    with api(server) as client:
        agents = client.get("/agents").json()
        assert [(a["id"], a["name"], a.get("model"), a["isDefault"], a["taskCount"]) for a in agents] == [
            ("main", "通用助手", "openai-codex/gpt-5.3-codex", True, 0),
            ("travel", "旅行助手", "deepseek/deepseek-chat", False, 1),
        ]
        assert all({"createdAt", "updatedAt"} <= set(a) for a in agents)
        assert client.get("/agents/travel").json()["name"] == "旅行助手"
        assert client.get("/agents/hidden").status_code == 404
        assert client.get("/openclaw/models").json() == [
            {"id": "openai-codex/gpt-5.3-codex", "name": "Codex", "provider": "openai-codex"},
            {"id": "deepseek/deepseek-chat", "name": "deepseek-chat", "provider": "deepseek"},
        ]
        created = client.post(
            "/agents", json={"id": "writer", "name": "写作助手", "model": "deepseek/deepseek-chat"}
        )
        assert created.status_code == 201
        assert created.json()["id"] == "writer" and created.json()["model"] == "deepseek/deepseek-chat"
        assert [a["id"] for a in client.get("/agents").json()] == ["main", "travel", "writer"]
        assert client.post("/agents", json={"id": "writer", "name": "again"}).status_code == 409
        assert client.post("/agents", json={"id": "main", "name": "again"}).status_code == 409
        for bad in ("Writer", "-x", "a_b", "a b", "", "x" * 65):
            response = client.post("/agents", json={"id": bad, "name": "n"})
            assert response.status_code == 422, bad
        unknown_model = client.post("/agents", json={"id": "m2", "name": "n", "model": "nope/x"})
        assert (
            unknown_model.status_code == 422 and "unknown model" in unknown_model.json()["error"]["message"]
        )
        for method in ("PATCH", "PUT", "DELETE"):
            assert client.request(method, "/agents/writer").status_code == 405
        # a task for the new agent runs in its own clawlet workspace
        task_id = client.post("/tasks", json={"content": "hello writer", "agentId": "writer"}).json()["id"]
        wait_status(client, task_id, "completed")
        health = client.get("/health").json()
        assert health["status"] == "ok" and isinstance(health["timestamp"], int)
        assert health["backend"] == "local"
    assert (settings.workspaces_root / "writer" / "sessions" / f"{task_session_name(task_id)}.json").is_file()
    written = json.loads(config.read_text(encoding="utf-8"))
    assert [a["id"] for a in written["agents"]["list"]] == ["main", "travel", "hidden", "writer"]
    assert written["agents"]["list"][0]["subagents"]["allowAgents"] == ["travel", "writer"]
    assert written["tools"]["agentToAgent"]["allow"] == ["writer"]
    assert written["agents"]["defaults"]["models"]["openai-codex/gpt-5.3-codex"] == {"alias": "Codex"}
    for directory in ("workspace-writer", "agents/writer/agent", "agents/writer/sessions"):
        assert (config.parent / directory).is_dir()


def test_restart_fails_running_tasks_and_starts_pending_ones(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    repository(settings)  # nothing yet: the first server creates the schema
    first = live_server()
    first.stop()
    interrupted = seed_task(settings, "running")
    waiting_to_start = seed_task(settings, "pending")
    server = live_server()
    with api(server) as client:
        failed = wait_status(client, interrupted.id, "failed")
        assert "completedAt" in failed
        note = client.get(f"/tasks/{interrupted.id}/messages").json()[-1]
        assert note["senderType"] == "agent" and "stopped while this task was running" in note["content"]
        wait_status(client, waiting_to_start.id, "completed")
        assert [m["senderType"] for m in client.get(f"/tasks/{waiting_to_start.id}/messages").json()] == [
            "user",
            "agent",
        ]


def test_openclaw_json5_is_read_but_never_rewritten(server: LiveServer, settings: Settings) -> None:
    config: Path = settings.openclaw_config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    original = (
        "{\n  // my agents\n"
        '  agents: { entries: { main: { subagents: { allowAgents: ["a1",] } }, a1: {name: "A1"} } },\n}\n'
    )
    config.write_text(original, encoding="utf-8")
    with api(server) as client:
        assert [a["id"] for a in client.get("/agents").json()] == ["main", "a1"]
        refused = client.post("/agents", json={"id": "b2", "name": "B2"})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "openclaw_config_not_rewritable"
    assert config.read_text(encoding="utf-8") == original
    config.write_text("{ this is not json", encoding="utf-8")
    with api(server) as client:
        broken = client.get("/agents")
        assert broken.status_code == 503 and broken.json()["error"]["code"] == "openclaw_config_invalid"


def test_list_previews_the_newest_message_and_searches_titles_and_messages(
    server: LiveServer, settings: Settings
) -> None:
    parcel = seed_task(settings, "completed", at=1000)
    repo = repository(settings)
    repo.add_message(
        Message(new_ulid(), parcel.id, "agent", "您的快递已到达北京分拣中心，预计明天送达。" * 10, 2000)
    )
    other = seed_task(settings, "completed", at=1500)
    repo.add_message(Message(new_ulid(), other.id, "agent", "100% done_with it", 1600))
    with api(server) as client:
        listed = {t["id"]: t for t in client.get("/tasks").json()}
        preview = listed[parcel.id]["lastMessage"]
        assert preview["senderType"] == "agent" and preview["timestamp"] == 2000
        assert preview["content"].startswith("您的快递已到达北京") and len(preview["content"]) == 140
        assert "match" not in listed[parcel.id]

        found = client.get("/tasks", params={"q": "北京分拣"}).json()
        assert [t["id"] for t in found] == [parcel.id]
        assert "北京分拣" in found[0]["match"]["snippet"] and found[0]["match"]["snippet"].endswith("…")
        assert [t["id"] for t in client.get("/tasks", params={"q": "SEEDED COMPLETED"}).json()] == [
            parcel.id,  # updated last (its message at 2000)
            other.id,
        ]  # titles, case-insensitively
        assert [t["id"] for t in client.get("/tasks", params={"q": "100%"}).json()] == [other.id]
        assert client.get("/tasks", params={"q": "0%"}).json()[0]["id"] == other.id
        assert client.get("/tasks", params={"q": "e_w"}).json()[0]["id"] == other.id
        assert client.get("/tasks", params={"q": "%"}).json()[0]["id"] == other.id  # a literal %
        assert client.get("/tasks", params={"q": "nothing like this"}).json() == []
        assert len(client.get("/tasks", params={"q": "   "}).json()) == 2  # blank: no filter
        assert client.get("/tasks", params={"q": "x" * 201}).status_code == 422


def test_agent_descriptions_are_kept_in_openclaw_json(server: LiveServer, settings: Settings) -> None:
    with api(server) as client:
        created = client.post(
            "/agents", json={"id": "travel", "name": "旅行助手", "description": "订机票和酒店"}
        )
        assert created.status_code == 201 and created.json()["description"] == "订机票和酒店"
        assert client.get("/agents/travel").json()["description"] == "订机票和酒店"
        too_long = client.post("/agents", json={"id": "x1", "name": "n", "description": "d" * 501})
        assert too_long.status_code == 422
    written = json.loads(settings.openclaw_config_file.read_text(encoding="utf-8"))
    assert written["agents"]["entries"]["travel"]["description"] == "订机票和酒店"


@pytest.mark.slow
def test_runs_are_limited_and_queued_tasks_wait_as_pending(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(settings.model_copy(update={"inbox_max_running": 1}), demo_token_delay=0.02)
    with api(server) as client, SseClient(server.url + "/api/v1/events") as events:
        ids = [client.post("/tasks", json={"content": f"task {n} " * 6}).json()["id"] for n in range(3)]
        wait_until(lambda: task_status(client, ids[0]) == "running")
        assert [task_status(client, task_id) for task_id in ids[1:]] == ["pending", "pending"]
        assert client.delete(f"/tasks/{ids[2]}").status_code == 204  # a queued task goes at once
        for task_id in ids[:2]:
            wait_status(client, task_id, "completed")
        running_now = 0
        for name, data in events.events:
            if name == "task.updated":
                running_now += 1 if data["status"] == "running" else -1
                assert running_now <= 1, "two tasks ran at once"
        assert ids[2] not in {d["id"] for n, d in events.events if n == "task.updated"}

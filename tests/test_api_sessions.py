"""Every workbench session/chat endpoint through a real server: success and bad-input paths."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from clawlet.engine import titles
from tests.conftest import LiveServer, parse_sse
from tests.support.transcripts import calls_shown


def chat(server: LiveServer, session_id: str, message: str) -> list[tuple[str, dict[str, Any]]]:
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": message, "session_id": session_id},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert "detail" not in body
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


def test_create_and_list_sessions_newest_first(server: LiveServer) -> None:
    assert httpx.get(f"{server.url}/api/sessions").json() == []
    created = []
    for title in ("first", "second", "third"):
        response = httpx.post(f"{server.url}/api/sessions", json={"title": title})
        assert response.status_code == 201
        body = response.json()
        assert body["title"] == title and body["message_count"] == 0
        assert (server.settings.paths.sessions / f"{body['id']}.json").is_file()
        created.append(body["id"])
        time.sleep(0.01)
    # No body at all creates an untitled session.
    untitled = httpx.post(f"{server.url}/api/sessions")
    assert untitled.status_code == 201 and untitled.json()["title"] == ""

    listed = httpx.get(f"{server.url}/api/sessions").json()
    assert [item["id"] for item in listed] == [untitled.json()["id"], *reversed(created)]

    # A turn on the oldest session moves it to the top.
    chat(server, created[0], "hello")
    listed = httpx.get(f"{server.url}/api/sessions").json()
    assert listed[0]["id"] == created[0]
    assert listed[0]["message_count"] == 2

    too_long = httpx.post(f"{server.url}/api/sessions", json={"title": "x" * 101})
    assert_error(too_long, 422, "invalid_request")


def test_rename_session(server: LiveServer) -> None:
    session_id = httpx.post(f"{server.url}/api/sessions").json()["id"]
    url = f"{server.url}/api/sessions/{session_id}"
    renamed = httpx.put(url, json={"title": "  新的标题  "})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "新的标题"
    assert httpx.get(f"{url}/history").json()["title"] == "新的标题"

    assert_error(httpx.put(url, json={"title": "   "}), 422, "invalid_request")
    assert_error(httpx.put(url, json={"title": ""}), 422, "invalid_request")
    assert_error(httpx.put(url, json={}), 422, "invalid_request")
    assert_error(httpx.put(f"{server.url}/api/sessions/nope", json={"title": "x"}), 404, "not_found")
    assert_error(httpx.put(f"{server.url}/api/sessions/bad..id", json={"title": "x"}), 422)
    assert httpx.get(f"{url}/history").json()["title"] == "新的标题"


def test_delete_session(server: LiveServer) -> None:
    chat(server, "doomed", "hello")
    path = server.settings.paths.sessions / "doomed.json"
    assert path.is_file()
    deleted = httpx.delete(f"{server.url}/api/sessions/doomed")
    assert deleted.status_code == 200 and deleted.json()["ok"] is True
    assert not path.exists()
    assert_error(httpx.get(f"{server.url}/api/sessions/doomed/history"), 404, "not_found")
    assert_error(httpx.get(f"{server.url}/api/sessions/doomed/messages"), 404, "not_found")
    assert_error(httpx.delete(f"{server.url}/api/sessions/doomed"), 404, "not_found")
    assert all(item["id"] != "doomed" for item in httpx.get(f"{server.url}/api/sessions").json())


def test_messages_start_with_the_assembled_system_prompt(server: LiveServer) -> None:
    chat(server, "m1", "hello there")
    body = httpx.get(f"{server.url}/api/sessions/m1/messages").json()
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    prompt = messages[0]["content"]
    assert prompt == body["system_prompt"]
    assert prompt.startswith("<!-- Skills Snapshot -->\n<available_skills>")
    soul = (server.settings.paths.workspace / "SOUL.md").read_text(encoding="utf-8").strip()
    assert f"<!-- Soul -->\n{soul}" in prompt
    assert [m["role"] for m in messages[1:]] == ["user", "assistant"]
    assert messages[1]["content"] == "hello there"
    assert "hello there" in messages[2]["content"]


def test_history_has_tool_calls_after_a_run_turn(server: LiveServer) -> None:
    chat(server, "h1", "run: echo tool-output-42")
    history = httpx.get(f"{server.url}/api/sessions/h1/history").json()
    assert history["id"] == "h1" and history["running"] is False
    assert history["compressed_context"] == ""
    messages = history["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert calls_shown(messages[1]["tool_calls"]) == [
        {"tool": "terminal", "input": "echo tool-output-42", "output": "tool-output-42"}
    ]
    assert history["message_count"] == 3
    assert_error(httpx.get(f"{server.url}/api/sessions/none/history"), 404, "not_found")


def test_generate_title(server: LiveServer) -> None:
    session_id = httpx.post(f"{server.url}/api/sessions").json()["id"]
    url = f"{server.url}/api/sessions/{session_id}/generate-title"
    assert_error(httpx.post(url), 409, "no_messages")
    chat(server, session_id, "python: print(6 * 7)")
    httpx.put(f"{server.url}/api/sessions/{session_id}", json={"title": "manual"})
    response = httpx.post(url, timeout=30)
    assert response.status_code == 200
    # The demo model titles a conversation with the start of the user's request (the command).
    assert response.json() == {"session_id": session_id, "title": "print(6"}
    assert httpx.get(f"{server.url}/api/sessions/{session_id}/history").json()["title"] == "print(6"
    assert_error(httpx.post(f"{server.url}/api/sessions/nope/generate-title"), 404, "not_found")


def test_titles_are_asked_of_one_model(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    build = titles.build_chat_model

    def counted(settings: Settings, **options: Any) -> Any:
        built.append(options)
        return build(settings, **options)

    monkeypatch.setattr(titles, "build_chat_model", counted)
    for message in ("python: print(1)", "python: print(2)"):
        events = parse_sse(httpx.post(f"{server.url}/api/chat", json={"message": message}, timeout=60).text)
        assert [name for name, _ in events][-1] == "title"
    session_id = dict(events)["done"]["session_id"]
    response = httpx.post(f"{server.url}/api/sessions/{session_id}/generate-title", timeout=30)
    assert response.status_code == 200, response.text
    assert built == [{"temperature": 0.3}]  # before: one model built per title


def test_the_title_model_is_built_anew_for_replaced_settings() -> None:
    """An exec plane's ``init`` replaces the manager's settings (the model and keys come later):
    titles then use the new model, not the one kept from before."""
    writer = titles.TitleWriter()
    first = Settings(provider="openai", llm_base_url="http://127.0.0.1:9/v1", llm_model="a", llm_api_key="k")
    model = writer.model(first)
    assert writer.model(first) is model
    replaced = first.model_copy(update={"llm_model": "b"})
    assert writer.model(replaced) is not model
    assert getattr(writer.model(replaced), "model_name", None) == "b"


def test_cancel_with_nothing_running(server: LiveServer) -> None:
    session_id = httpx.post(f"{server.url}/api/sessions").json()["id"]
    response = httpx.post(f"{server.url}/api/sessions/{session_id}/cancel")
    assert response.status_code == 200
    assert response.json() == {"session_id": session_id, "cancelled": False}
    assert_error(httpx.post(f"{server.url}/api/sessions/nope/cancel"), 404, "not_found")


def test_skills_and_status(server: LiveServer) -> None:
    skills = httpx.get(f"{server.url}/api/skills").json()
    weather = next(skill for skill in skills["skills"] if skill["name"] == "get_weather")
    assert weather["location"] == "skills/get_weather/SKILL.md"
    assert weather["emoji"] == "🌤️"
    assert skills["problems"] == []

    status = httpx.get(f"{server.url}/api/status").json()
    assert status["model"]["provider"] == "demo"
    assert status["model"]["is_demo"] is True
    assert "demo" in status["model"]["label"] and "no LLM" in status["model"]["label"]
    assert status["home"] == str(server.settings.paths.root)
    assert status["rag_mode"] is False


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ('{"message": "hi",', "body"),
        ("not json at all", "body"),
        ('{"session_id": "s1"}', "message"),
        ('{"message": "   \\n  "}', "message"),
        ('{"message": ""}', "message"),
        ('{"message": 5}', "message"),
        ('{"message": "hi", "session_id": "../x"}', None),
        ('{"message": "hi", "session_id": "a/b"}', None),
        ('{"message": "hi", "session_id": ""}', None),
        ('{"message": "hi", "stream": "maybe"}', "stream"),
        ("[1, 2]", None),
    ],
)
def test_chat_rejects_bad_input_in_the_error_format(
    server: LiveServer, content: str, field: str | None
) -> None:
    response = httpx.post(
        f"{server.url}/api/chat", content=content, headers={"content-type": "application/json"}
    )
    error = assert_error(response, 422, "invalid_request")
    if field is not None:
        assert [d["field"] for d in error["details"]] == [field]
        assert error["message"].startswith(f"invalid request: {field}: ")
    # Nothing was written for a rejected request.
    assert list(server.settings.paths.sessions.glob("*.json")) == []
    assert not (server.settings.paths.root / "x.json").exists()


def test_chat_without_stream_returns_json(server: LiveServer) -> None:
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "run: echo json-mode", "session_id": "j1", "stream": False},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["session_id"] == "j1"
    assert body["cancelled"] is False
    assert "json-mode" in body["content"]
    assert body["title"] == "echo json-"


def test_chat_without_session_id_creates_one(server: LiveServer) -> None:
    response = httpx.post(f"{server.url}/api/chat", json={"message": "hi", "stream": False}, timeout=60)
    assert response.status_code == 200
    session_id = response.json()["session_id"]
    assert (server.settings.paths.sessions / f"{session_id}.json").is_file()


def test_unknown_routes_use_the_error_format(server: LiveServer) -> None:
    assert_error(httpx.get(f"{server.url}/api/nothing-here"), 404, "not_found")
    assert_error(httpx.get(f"{server.url}/api/sessions/x/nothing"), 404, "not_found")
    # Paths outside /api and /v1 belong to the web UI (its index.html or a "not built" page).
    assert_error(httpx.delete(f"{server.url}/api/chat"), 405, "method_not_allowed")


def test_second_chat_on_a_running_session_is_busy(server: LiveServer) -> None:
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"{server.url}/api/chat",
            json={"message": "python: import time; time.sleep(600)", "session_id": "busy"},
        ) as stream,
    ):
        lines = stream.iter_lines()
        assert any(line.startswith("event: tool_start") for line in lines)
        second = httpx.post(
            f"{server.url}/api/chat", json={"message": "hello", "session_id": "busy"}, timeout=60
        )
        error = assert_error(second, 409, "session_busy")
        assert "busy" in error["message"]
        assert httpx.get(f"{server.url}/api/sessions/busy/history").json()["running"] is True
        cancelled = httpx.post(f"{server.url}/api/sessions/busy/cancel", timeout=60)
        assert cancelled.json()["cancelled"] is True
        rest = "\n".join(lines)
    assert '"cancelled": true' in rest
    # The rejected message was never stored.
    history = httpx.get(f"{server.url}/api/sessions/busy/history").json()
    assert [m["content"] for m in history["messages"] if m["role"] == "user"] == [
        "python: import time; time.sleep(600)"
    ]
    # Once the run is over the session accepts turns again.
    assert chat(server, "busy", "hello again")[-1][0] == "done"


def test_session_with_a_chinese_title(server: LiveServer) -> None:
    created = httpx.post(f"{server.url}/api/sessions", json={"title": "我的会话"}).json()
    events = chat(server, created["id"], "你好，今天怎么样？")
    assert events[-1][0] == "done"
    tokens = [data["content"] for name, data in events if name == "token"]
    # the demo model streams Chinese a character per token (tests/test_demo_model.py); the relay may
    # join the tokens that piled up while it was busy (``Run.events``) but never splits or loses one
    assert "".join(tokens) == events[-1][1]["content"] and "你好" in "".join(tokens)
    listed = httpx.get(f"{server.url}/api/sessions").json()
    assert listed[0]["title"] == "我的会话"  # an existing title is never overwritten
    raw = (server.settings.paths.sessions / f"{created['id']}.json").read_text(encoding="utf-8")
    assert "我的会话" in raw and "你好，今天怎么样？" in raw  # stored readable, not \\u-escaped

    fresh = chat(server, "zh", "讲个笑话吧朋友们大家好啊")
    title = next(data["title"] for name, data in fresh if name == "title")
    assert title == "讲个笑话吧朋友们大家好"[:10]
    assert httpx.get(f"{server.url}/api/sessions/zh/history").json()["title"] == title


def test_bearer_token_auth(live_server: Callable[..., LiveServer], clawlet_home: object) -> None:
    server = live_server(Settings(api_token="s3cret"))
    url = f"{server.url}/api/sessions"
    missing = httpx.get(url)
    assert_error(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == "Bearer"
    assert_error(httpx.get(url, headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
    assert_error(httpx.get(url, headers={"Authorization": "s3cret"}), 401, "unauthorized")
    assert_error(httpx.get(url, headers={"Authorization": "Basic s3cret"}), 401, "unauthorized")
    assert_error(httpx.post(f"{server.url}/api/chat", json={"message": "run: echo no"}), 401, "unauthorized")
    assert list(server.settings.paths.sessions.glob("*.json")) == []

    good = {"Authorization": "Bearer s3cret"}
    assert httpx.get(url, headers=good).status_code == 200
    assert httpx.get(url, headers={"authorization": "bearer s3cret"}).status_code == 200
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "hi", "session_id": "auth", "stream": False},
        headers=good,
        timeout=60,
    )
    assert response.status_code == 200

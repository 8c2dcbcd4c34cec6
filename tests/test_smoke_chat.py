"""The issue's headline acceptance check: a `run:` message streamed through a real server."""

from __future__ import annotations

import json

import httpx

from tests.conftest import LiveServer, parse_sse
from tests.support.transcripts import calls_shown


def test_run_command_streams_tool_events_and_saves_segments(server: LiveServer) -> None:
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "run: echo hi", "session_id": "s1", "stream": True},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    names = [name for name, _ in parse_sse(response.text)]
    collapsed = [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]
    assert collapsed == ["token", "tool_start", "tool_end", "new_response", "token", "done", "title"]
    events = dict(parse_sse(response.text)[len(names) - 2 : len(names) - 1])
    assert events["done"]["session_id"] == "s1"

    stored = json.loads((server.settings.paths.sessions / "s1.json").read_text(encoding="utf-8"))
    messages = stored["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[0]["content"] == "run: echo hi"
    assert calls_shown(messages[1]["tool_calls"]) == [
        {"tool": "terminal", "input": "echo hi", "output": "hi"}
    ]
    assert "hi" in messages[2]["content"] and "tool_calls" not in messages[2]
    assert stored["title"] == "echo hi"

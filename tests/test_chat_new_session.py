"""``POST /api/chat`` without a session id starts a new session without creating its file first:
the file is written with the first message (written on the loop by a lone turn, which has nothing
else to wait for, tests/test_sessions_write_path.py), and the answer by a worker thread."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest

from clawlet import storage
from tests.conftest import LiveServer, parse_sse


def on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_new_session_is_written_with_its_first_message_and_answered_off_the_event_loop(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[str, bool, bytes]] = []
    real = storage._write_and_rename

    def recording(dir_fd: int, name: str, data: bytes) -> os.stat_result:
        writes.append((name, on_event_loop(), data))
        return real(dir_fd, name, data)

    monkeypatch.setattr(storage, "_write_and_rename", recording)
    response = httpx.post(f"{server.url}/api/chat", json={"message": "hello"}, timeout=60)
    assert response.status_code == 200, response.text
    session_id = response.headers["X-Session-ID"]
    events = parse_sse(response.text)
    assert [name for name, _data in events][-1] in ("done", "title")
    session_writes = [(on_loop, data) for name, on_loop, data in writes if name == f"{session_id}.json"]
    assert len(session_writes) >= 2  # the message, the answer (and the title)
    first = json.loads(session_writes[0][1])
    assert [(m["role"], m["content"]) for m in first["messages"]] == [("user", "hello")]  # not created empty
    assert not any(on_loop for on_loop, _data in session_writes[1:])  # the answer: off the event loop
    listed = httpx.get(f"{server.url}/api/sessions", timeout=60).json()
    assert session_id in [item["id"] for item in listed]
    history = httpx.get(f"{server.url}/api/sessions/{session_id}/history", timeout=60).json()
    messages = history["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant"]

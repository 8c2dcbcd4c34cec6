"""``POST /api/chat`` without a session id starts a new session without writing its file on the
event loop: the file is written with the first message, by the turn's worker thread."""

from __future__ import annotations

import asyncio
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


def test_a_new_session_is_not_written_on_the_event_loop(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[str, bool]] = []
    real = storage._write_and_rename

    def recording(dir_fd: int, name: str, data: bytes) -> os.stat_result:
        writes.append((name, on_event_loop()))
        return real(dir_fd, name, data)

    monkeypatch.setattr(storage, "_write_and_rename", recording)
    response = httpx.post(f"{server.url}/api/chat", json={"message": "hello"}, timeout=60)
    assert response.status_code == 200, response.text
    session_id = response.headers["X-Session-ID"]
    events = parse_sse(response.text)
    assert [name for name, _data in events][-1] in ("done", "title")
    session_writes = [on_loop for name, on_loop in writes if name == f"{session_id}.json"]
    assert session_writes  # the message and the answer were written …
    assert not any(session_writes)  # … none of it on the event loop
    listed = httpx.get(f"{server.url}/api/sessions", timeout=60).json()
    assert session_id in [item["id"] for item in listed]
    history = httpx.get(f"{server.url}/api/sessions/{session_id}/history", timeout=60).json()
    messages = history["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant"]

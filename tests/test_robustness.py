"""A corrupt session file is reported and never overwritten; stale temp files are cleaned up."""

from __future__ import annotations

import os
import time

import httpx

from clawlet.config import Settings
from clawlet.home import init_home
from tests.conftest import LiveServer


def test_corrupt_session_file_gets_a_clear_error_and_is_left_untouched(server: LiveServer) -> None:
    path = server.settings.paths.sessions / "broken.json"
    path.write_text('{"title": "half', encoding="utf-8")
    for response in (
        httpx.post(f"{server.url}/api/chat", json={"message": "hi", "session_id": "broken"}, timeout=30),
        httpx.get(f"{server.url}/api/sessions/broken/history"),
        httpx.put(f"{server.url}/api/sessions/broken", json={"title": "x"}),
    ):
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "session_corrupt"
    assert path.read_text(encoding="utf-8") == '{"title": "half'
    listed = httpx.get(f"{server.url}/api/sessions").json()
    assert all(item["id"] != "broken" for item in listed)


def test_init_removes_stale_temp_files_only(settings: Settings) -> None:
    sessions = settings.paths.sessions
    stale = sessions / ".s1.json.abc123.tmp"
    fresh = sessions / ".s2.json.def456.tmp"
    stale.write_text("{", encoding="utf-8")
    fresh.write_text("{", encoding="utf-8")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    init_home(settings.paths)
    assert not stale.exists()
    assert fresh.exists()  # may belong to a write in progress

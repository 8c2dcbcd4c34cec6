"""A corrupt session file is reported and never overwritten; stale temp files are cleaned up; file locks
last only while in use."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from clawlet import storage
from clawlet.config import Settings
from clawlet.home import init_home
from clawlet.storage import PROCESS_STARTED, TEMP_NAME, atomic_write_text, file_lock
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
    stale = sessions / ".s1.json.abc12345.tmp"  # an older writer's name (no pid): after an hour
    fresh = sessions / ".s2.json.def45678.tmp"
    stale.write_text("{", encoding="utf-8")
    fresh.write_text("{", encoding="utf-8")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    init_home(settings.paths)
    assert not stale.exists()
    assert fresh.exists()  # may belong to a write in progress


def _age(path: Path, seconds: float, text: str = "half") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_start_up_removes_the_temps_of_dead_writers_everywhere_in_the_home(
    settings: Settings, live_server: Callable[..., LiveServer], tmp_path: Path
) -> None:
    """What 300 kill -9 rounds left (temps in ``workspace/notes/``, ``sessions/checkpoints/*/``
    and elsewhere) is gone after a start; temps a live process may still be writing, and real
    files, stay."""
    home = settings.paths.root
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: no process has this pid now
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    outside = tmp_path / "outside"
    try:
        stale = [
            _age(home / "workspace" / "notes" / f".todo.md.{dead.pid}.0a1b2c3d.tmp", 60),
            _age(home / "sessions" / "checkpoints" / "t1" / f".c1.json.{dead.pid}.0a1b2c3e.tmp", 60),
            _age(home / "sessions" / f".s1.json.{dead.pid}.0a1b2c3f.tmp", 60),
            _age(home / "memory" / f".MEMORY.md.{dead.pid}.1a1b2c3d.tmp", 60),
            _age(home / "skills" / "demo" / f".SKILL.md.{dead.pid}.2a1b2c3d.tmp", 60),
            _age(home / "knowledge" / f".doc.md.{dead.pid}.3a1b2c3d.tmp", 60),
            _age(home / "uploads" / f".a.pdf.{dead.pid}.4a1b2c3d.tmp", 60),
            _age(home / "workspaces" / "alice" / "sessions" / f".s.json.{dead.pid}.5a1b2c3d.tmp", 60),
            # this process's pid, written before it started: a restart that got the same pid
            _age(
                home / "storage" / f".index.json.{os.getpid()}.6a1b2c3d.tmp",
                time.time() - PROCESS_STARTED + 60,
            ),
        ]
        kept = [
            _age(home / "workspace" / "notes" / f".todo.md.{alive.pid}.7a1b2c3d.tmp", 120),  # live writer
            _age(home / "sessions" / f".s2.json.{dead.pid}.8a1b2c3d.tmp", 0),  # maybe another namespace's
            _age(home / "sessions" / ".s3.json.9a1b2c3d.tmp", 120),  # no pid, not an hour old
            _age(home / "workspace" / "notes" / "todo.md", 120, "real"),
            _age(home / "workspace" / ".build.tmp", 7200, "the user's, not an atomic write's"),
        ]
        # a symlink out of the home is not followed
        beyond = _age(outside / f".x.json.{dead.pid}.aa1b2c3d.tmp", 60)
        (home / "workspace" / "link").symlink_to(outside, target_is_directory=True)

        server = live_server()
        assert httpx.get(f"{server.url}/health/live", timeout=30).status_code == 200
        assert [path for path in stale if path.exists()] == []
        assert [path for path in kept if not path.exists()] == []
        assert (home / "workspace" / "notes" / "todo.md").read_text(encoding="utf-8") == "real"
        assert beyond.exists()
    finally:
        alive.kill()
        alive.wait()


def test_an_atomic_write_names_its_temp_after_its_writer(tmp_path: Path) -> None:
    target = tmp_path / "notes.md"
    seen: list[str] = []
    original = os.replace

    def spy(source: str, destination: str, **kwargs: object) -> None:
        seen.append(os.path.basename(source))
        original(source, destination, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", spy)
        atomic_write_text(target, "x")
    assert target.read_text(encoding="utf-8") == "x"
    [name] = seen
    assert name.startswith(f".notes.md.{os.getpid()}.") and name.endswith(".tmp")
    found = TEMP_NAME.fullmatch(name)
    assert found is not None and found["pid"] == str(os.getpid())


def test_a_file_lock_serialises_its_users_and_is_dropped_with_the_last(tmp_path: Path) -> None:
    """A server that has written thousands of sessions keeps no lock for each of their files."""
    target = tmp_path / "session.json"
    key = str(target.resolve())
    order: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with file_lock(target):
            order.append("first in")
            first_in.set()
            release.wait(60)
            order.append("first out")

    def second() -> None:
        first_in.wait(60)
        with file_lock(target):
            order.append("second in")
            with file_lock(target):  # re-entrant in one thread
                order.append("second again")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while storage._locks.get(key, (None, [0]))[1][0] < 2:  # the second is waiting
        assert time.monotonic() < deadline, "the second user never came"
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(60)
    assert order == ["first in", "first out", "second in", "second again"]
    assert key not in storage._locks

"""What saving a message costs in system calls (issue 17): the turn's user message is written by a
worker thread while the event loop starts the model call, and each system call lets the loop take
the GIL, so the write lasts about one loop turn per call. These tests count the calls (never time)
and check that the path guard still holds on the shorter way."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clawlet.paths import PathOutsideRoot, open_directory_inside, resolve_inside
from clawlet.sessions.store import TranscriptStore
from clawlet.storage import atomic_write_text

COUNTED = ("lstat", "stat", "open", "mkdir", "readlink", "getpid", "fsync", "write", "replace")


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count the calls of the ``os`` functions in COUNTED (and of ``Path.resolve``) in the block."""
    calls: Counter[str] = Counter()

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    with monkeypatch.context() as patch:
        for name in COUNTED:
            patch.setattr(os, name, counted(name, getattr(os, name)))
        patch.setattr(Path, "resolve", counted("resolve", Path.resolve))
        yield calls


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path.resolve() / "home"
    (home / "sessions").mkdir(parents=True)
    return home


def test_saving_a_new_sessions_first_message_resolves_its_path_once(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TranscriptStore(home / "sessions", home)
    store.append("warm", "user", "first")  # imports and the like, not counted
    target = home / "sessions" / "new.json"
    names = len(target.parts) - 1  # the names realpath looks at, one lstat each
    with counting(monkeypatch) as calls:
        store.append("new", "user", "hello")
    assert [m["content"] for m in store.load_messages("new")] == ["hello"]
    # the target only: not the home (on every check), not the lock's path, not the directory again
    assert calls["resolve"] == 1
    # realpath's names, the target's link count, pathlib's loop check and the memo's signature
    assert calls["lstat"] + calls["stat"] <= names + 3
    # no read of a file that is not there; the directory and the temp file; no mkdir of a directory
    # that exists; the pid known without a system call
    assert calls["open"] == 2
    assert calls["readlink"] == 1  # the opened directory's location, checked once
    assert calls["mkdir"] == calls["getpid"] == 0
    assert calls["write"] == 1 and calls["replace"] == 1
    assert calls["fsync"] == 2  # the file, then its directory: durability unchanged


def test_appending_to_a_kept_session_reads_nothing_again(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TranscriptStore(home / "sessions", home)
    store.append("kept", "user", "one")
    with counting(monkeypatch) as calls:
        store.append("kept", "assistant", "two")
    assert calls["resolve"] == 1 and calls["open"] == 2 and calls["fsync"] == 2
    assert [m["content"] for m in store.load_messages("kept")] == ["one", "two"]


def test_a_missing_directory_is_still_created(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    atomic_write_text(home / "a" / "b" / "notes.md", "x", root=home)
    assert (home / "a" / "b" / "notes.md").read_text(encoding="utf-8") == "x"


def test_a_root_given_through_a_symlink_is_resolved_and_still_confines(tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    (real / "sessions").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    linked = tmp_path / "home-link"
    linked.symlink_to(real)
    assert resolve_inside(linked, "sessions/x.json") == real.resolve() / "sessions" / "x.json"
    with pytest.raises(PathOutsideRoot):
        resolve_inside(linked, "../outside/x.json")
    with pytest.raises(PathOutsideRoot):
        resolve_inside(linked, tmp_path / "outside")
    store = TranscriptStore(linked / "sessions", linked)
    store.append("s", "user", "through the link")
    assert (real / "sessions" / "s.json").is_file()


def test_a_resolved_directory_swapped_for_a_link_out_is_refused(tmp_path: Path) -> None:
    """``open_directory_inside(resolved=True)`` trusts the path it is given, not the directory it
    finds there: the opened directory's real location is checked."""
    home = tmp_path.resolve() / "home"
    (home / "sub").mkdir(parents=True)
    outside = tmp_path.resolve() / "outside"
    (outside / "sub").mkdir(parents=True)
    checked = resolve_inside(home, "sub")
    (home / "sub").rmdir()
    (home / "sub").symlink_to(outside / "sub")  # the final name is not followed (O_NOFOLLOW)
    with pytest.raises(OSError):
        open_directory_inside(home, checked, resolved=True)
    (home / "sub").unlink()
    (home / "elsewhere").symlink_to(outside)  # a directory on the way is followed: its location is checked
    with pytest.raises(PathOutsideRoot):
        open_directory_inside(home, home / "elsewhere" / "sub", resolved=True)

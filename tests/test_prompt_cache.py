"""The system prompt is assembled before every model call without reading or parsing again what
did not change (:mod:`clawlet.filememo`), and an edit still applies to the very next call."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from clawlet import paths
from clawlet.config import RUNTIME_CONFIG_FILES, Settings
from clawlet.engine.agent import AgentEngine
from clawlet.engine.prompt import PROMPT_FILES
from clawlet.filememo import RACY_SECONDS, FileMemo
from clawlet.services import build_services
from clawlet.skills.scanner import CONFIG_FILES, SKILL_FILES, SNAPSHOT_FILES

MEMOS = (PROMPT_FILES, SKILL_FILES, SNAPSHOT_FILES, CONFIG_FILES, RUNTIME_CONFIG_FILES)


def computed() -> int:
    return sum(memo.computed for memo in MEMOS)


def settle(home: Path) -> None:
    """Date every file of the home back by a minute: as if it was written long ago."""
    past = time.time() - 60
    for folder, _dirs, names in os.walk(home):
        for name in names:
            os.utime(Path(folder) / name, (past, past))


@pytest.fixture
def engine(settings: Settings) -> AgentEngine:
    engine = build_services(settings).engine
    (settings.paths.root / "config.json").write_text('{"rag_mode": false}', encoding="utf-8")
    engine.system_prompt()
    settle(settings.paths.root)
    return engine


def test_nothing_is_read_again_while_nothing_changed(
    engine: AgentEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = engine.system_prompt()  # reads what the settling moved
    before = computed()
    reads: list[str] = []
    read_bytes = paths.read_bytes_inside

    def counting(root: Path, path: str | os.PathLike[str]) -> bytes:
        reads.append(str(path))
        return read_bytes(root, path)

    monkeypatch.setattr(paths, "read_bytes_inside", counting)
    for _ in range(5):
        assert engine.system_prompt() == first
        assert engine.runtime_config.get_rag_mode() is False
    assert reads == []  # no prompt file, SKILL.md, snapshot or config.json read again
    assert computed() == before
    (engine.settings.paths.root / "workspace" / "USER.md").write_text("changed", encoding="utf-8")
    assert "changed" in engine.system_prompt()
    assert [Path(read).name for read in reads] == ["USER.md"]


def test_a_workspace_edit_applies_to_the_next_call(engine: AgentEngine, settings: Settings) -> None:
    engine.system_prompt()
    soul = settings.paths.root / "workspace" / "SOUL.md"
    text = soul.read_text(encoding="utf-8")
    edited = "X" + text[1:]  # the same size, written in place
    soul.write_text(edited, encoding="utf-8")
    assert edited.strip() in engine.system_prompt()


def test_a_skill_edit_applies_to_the_next_call(engine: AgentEngine, settings: Settings) -> None:
    engine.system_prompt()
    skill = settings.paths.root / "skills" / "get_weather" / "SKILL.md"
    text = skill.read_text(encoding="utf-8")
    assert "look up the weather" in text
    skill.write_text(text.replace("look up the weather", "fetch the forecast"), encoding="utf-8")
    prompt = engine.system_prompt()
    assert "fetch the forecast" in prompt and "look up the weather" not in prompt
    assert "fetch the forecast" in settings.paths.skills_snapshot.read_text(encoding="utf-8")


def test_a_new_skill_and_a_config_change_apply_to_the_next_call(
    engine: AgentEngine, settings: Settings
) -> None:
    engine.system_prompt()
    folder = settings.paths.root / "skills" / "notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: notes\ndescription: Keep notes\n---\n", encoding="utf-8")
    assert "<name>notes</name>" in engine.system_prompt()
    engine.runtime_config.set_rag_mode(True)
    assert engine.runtime_config.get_rag_mode() is True


def test_a_missing_binary_still_counts_at_once(
    engine: AgentEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requirements are judged on every scan, not cached with the parsed file."""
    assert "get_weather" in engine.system_prompt()
    monkeypatch.setenv("PATH", str(settings.paths.root / "no-bins-here"))
    assert "<name>get_weather</name>" not in engine.system_prompt()


def test_a_file_modified_just_now_is_read_every_time(tmp_path: Path) -> None:
    """Two same-size writes within one tick of the file system's clock keep size and time: a file
    modified less than RACY_SECONDS ago is never trusted to be unchanged."""
    path = tmp_path / "racy.txt"
    path.write_text("one", encoding="utf-8")
    memo: FileMemo[str] = FileMemo()

    def read(found: Path) -> str:
        return found.read_text(encoding="utf-8")

    assert memo.get(path, read) == "one"
    stamp = path.stat().st_mtime_ns
    path.write_text("two", encoding="utf-8")
    os.utime(path, ns=(stamp, stamp))  # the same size and the same time: one tick
    assert memo.get(path, read) == "two"
    assert memo.computed == 2
    old = time.time_ns() - int((RACY_SECONDS + 5) * 1e9)
    os.utime(path, ns=(old, old))
    assert memo.get(path, read) == "two"
    assert memo.get(path, read) == "two"
    assert memo.computed == 3  # settled: read once more, then reused


def test_a_memo_keeps_only_its_most_recent_files(tmp_path: Path) -> None:
    memo: FileMemo[str] = FileMemo(max_entries=2)
    old = time.time_ns() - int((RACY_SECONDS + 5) * 1e9)
    paths = [tmp_path / f"{n}.txt" for n in range(3)]
    for path in paths:
        path.write_text(path.name, encoding="utf-8")
        os.utime(path, ns=(old, old))
        memo.get(path, lambda found: found.name)
    memo.get(paths[2], lambda found: found.name)
    assert memo.computed == 3
    memo.get(paths[0], lambda found: found.name)  # the least recently used was dropped
    assert memo.computed == 4


def test_a_memo_keeps_values_of_at_most_max_bytes_of_files(tmp_path: Path) -> None:
    memo: FileMemo[str] = FileMemo(max_entries=10, max_bytes=250)
    old = time.time_ns() - int((RACY_SECONDS + 5) * 1e9)
    paths = [tmp_path / f"{n}.txt" for n in range(4)]
    for path, size in zip(paths, (100, 100, 100, 300), strict=True):
        path.write_text("x" * size, encoding="utf-8")
        os.utime(path, ns=(old, old))
    for path in paths[:3]:
        memo.get(path, lambda found: found.name)
    assert memo.kept_bytes == 200  # the third pushed the least recently used out
    memo.get(paths[2], lambda found: found.name)
    memo.get(paths[1], lambda found: found.name)
    assert memo.computed == 3
    memo.get(paths[0], lambda found: found.name)
    assert memo.computed == 4
    memo.get(paths[3], lambda found: found.name)  # larger than the bound alone: not kept
    assert memo.kept_bytes == 200  # and the others stay
    memo.get(paths[3], lambda found: found.name)
    memo.get(paths[0], lambda found: found.name)
    assert memo.computed == 6

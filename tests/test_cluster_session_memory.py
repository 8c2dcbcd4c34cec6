"""``SessionMemory``: conversation/context/scratchpad round trips (Chinese included), snapshot and
restore, corrupt ``context.json`` handling, crash safety and concurrent appends."""

from __future__ import annotations

import json
import logging
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clawlet.execplane.session_memory import InvalidSnapshot, SessionMemory


class FixedClock:
    """2026-01-02T03:04:05+00:00, one second later on every call."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        value = self.now
        self.now += timedelta(seconds=1)
        return value


def memory(tmp_path: Path) -> SessionMemory:
    return SessionMemory(tmp_path / "sessions" / "s1", clock=FixedClock())


# -- conversation.md ---------------------------------------------------------------------------


def test_fresh_memory_reads_empty_and_creates_nothing(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    assert mem.read_conversation() == ""
    assert mem.read_scratchpad() == ""
    assert mem.get_all_context() == {}
    assert mem.get_context("missing", "default") == "default"
    assert mem.snapshot() == {"conversation": "", "context": {}, "scratchpad": ""}
    assert not mem.memory_dir.exists()


def test_conversation_sections_in_the_seed_format(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.append_message("user", "帮我分析一下销售数据")
    mem.append_message("assistant", "好的，我先读取文件。\n\n- 第一步\n- 第二步")
    expected = (
        "\n## [user] 2026-01-02T03:04:05+00:00\n\n帮我分析一下销售数据\n"
        "\n## [assistant] 2026-01-02T03:04:06+00:00\n\n好的，我先读取文件。\n\n- 第一步\n- 第二步\n"
    )
    assert mem.read_conversation() == expected
    assert mem.conversation_path == tmp_path / "sessions" / "s1" / "memory" / "conversation.md"
    assert mem.conversation_path.read_text(encoding="utf-8") == expected
    # a second instance (a restarted process) sees the same file
    assert SessionMemory(tmp_path / "sessions" / "s1").read_conversation() == expected


def test_default_timestamps_are_timezone_aware_iso(tmp_path: Path) -> None:
    mem = SessionMemory(tmp_path)
    mem.append_message("user", "hi")
    match = re.search(r"## \[user\] (\S+)", mem.read_conversation())
    assert match is not None
    assert datetime.fromisoformat(match.group(1)).tzinfo is not None


@pytest.mark.parametrize("role", ["", "us\ner", "a]b", "x\r"])
def test_invalid_roles_are_refused(tmp_path: Path, role: str) -> None:
    mem = memory(tmp_path)
    with pytest.raises(ValueError, match="invalid role"):
        mem.append_message(role, "text")
    assert not mem.conversation_path.exists()


def test_failed_append_leaves_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = memory(tmp_path)
    mem.append_message("user", "第一条")
    before = mem.conversation_path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("clawlet.storage.os.fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        mem.append_message("assistant", "第二条" * 1000)
    monkeypatch.undo()
    assert mem.conversation_path.read_bytes() == before
    assert [p.name for p in mem.memory_dir.iterdir()] == ["conversation.md"]  # no temp file left


def test_append_keeps_existing_bytes_even_if_not_utf8(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.memory_dir.mkdir(parents=True)
    mem.conversation_path.write_bytes(b"old \xff\xfe bytes\n")
    mem.append_message("user", "新消息")
    raw = mem.conversation_path.read_bytes()
    assert raw.startswith(b"old \xff\xfe bytes\n")
    assert raw.endswith("新消息\n".encode())
    assert "新消息" in mem.read_conversation()  # reading replaces the bad bytes, never fails


def test_concurrent_appends_from_threads_neither_interleave_nor_get_lost(tmp_path: Path) -> None:
    mem = SessionMemory(tmp_path)
    threads_count, per_thread = 8, 40
    start = threading.Barrier(threads_count)

    def writer(thread: int) -> None:
        start.wait()
        for number in range(per_thread):
            mem.append_message(f"t{thread}", f"线程 {thread} 消息 {number}\n第二行 {thread}-{number}")

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(threads_count)]
    for worker in threads:
        worker.start()
    for worker in threads:
        worker.join()

    sections = re.findall(r"\n## \[(t\d+)\] \S+\n\n(.*?)\n(?=\n## |\Z)", mem.read_conversation(), re.S)
    assert len(sections) == threads_count * per_thread
    seen: dict[str, list[int]] = {}
    for role, body in sections:
        thread = int(role[1:])
        match = re.fullmatch(rf"线程 {thread} 消息 (\d+)\n第二行 {thread}-(\d+)", body)
        assert match is not None and match.group(1) == match.group(2), body
        seen.setdefault(role, []).append(int(match.group(1)))
    assert seen == {f"t{index}": list(range(per_thread)) for index in range(threads_count)}


# -- context.json ------------------------------------------------------------------------------


def test_context_round_trip(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.set_context("当前任务", {"步骤": [1, 2, 3], "完成": False})
    mem.set_context("count", 1)
    mem.set_context("count", 2)
    assert mem.get_context("当前任务") == {"步骤": [1, 2, 3], "完成": False}
    assert mem.get_context("count") == 2
    assert mem.get_all_context() == {"当前任务": {"步骤": [1, 2, 3], "完成": False}, "count": 2}
    assert mem.context_entries()["count"] == {"value": 2, "updated_at": "2026-01-02T03:04:07+00:00"}
    on_disk = json.loads(mem.context_path.read_text(encoding="utf-8"))
    assert on_disk["当前任务"] == {
        "value": {"步骤": [1, 2, 3], "完成": False},
        "updated_at": "2026-01-02T03:04:05+00:00",
    }
    assert "当前任务" in mem.context_path.read_text(encoding="utf-8")  # kept readable, not \\u-escaped
    assert mem.delete_context("count") is True
    assert mem.delete_context("count") is False
    assert mem.get_all_context() == {"当前任务": {"步骤": [1, 2, 3], "完成": False}}
    mem.set_context("none", None)
    assert mem.get_context("none", "default") is None


@pytest.mark.parametrize("value", [object(), {1, 2}, float("nan"), float("inf"), b"bytes"])
def test_non_json_context_values_are_refused(tmp_path: Path, value: object) -> None:
    mem = memory(tmp_path)
    mem.set_context("kept", "yes")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        mem.set_context("bad", value)
    assert mem.get_all_context() == {"kept": "yes"}


def test_empty_context_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        memory(tmp_path).set_context("", 1)


@pytest.mark.parametrize(
    "content",
    [b'{"a": {"value": 1', b"\xff\xfe not utf-8", b"[1, 2, 3]", b'{"a": 1}', b'{"a": {"no_value": 1}}', b""],
    ids=["truncated", "not-utf8", "list", "bare-value", "entry-without-value", "empty"],
)
def test_corrupt_context_is_kept_aside_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    mem = memory(tmp_path)
    mem.memory_dir.mkdir(parents=True)
    mem.context_path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="clawlet.execplane.session_memory"):
        assert mem.get_context("a", "default") == "default"
    (kept,) = mem.quarantined
    assert kept.name == "context.json.corrupt-20260102T030405000000Z"
    assert kept.read_bytes() == content  # the corrupt bytes are kept, untouched
    assert not mem.context_path.exists()
    assert "is corrupt" in caplog.text and kept.name in caplog.text
    mem.set_context("a", "fresh")
    assert mem.get_all_context() == {"a": "fresh"}
    assert kept.read_bytes() == content


def test_a_second_corruption_never_overwrites_the_first_copy(tmp_path: Path) -> None:
    clock_time = datetime(2026, 1, 2, tzinfo=UTC)
    mem = SessionMemory(tmp_path, clock=lambda: clock_time)  # the same timestamp both times
    mem.memory_dir.mkdir(parents=True)
    mem.context_path.write_text("first {", encoding="utf-8")
    mem.set_context("x", 1)
    mem.context_path.write_text("second {", encoding="utf-8")
    mem.set_context("y", 2)
    first, second = mem.quarantined
    assert first.read_text(encoding="utf-8") == "first {"
    assert second.read_text(encoding="utf-8") == "second {"
    assert second.name == first.name + "-1"
    assert mem.get_all_context() == {"y": 2}


# -- scratchpad.md -----------------------------------------------------------------------------


def test_scratchpad_round_trip(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.write_scratchpad("# 草稿\n\n1. 读取 data.csv\n")
    assert mem.read_scratchpad() == "# 草稿\n\n1. 读取 data.csv\n"
    mem.write_scratchpad("")
    assert mem.read_scratchpad() == ""


# -- snapshot / restore ------------------------------------------------------------------------


def test_snapshot_is_json_safe_and_restores_losslessly(tmp_path: Path) -> None:
    source = SessionMemory(tmp_path / "a", clock=FixedClock())
    source.append_message("user", "你好，世界")
    source.append_message("assistant", "你好！有什么可以帮你？")
    source.set_context("语言", "中文")
    source.set_context("nested", {"list": [1, "二", None, True], "n": 1.5})
    source.write_scratchpad("计划：\n- 第一步")
    snapshot = source.snapshot()
    wire = json.loads(json.dumps(snapshot, ensure_ascii=False, allow_nan=False))
    assert wire == snapshot
    assert snapshot["context"]["语言"] == {"value": "中文", "updated_at": "2026-01-02T03:04:07+00:00"}

    target = SessionMemory(tmp_path / "b")
    target.append_message("user", "to be replaced")
    target.set_context("old", 1)
    target.restore(wire)
    assert target.snapshot() == snapshot
    assert target.read_conversation() == source.read_conversation()
    assert target.get_all_context() == {"语言": "中文", "nested": {"list": [1, "二", None, True], "n": 1.5}}
    assert target.read_scratchpad() == "计划：\n- 第一步"


def test_restore_treats_missing_parts_as_empty(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.append_message("user", "x")
    mem.set_context("k", 1)
    mem.write_scratchpad("s")
    mem.restore({})
    assert mem.snapshot() == {"conversation": "", "context": {}, "scratchpad": ""}


@pytest.mark.parametrize(
    "snapshot",
    [
        [],
        {"conversation": 1},
        {"scratchpad": ["x"]},
        {"context": []},
        {"context": {"k": 1}},  # plain values are not entries
        {"context": {"k": {"value": 1, "updated_at": 5}}},
        {"context": {"k": {"value": float("nan"), "updated_at": ""}}},
        {"context": {1: {"value": 1, "updated_at": ""}}},
    ],
)
def test_invalid_snapshots_are_refused_before_anything_is_written(tmp_path: Path, snapshot: object) -> None:
    mem = memory(tmp_path)
    mem.append_message("user", "保留")
    mem.set_context("k", "保留")
    mem.write_scratchpad("保留")
    before = mem.snapshot()
    with pytest.raises(InvalidSnapshot):
        mem.restore(snapshot)  # type: ignore[arg-type]
    assert mem.snapshot() == before

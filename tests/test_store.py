"""TranscriptStore and atomic writes: the seed's v2 format, v1 migration, agent history, concurrency."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from clawlet.sessions.store import (
    INTERRUPTED_NOTE,
    SUMMARY_PREFIX,
    InvalidSessionId,
    SessionNotFound,
    ToolCallRecord,
    TranscriptStore,
    validate_session_id,
)
from clawlet.storage import atomic_write_bytes, atomic_write_json, atomic_write_text


@pytest.fixture
def store(tmp_path: Path) -> TranscriptStore:
    return TranscriptStore(tmp_path / "sessions")


def test_the_file_is_the_indented_json_the_standard_library_writes(store: TranscriptStore) -> None:
    """The transcript is written by orjson (the standard library's indenting encoder is pure
    Python), byte for byte what ``json.dumps(..., ensure_ascii=False, indent=2)`` gives: Chinese,
    emoji, quotes, backslashes, control characters, line separators, timestamps, tool calls."""
    store.create("fmt", title='测试 "引号" \\ 😀')
    store.append("fmt", "user", "第一行\n第二行\t\u2028 \x01\x7f <b>&amp;</b>")
    store.append(
        "fmt", "assistant", "好的。", [{"tool": "terminal", "input": "echo 你好", "output": "你好\n"}]
    )
    store.mark_interrupted("fmt")  # no-op: the last message is the assistant's
    text = (store.directory / "fmt.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), ensure_ascii=False, indent=2) + "\n"
    assert json.loads(text)["messages"][0]["content"] == "第一行\n第二行\t\u2028 \x01\x7f <b>&amp;</b>"


def test_v2_round_trip_in_the_seed_format(store: TranscriptStore) -> None:
    before = time.time()
    session_id, created = store.create("abc", title="测试会话")
    assert session_id == "abc"
    store.append("abc", "user", "run: echo hi")
    store.append(
        "abc",
        "assistant",
        "Running `echo hi` in the terminal.",
        [{"tool": "terminal", "input": "echo hi", "output": "hi"}],
    )
    store.append("abc", "assistant", "[demo] `terminal` returned: hi")

    raw = json.loads(store.path_for("abc").read_text(encoding="utf-8"))
    assert list(raw) == ["title", "created_at", "updated_at", "compressed_context", "messages"]
    assert raw["title"] == "测试会话"
    assert raw["compressed_context"] == ""
    assert before <= raw["created_at"] <= raw["updated_at"] <= time.time()
    assert raw["created_at"] == created["created_at"]
    assert raw["messages"] == [
        {"role": "user", "content": "run: echo hi"},
        {
            "role": "assistant",
            "content": "Running `echo hi` in the terminal.",
            "tool_calls": [{"tool": "terminal", "input": "echo hi", "output": "hi"}],
        },
        {"role": "assistant", "content": "[demo] `terminal` returned: hi"},
    ]
    # Written readable: pretty-printed, Chinese not escaped.
    text = store.path_for("abc").read_text(encoding="utf-8")
    assert "测试会话" in text and text.startswith('{\n  "title"')
    assert store.load("abc") == raw

    # create() on an existing id returns it untouched.
    assert store.create("abc", title="other")[1]["title"] == "测试会话"


def test_rename_and_delete(store: TranscriptStore) -> None:
    store.create("r1")
    first = store.load("r1")["updated_at"]
    time.sleep(0.01)
    assert store.rename("r1", "新名字")["title"] == "新名字"
    assert store.load("r1")["updated_at"] > first
    with pytest.raises(SessionNotFound):
        store.rename("missing", "x")
    assert not store.exists("missing")
    store.delete("r1")
    assert not store.exists("r1")
    with pytest.raises(SessionNotFound):
        store.delete("r1")
    with pytest.raises(SessionNotFound):
        store.load("r1")


def test_v1_file_is_migrated_on_read_and_on_disk(store: TranscriptStore) -> None:
    store.directory.mkdir(parents=True)
    v1 = [
        {"role": "user", "content": "你好"},
        {
            "role": "assistant",
            "content": "Hi",
            "tool_calls": [{"tool": "terminal", "input": "ls", "output": "a"}],
        },
        {"role": "assistant", "content": "there"},
    ]
    path = store.directory / "old.json"
    path.write_text(json.dumps(v1, ensure_ascii=False), encoding="utf-8")
    mtime = path.stat().st_mtime

    data = store.load("old")
    assert data["messages"] == v1
    assert data["title"] == "" and data["compressed_context"] == ""
    assert data["created_at"] == pytest.approx(mtime)
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(on_disk, dict)
    assert on_disk["messages"] == v1
    assert set(on_disk) == {"title", "created_at", "updated_at", "compressed_context", "messages"}
    # Listing a v1 file works too, and it can be appended to afterwards.
    assert store.list_sessions()[0]["message_count"] == 3
    store.append("old", "user", "again")
    assert len(store.load_messages("old")) == 4


def test_tool_calls_keep_their_call_id_and_error_flag(store: TranscriptStore) -> None:
    session_id, _ = store.create()
    calls: list[ToolCallRecord] = [
        {"tool": "terminal", "input": "ls", "output": "a", "call_id": "c1", "is_error": False},
        {"tool": "terminal", "input": "mkfs", "output": "refused", "call_id": "c2", "is_error": True},
    ]
    store.append(session_id, "assistant", "Hi", calls)
    assert store.load(session_id)["messages"][-1]["tool_calls"] == calls
    path = store.directory / f"{session_id}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["messages"][-1]["tool_calls"][0].update(call_id=7, is_error="yes")
    path.write_text(json.dumps(data), encoding="utf-8")
    loaded = store.load(session_id)["messages"][-1]["tool_calls"][0]
    assert loaded["call_id"] == "7" and loaded["is_error"] is False


def test_v1_file_is_usable_through_every_entry_point(store: TranscriptStore) -> None:
    store.directory.mkdir(parents=True)
    (store.directory / "v1b.json").write_text(
        json.dumps([{"role": "user", "content": "q"}]), encoding="utf-8"
    )
    assert store.load_for_agent("v1b") == [{"role": "user", "content": "q"}]
    store.append("v1b", "assistant", "a")
    raw = json.loads((store.directory / "v1b.json").read_text(encoding="utf-8"))
    assert [m["content"] for m in raw["messages"]] == ["q", "a"]


def test_load_for_agent_merges_segments_and_puts_the_summary_first(store: TranscriptStore) -> None:
    store.create("ag")
    path = store.path_for("ag")
    data = json.loads(path.read_text(encoding="utf-8"))
    data["compressed_context"] = "用户叫小明，喜欢绿茶。"
    data["messages"] = [
        {"role": "user", "content": "run: ls"},
        {
            "role": "assistant",
            "content": "Running it.",
            "tool_calls": [{"tool": "terminal", "input": "ls", "output": "x"}],
        },
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "It printed x."},
        {"role": "system", "content": "ignored"},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    history = store.load_for_agent("ag")
    assert history == [
        {"role": "assistant", "content": f"{SUMMARY_PREFIX}\n用户叫小明，喜欢绿茶。"},
        {"role": "user", "content": "run: ls"},
        {"role": "assistant", "content": "Running it.\n\nIt printed x."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    assert history[0]["content"].startswith("[以下是之前对话的摘要]")
    # The stored segments themselves are untouched.
    assert len(store.load_messages("ag")) == 7
    assert store.load_for_agent("never-created") == []


def test_an_unanswered_user_message_gets_one_interrupted_marker(store: TranscriptStore) -> None:
    store.append("cut", "user", "first")
    store.append("cut", "assistant", "answer")
    assert store.mark_interrupted("cut") is False  # answered: nothing to mark
    store.append("cut", "user", "second")
    before = store.load("cut")["updated_at"]
    assert store.mark_interrupted("cut") is True
    assert store.mark_interrupted("cut") is False  # once
    data = store.load("cut")
    assert data["messages"][-1] == {"role": "assistant", "content": INTERRUPTED_NOTE, "interrupted": True}
    assert data["updated_at"] >= before
    # the model sees the note where the answer would be; the flag survives a rewrite
    assert store.load_for_agent("cut")[-2:] == [
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": INTERRUPTED_NOTE},
    ]
    store.rename("cut", "renamed")
    assert store.load("cut")["messages"][-1].get("interrupted") is True
    store.create("empty")
    assert store.mark_interrupted("empty") is False


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "../x",
        "..",
        "a/b",
        "a\\b",
        "x" * 129,
        ".hidden",
        "-flag",
        "a..b",
        "sp ace",
        "中文",
        "a\x00b",
        "a\nb",
    ],
)
def test_invalid_session_ids_are_rejected(store: TranscriptStore, bad: str) -> None:
    with pytest.raises(InvalidSessionId):
        validate_session_id(bad)
    with pytest.raises(InvalidSessionId):
        store.append(bad, "user", "x")
    with pytest.raises(InvalidSessionId):
        store.load(bad)
    assert not store.directory.exists() or list(store.directory.iterdir()) == []


@pytest.mark.parametrize("good", ["a", "abc-DEF_1.2:3", "x" * 128, "0" + "f" * 31])
def test_valid_session_ids(good: str) -> None:
    assert validate_session_id(good) == good


def test_list_sessions_newest_first_and_skips_junk(store: TranscriptStore) -> None:
    for session_id in ("one", "two", "three"):
        store.create(session_id, title=session_id)
        time.sleep(0.01)
    store.append("one", "user", "bump")
    (store.directory / "broken.json").write_text("{not json", encoding="utf-8")
    (store.directory / ".one.json.abc.tmp").write_text("{", encoding="utf-8")
    (store.directory / "notes.txt").write_text("x", encoding="utf-8")
    (store.directory / "scalar.json").write_text("42", encoding="utf-8")
    listed = store.list_sessions()
    assert [item["id"] for item in listed] == ["one", "three", "two"]
    assert listed[0] == {
        "id": "one",
        "title": "one",
        "created_at": listed[0]["created_at"],
        "updated_at": listed[0]["updated_at"],
        "message_count": 1,
    }
    assert TranscriptStore(store.directory / "missing").list_sessions() == []


def test_concurrent_appends_lose_nothing(store: TranscriptStore) -> None:
    threads_count, per_thread = 12, 15
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            for n in range(per_thread):
                store.append("shared", "user", f"{index}-{n}")
                store.append(f"own{index}", "assistant", f"{n}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    contents = [m["content"] for m in store.load_messages("shared")]
    assert len(contents) == threads_count * per_thread
    assert set(contents) == {f"{i}-{n}" for i in range(threads_count) for n in range(per_thread)}
    for i in range(threads_count):
        # Each thread's own messages keep their order.
        assert [c for c in contents if c.startswith(f"{i}-")] == [f"{i}-{n}" for n in range(per_thread)]
        assert [m["content"] for m in store.load_messages(f"own{i}")] == [str(n) for n in range(per_thread)]
    assert [p.name for p in store.directory.iterdir() if p.name.startswith(".")] == []


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "data.json"
    atomic_write_json(target, {"k": "值"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"k": "值"}
    assert target.read_text(encoding="utf-8") == '{\n  "k": "值"\n}\n'
    atomic_write_text(target, "replaced")
    assert target.read_text(encoding="utf-8") == "replaced"
    assert os.listdir(target.parent) == ["data.json"]


def test_failed_atomic_write_keeps_the_old_file_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "keep.json"
    atomic_write_json(target, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"v": object()})  # not serialisable: fails before any write
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert json.loads(target.read_text(encoding="utf-8")) == {"v": 1}
    assert os.listdir(tmp_path) == ["keep.json"]

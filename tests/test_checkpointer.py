"""``LocalCheckpointer``: LangGraph's conformance suite, retention, crash/corruption tolerance,
path safety, persistence across instances, and real graphs (restart + interrupt/resume)."""

from __future__ import annotations

import json
import logging
import operator
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from clawlet.engine.checkpointer import (
    CHECKPOINT_KEEP_COUNT,
    LocalCheckpointer,
    decode_name,
    encode_name,
)
from clawlet.testing.function_model import FunctionModel

# -- helpers -----------------------------------------------------------------------------------


def _config(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(
    values: dict[str, Any], versions: dict[str, Any], checkpoint_id: str | None = None
) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id or str(uuid6(clock_seq=-1))
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


def _put_chain(
    saver: LocalCheckpointer, thread_id: str, n: int, checkpoint_ns: str = "", with_writes: bool = False
) -> list[RunnableConfig]:
    """``n`` chained checkpoints (each the child of the previous), step i holding value i."""
    stored: list[RunnableConfig] = []
    parent: RunnableConfig | None = None
    for step in range(n):
        config = _config(thread_id, checkpoint_ns)
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        cp = _checkpoint({"n": step}, {"n": step + 1})
        parent = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, {"n": step + 1})
        if with_writes:
            saver.put_writes(parent, [("n", step * 10)], f"task-{step}")
        stored.append(parent)
    return stored


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _checkpoint_files(root: Path) -> list[Path]:
    return [p for p in _files(root) if p.name.endswith(".json") and not p.name.endswith(".writes.json")]


def _ids(tuples: list[CheckpointTuple]) -> list[str]:
    return [t.checkpoint["id"] for t in tuples]


# -- (1) the public conformance suite ------------------------------------------------------------


@pytest.mark.parametrize("keep", [CHECKPOINT_KEEP_COUNT, None], ids=["keep=10", "keep=None"])
async def test_langgraph_checkpoint_conformance_suite(
    keep: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    @checkpointer_test(name=f"LocalCheckpointer(keep={keep})")
    async def factory() -> AsyncIterator[LocalCheckpointer]:
        with tempfile.TemporaryDirectory() as directory:
            yield LocalCheckpointer(directory, keep=keep)

    report = await validate(factory)
    report.print_report()
    summary = {
        name: (r.detected, r.tests_passed, r.tests_failed, r.tests_skipped)
        for name, r in report.results.items()
    }
    with capsys.disabled():
        total = sum(r.tests_passed for r in report.results.values())
        print(f"\nconformance keep={keep}: {total} passed, {summary}")
    # every capability (base and extended) detected and exercised; none skipped, none failed
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    for name, result in report.results.items():
        assert result.detected, name
        assert result.tests_passed > 0 and result.tests_failed == 0 and result.tests_skipped == 0, (
            name,
            result.failures,
        )
    assert report.passed_all_base() and report.passed_all()
    assert report.conformance_level() == "FULL"
    assert sum(r.tests_passed for r in report.results.values()) >= 81  # 0.0.2 has 81 checks


async def test_conformance_suite_is_sensitive_to_retention(tmp_path: Path) -> None:
    """Sanity check that the suite really exercises the saver: keeping one checkpoint fails ``list``."""

    @checkpointer_test(name="LocalCheckpointer(keep=1)")
    async def factory() -> AsyncIterator[LocalCheckpointer]:
        with tempfile.TemporaryDirectory() as directory:
            yield LocalCheckpointer(directory, keep=1)

    report = await validate(factory, capabilities={"list"})
    assert report.results["list"].tests_failed > 0


# -- (2) retention ------------------------------------------------------------------------------


def test_retention_keeps_the_newest_ten(tmp_path: Path) -> None:
    saver = LocalCheckpointer(tmp_path)
    assert saver.keep == CHECKPOINT_KEEP_COUNT == 10
    stored = _put_chain(saver, "thread", 15, with_writes=True)
    ids = [c["configurable"]["checkpoint_id"] for c in stored]

    files = _checkpoint_files(tmp_path)
    assert len(files) == 10
    assert sorted(f.name.removesuffix(".json") for f in files) == ids[5:]  # file names sort like ids
    writes = [p for p in _files(tmp_path) if p.name.endswith(".writes.json")]
    assert sorted(p.name.removesuffix(".writes.json") for p in writes) == ids[5:]

    listed = list(saver.list(_config("thread")))
    assert _ids(listed) == list(reversed(ids[5:]))
    assert saver.get_tuple(_config("thread", checkpoint_id=ids[0])) is None
    latest = saver.get_tuple(_config("thread"))
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"n": 14}
    assert latest.pending_writes == [("task-14", "n", 140)]


def test_retention_is_per_namespace_and_optional(tmp_path: Path) -> None:
    saver = LocalCheckpointer(tmp_path / "a", keep=3)
    _put_chain(saver, "t", 5)
    _put_chain(saver, "t", 2, checkpoint_ns="child:1")
    assert len(list(saver.list(_config("t", "")))) == 3
    assert len(list(saver.list(_config("t", "child:1")))) == 2

    unlimited = LocalCheckpointer(tmp_path / "b", keep=None)
    _put_chain(unlimited, "t", 15)
    assert len(_checkpoint_files(tmp_path / "b")) == 15

    with pytest.raises(ValueError):
        LocalCheckpointer(tmp_path, keep=0)


def test_retention_is_skipped_for_delta_channel_threads(tmp_path: Path) -> None:
    """DeltaChannel (beta) rebuilds values from ancestors, so their checkpoints are never pruned."""
    saver = LocalCheckpointer(tmp_path, keep=2)
    parent = _config("t")
    for step in range(5):
        metadata: Any = {"step": step, "counters_since_delta_snapshot": {"messages": [step, step]}}
        parent = saver.put(parent, _checkpoint({}, {}), metadata, {})
    assert len(_checkpoint_files(tmp_path)) == 5


def test_unchanged_channels_missing_from_values_come_from_the_parent(tmp_path: Path) -> None:
    """A checkpoint may omit values of unchanged channels; each file still stores all of them."""
    saver = LocalCheckpointer(tmp_path, keep=1)
    first = saver.put(
        _config("t"), _checkpoint({"a": "a1", "b": "b1"}, {"a": 1, "b": 1}), {}, {"a": 1, "b": 1}
    )
    second_config = _config("t", checkpoint_id=first["configurable"]["checkpoint_id"])
    saver.put(second_config, _checkpoint({"a": "a2"}, {"a": 2, "b": 1}), {}, {"a": 2})
    # keep=1 deleted the parent, yet the newest checkpoint is complete
    assert len(_checkpoint_files(tmp_path)) == 1
    latest = saver.get_tuple(_config("t"))
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"a": "a2", "b": "b1"}


# -- (2) atomic writes, corrupt files -------------------------------------------------------------


def test_corrupt_and_half_written_files_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="clawlet.engine.checkpointer")
    saver = LocalCheckpointer(tmp_path)
    stored = _put_chain(saver, "t", 4, with_writes=True)
    ids = [c["configurable"]["checkpoint_id"] for c in stored]
    files = {p.name.removesuffix(".json"): p for p in _checkpoint_files(tmp_path)}

    newest = files[ids[3]]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # half-written
    files[ids[2]].write_text(json.dumps({"format": "something-else"}))  # valid JSON, not ours
    record = json.loads(files[ids[1]].read_text())
    record["channel_values"]["n"]["data"] = "!!not base64!!"
    files[ids[1]].write_text(json.dumps(record))
    writes_file = files[ids[0]].with_name(f"{ids[0]}.writes.json")
    writes_file.write_bytes(b"\x00\xff garbage")
    (files[ids[0]].parent / f".{ids[0]}.json.abc123.tmp").write_text('{"half": ')  # crash leftover

    latest = saver.get_tuple(_config("t"))  # falls back to the newest readable checkpoint
    assert latest is not None
    assert latest.checkpoint["id"] == ids[0]
    assert latest.checkpoint["channel_values"] == {"n": 0}
    assert latest.pending_writes == []  # its writes file is garbage
    assert _ids(list(saver.list(_config("t")))) == [ids[0]]
    assert list(saver.list(None)) != []
    assert saver.get_tuple(_config("t", checkpoint_id=ids[3])) is None
    assert len(saver.get_all_for_snapshot()["checkpoints"]) == 1

    messages = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for checkpoint_id in ids[1:]:
        assert checkpoint_id in messages
    assert "writes" in messages

    # writing still works on top of the damage
    saver.put(_config("t", checkpoint_id=ids[0]), _checkpoint({"n": 99}, {"n": 99}), {"step": 9}, {"n": 99})
    latest = saver.get_tuple(_config("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"n": 99}


def test_a_failed_write_leaves_the_previous_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saver = LocalCheckpointer(tmp_path)
    (first,) = _put_chain(saver, "t", 1)
    before = sorted(p.name for p in tmp_path.rglob("*"))

    def crash(src: Any, _dst: Any, **_dir_fds: Any) -> None:  # atomic writes rename relative to a dir fd
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        saver.put(first, _checkpoint({"n": 1}, {"n": 2}), {"step": 1}, {"n": 2})
    with pytest.raises(OSError, match="disk full"):
        saver.put_writes(first, [("n", 5)], "task")
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no partial or temp files
    latest = saver.get_tuple(_config("t"))
    assert latest is not None
    assert latest.checkpoint["id"] == first["configurable"]["checkpoint_id"]
    assert latest.pending_writes == []


# -- (2) path safety -----------------------------------------------------------------------------

WEIRD_IDS = [
    "../x",
    "a/b",
    "..",
    ".",
    "",
    "/etc/passwd",
    "..\\..\\windows",
    "会话/一",
    "A",
    "a",
    "%2F",
    "x" * 1000,
    "长" * 300,
    "nul\x00byte",
    "~tilde",
]


@pytest.mark.parametrize("value", WEIRD_IDS)
def test_encode_name_is_safe_and_reversible(value: str) -> None:
    name = encode_name(value)
    assert "/" not in name and "\\" not in name and "\x00" not in name and "." not in name
    assert name not in ("", ".", "..") or value == ""
    assert len(name.encode()) <= 200
    if len(value) < 40:
        assert decode_name(name) == value
    assert len({encode_name(v) for v in WEIRD_IDS}) == len(WEIRD_IDS)  # injective


def test_weird_thread_ids_namespaces_and_checkpoint_ids_stay_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    saver = LocalCheckpointer(root)
    for index, thread_id in enumerate(WEIRD_IDS):
        ns = WEIRD_IDS[-1 - index]
        checkpoint_id = WEIRD_IDS[(index + 3) % len(WEIRD_IDS)] or "empty"
        config = saver.put(
            _config(thread_id, ns),
            _checkpoint({"who": thread_id}, {"who": 1}, checkpoint_id=checkpoint_id),
            {"step": index},
            {"who": 1},
        )
        saver.put_writes(config, [("who", ns)], "task")
        got = saver.get_tuple(_config(thread_id, ns, checkpoint_id))
        assert got is not None, (thread_id, ns, checkpoint_id)
        assert got.checkpoint["channel_values"] == {"who": thread_id}
        assert got.config["configurable"] == {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
        assert got.pending_writes == [("task", "who", ns)]

    resolved_root = root.resolve()
    for path in tmp_path.rglob("*"):
        assert path.resolve().is_relative_to(resolved_root), path
        assert len(path.name.encode()) <= 255
    assert not (tmp_path / "x").exists() and not (tmp_path / "etc").exists()
    assert len(list(root.iterdir())) == len(WEIRD_IDS)  # one directory per thread, "A" != "a"
    # listing every thread recovers the exact ids, hashed (long) names included
    assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)) == sorted(WEIRD_IDS)

    saver.delete_thread("../x")
    assert saver.get_tuple(_config("../x", WEIRD_IDS[-1])) is None
    assert saver.get_tuple(_config("a/b", WEIRD_IDS[-2])) is not None

    # dropping every thread but one (a session process after each turn) reads no checkpoint
    keep = WEIRD_IDS[2]
    assert saver.delete_other_threads(keep) == len(WEIRD_IDS) - 2  # "../x" is gone already
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == [keep]
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == [saver.thread_dir(keep).name]


# -- (2) persistence, snapshot -------------------------------------------------------------------


async def test_a_new_instance_on_the_same_directory_sees_everything(tmp_path: Path) -> None:
    first = LocalCheckpointer(tmp_path)
    stored = _put_chain(first, "t", 3, with_writes=True)
    await first.aput_writes(stored[-1], [("__interrupt__", {"ask": "?"})], "task-x")

    second = LocalCheckpointer(tmp_path)
    assert [t async for t in second.alist(_config("t"))] == list(first.list(_config("t")))
    latest = await second.aget_tuple(_config("t"))
    assert latest is not None
    assert latest.checkpoint["id"] == stored[-1]["configurable"]["checkpoint_id"]
    assert latest.parent_config == stored[-2]
    assert latest.pending_writes == [("task-2", "n", 20), ("task-x", "__interrupt__", {"ask": "?"})]


def test_snapshot_is_json_safe_and_restores_elsewhere(tmp_path: Path) -> None:
    saver = LocalCheckpointer(tmp_path / "a")
    _put_chain(saver, "t1", 3, with_writes=True)
    _put_chain(saver, "t1", 2, checkpoint_ns="sub:1")
    _put_chain(saver, "会话", 1)
    snapshot = saver.get_all_for_snapshot()
    wire = json.loads(json.dumps(snapshot))  # survives a JSON round trip (the sync to the control plane)
    assert {(e["thread_id"], e["checkpoint_ns"]) for e in wire["checkpoints"]} == {
        ("t1", ""),
        ("t1", "sub:1"),
        ("会话", ""),
    }

    other = LocalCheckpointer(tmp_path / "b")
    assert other.restore_snapshot(wire) == 3
    for thread_id, ns in (("t1", ""), ("t1", "sub:1"), ("会话", "")):
        original = saver.get_tuple(_config(thread_id, ns))
        restored = other.get_tuple(_config(thread_id, ns))
        assert restored is not None and original is not None
        assert restored.checkpoint == original.checkpoint
        assert restored.metadata == original.metadata
        assert restored.pending_writes == original.pending_writes

    with pytest.raises(ValueError):
        other.restore_snapshot({"format": "nope"})


# -- (3) real LangGraph graphs -------------------------------------------------------------------


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int


def _three_step_graph() -> StateGraph[Steps]:
    def first(state: Steps) -> dict[str, Any]:
        return {"log": ["first"], "count": state["count"] + 1}

    def second(state: Steps) -> dict[str, Any]:
        return {"log": ["second"], "count": state["count"] + 1}

    def third(state: Steps) -> dict[str, Any]:
        return {"log": [f"third@{state['count']}"], "count": state["count"] + 1}

    builder = StateGraph(Steps)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_node("third", third)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", "third")
    builder.add_edge("third", END)
    return builder


@pytest.mark.parametrize("keep", [CHECKPOINT_KEEP_COUNT, 2])
async def test_graph_state_survives_a_restart(tmp_path: Path, keep: int) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "session-1"}}
    graph = _three_step_graph().compile(checkpointer=LocalCheckpointer(tmp_path, keep=keep))
    result = await graph.ainvoke({"log": ["start"], "count": 0}, config)
    assert result == {"log": ["start", "first", "second", "third@2"], "count": 3}

    # a new process: a new saver instance on the same directory
    restarted = _three_step_graph().compile(checkpointer=LocalCheckpointer(tmp_path, keep=keep))
    state = await restarted.aget_state(config)
    assert state.values == result and state.next == ()
    result = await restarted.ainvoke({"log": ["again"], "count": 10}, config)
    assert result["log"] == ["start", "first", "second", "third@2", "again", "first", "second", "third@12"]
    assert result["count"] == 13
    history = [s async for s in restarted.aget_state_history(config)]
    assert len(history) == min(keep, 10)  # two runs made 10 checkpoints
    assert len(_checkpoint_files(tmp_path)) == min(keep, 10)


class Approval(TypedDict, total=False):
    request: str
    answer: str
    done: str


def test_interrupt_and_resume_after_a_restart(tmp_path: Path) -> None:
    calls: list[str] = []

    def build(saver: LocalCheckpointer) -> Any:
        def ask(state: Approval) -> dict[str, Any]:
            calls.append("ask")  # side effect before interrupt(): runs again on resume
            answer = interrupt({"question": f"approve {state['request']}?"})
            return {"answer": answer}

        def finish(state: Approval) -> dict[str, Any]:
            return {"done": f"{state['request']}: {state['answer']}"}

        builder = StateGraph(Approval)
        builder.add_node("ask", ask)
        builder.add_node("finish", finish)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", "finish")
        builder.add_edge("finish", END)
        return builder.compile(checkpointer=saver)

    config: RunnableConfig = {"configurable": {"thread_id": "approval"}}
    graph = build(LocalCheckpointer(tmp_path))
    paused = graph.invoke({"request": "deploy"}, config)
    assert calls == ["ask"]
    (pending,) = paused["__interrupt__"]
    assert pending.value == {"question": "approve deploy?"}

    restarted = build(LocalCheckpointer(tmp_path))
    state = restarted.get_state(config)
    assert state.next == ("ask",)
    assert state.interrupts[0].value == {"question": "approve deploy?"}

    result = restarted.invoke(Command(resume="yes"), config)
    assert result == {"request": "deploy", "answer": "yes", "done": "deploy: yes"}
    assert calls == ["ask", "ask"]  # the interrupted node re-ran from its start
    assert restarted.get_state(config).next == ()


async def test_create_agent_with_the_demo_model_continues_after_a_restart(tmp_path: Path) -> None:
    from langchain.agents import create_agent

    from clawlet.llm.demo import DemoChatModel

    config: RunnableConfig = {"configurable": {"thread_id": "chat"}}
    agent = create_agent(DemoChatModel(), tools=[], checkpointer=LocalCheckpointer(tmp_path))
    await agent.ainvoke({"messages": [HumanMessage("hello")]}, config)

    restarted = create_agent(DemoChatModel(), tools=[], checkpointer=LocalCheckpointer(tmp_path))
    result = await restarted.ainvoke({"messages": [HumanMessage("second turn")]}, config)
    messages = result["messages"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    assert [messages[0].content, messages[2].content] == ["hello", "second turn"]
    assert len(_checkpoint_files(tmp_path)) <= CHECKPOINT_KEEP_COUNT


async def test_concurrent_writers_of_one_thread_are_serialised(tmp_path: Path) -> None:
    import asyncio

    saver = LocalCheckpointer(tmp_path)
    (config,) = _put_chain(saver, "t", 1)
    # 30 tasks writing to the same checkpoint at once: a read-modify-write race would lose some
    await asyncio.gather(*(saver.aput_writes(config, [("ch", i)], f"task-{i:02}") for i in range(30)))
    latest = await saver.aget_tuple(_config("t"))
    assert latest is not None and latest.pending_writes is not None
    assert sorted(w[2] for w in latest.pending_writes) == list(range(30))

    # concurrent puts on one thread and on others: every thread ends with its newest 10
    async def chain(thread_id: str) -> None:
        parent: RunnableConfig = _config(thread_id)
        for step in range(12):
            cp = _checkpoint({"n": step}, {"n": step + 1})
            parent = await saver.aput(parent, cp, {"step": step}, {"n": step + 1})

    await asyncio.gather(*(chain(f"c{i}") for i in range(4)))
    for i in range(4):
        listed = [t async for t in saver.alist(_config(f"c{i}"))]
        assert [t.metadata["step"] for t in listed] == list(range(11, 1, -1))

    nameless = _checkpoint({}, {})
    nameless["id"] = ""
    with pytest.raises(ValueError):
        saver.put(_config("t"), nameless, {}, {})


class _CountingCheckpointer(LocalCheckpointer):
    """A checkpointer that counts the checkpoints it is asked to store."""

    puts = 0

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        self.puts += 1
        return super().put(*args, **kwargs)


async def test_a_session_process_turn_is_checkpointed_once_when_it_ends(tmp_path: Path) -> None:
    """The engine of a session process saves one checkpoint per turn (its final state), not one
    per LangGraph step: per-step saves cost several times the turn's own CPU."""
    from clawlet.config import RuntimeConfig, Settings
    from clawlet.execplane.session_child import SessionEngine
    from clawlet.memory.stores import KnowledgeBase, MemoryIndex

    settings = Settings(home=tmp_path / "home")
    saver = _CountingCheckpointer(tmp_path / "checkpoints")
    engine = SessionEngine(
        settings,
        RuntimeConfig(settings.paths.config_file),
        MemoryIndex(settings.paths, None),
        KnowledgeBase(settings.paths, None),
        checkpointer=saver,
        model=FunctionModel(lambda messages, info: f"You said {messages[-1].text}"),
    )
    engine.thread_id = "s1:turn-1"
    text = "".join([getattr(event, "text", "") async for event in engine.stream("hello there", [])])
    assert text == "You said hello there"
    assert saver.puts == 1
    newest = saver.get_tuple({"configurable": {"thread_id": "s1:turn-1"}})
    assert newest is not None
    messages = newest.checkpoint["channel_values"]["messages"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage]
    assert messages[-1].text == text


async def test_a_turn_without_a_checkpointer_asks_for_no_checkpoints(tmp_path: Path) -> None:
    """Local mode's plain agent has no checkpointer: LangGraph is given no durability option, which
    it would warn about on every turn."""
    import warnings

    from clawlet.config import RuntimeConfig, Settings
    from clawlet.engine.agent import AgentEngine
    from clawlet.memory.stores import KnowledgeBase, MemoryIndex

    settings = Settings(home=tmp_path / "home")
    engine = AgentEngine(
        settings,
        RuntimeConfig(settings.paths.config_file),
        MemoryIndex(settings.paths, None),
        KnowledgeBase(settings.paths, None),
        model=FunctionModel(lambda messages, info: f"You said {messages[-1].text}"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = "".join([getattr(event, "text", "") async for event in engine.stream("hello there", [])])
    assert text == "You said hello there"
    assert not [w for w in caught if "durability" in str(w.message)], [str(w.message) for w in caught]

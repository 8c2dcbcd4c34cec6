"""A turn that may pause writes its graph state only if it pauses (issue 17): a workbench turn
that finishes writes no checkpoint and clears nothing through a worker thread; one that pauses
has its state on disk before the pause is reported, and continues from it.

A real server (the app on uvicorn, real files, the demo model); the saver's writes are counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.runnables import RunnableConfig

from clawlet.engine.checkpointer import LocalCheckpointer
from clawlet.engine.held_checkpoints import HeldCheckpointer
from clawlet.runtime.approval_store import ApprovalStore
from tests.conftest import LiveServer, parse_sse
from tests.test_checkpointer import _checkpoint, _config


def _chat(server: LiveServer, session_id: str, message: str) -> list[tuple[str, dict[str, Any]]]:
    response = httpx.post(
        f"{server.url}/api/chat", json={"message": message, "session_id": session_id}, timeout=60
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every checkpoint and pending-writes file the savers write, and every ``ApprovalStore.clear``."""
    seen: list[str] = []
    put, put_writes, clear = LocalCheckpointer.put, LocalCheckpointer.put_writes, ApprovalStore.clear

    def counted_put(self: LocalCheckpointer, *args: Any, **kwargs: Any) -> Any:
        seen.append("put")
        return put(self, *args, **kwargs)

    def counted_put_writes(self: LocalCheckpointer, *args: Any, **kwargs: Any) -> None:
        seen.append("put_writes")
        put_writes(self, *args, **kwargs)

    def counted_clear(self: ApprovalStore, *args: Any, **kwargs: Any) -> Any:
        seen.append("clear")
        return clear(self, *args, **kwargs)

    monkeypatch.setattr(LocalCheckpointer, "put", counted_put)
    monkeypatch.setattr(LocalCheckpointer, "put_writes", counted_put_writes)
    monkeypatch.setattr(ApprovalStore, "clear", counted_clear)
    return seen


def test_a_finished_workbench_turn_writes_no_checkpoint(server: LiveServer, writes: list[str]) -> None:
    events = _chat(server, "plain", "hello there")
    assert [name for name, _ in events][-2:] == ["done", "title"]
    assert writes == []  # before: one checkpoint written, then the thread deleted by clear()
    assert not (server.settings.paths.sessions / "checkpoints" / "t_plain").exists()


def test_a_paused_turn_is_saved_and_continues(server: LiveServer, writes: list[str]) -> None:
    events = _chat(server, "asks", "ask: which colour?")
    question = next(data for name, data in events if name == "question")
    assert [name for name, _ in events][-1] == "waiting"
    assert "put" in writes and "clear" not in writes
    assert (server.settings.paths.sessions / "checkpoints" / "t_asks").is_dir()
    writes.clear()
    response = httpx.post(
        f"{server.url}/api/sessions/asks/approvals/{question['approval_id']}",
        json={"decision": "answer", "message": "green"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    done = next(data for name, data in parse_sse(response.text) if name == "done")
    assert done["content"] == "[demo] You answered: green"
    # the continuation finished: nothing new written, the paused state cleared
    assert writes == ["clear"]
    assert not (server.settings.paths.sessions / "checkpoints" / "t_asks").exists()


async def test_held_writes_are_written_by_a_read_or_a_commit_and_dropped_by_discard(tmp_path: Path) -> None:
    saver = HeldCheckpointer(tmp_path / "checkpoints")
    saver.hold("t")
    stored = await _aput_chain(saver, "t", 2)
    assert not saver.thread_dir("t").exists()  # held: nothing on disk
    found = await saver.aget_tuple(_config("t"))  # a read writes what is held first
    assert found is not None and found.config == stored[-1]
    assert found.pending_writes == [("task-1", "n", 10)]
    assert len(list(saver.list(_config("t")))) == 2

    saver.hold("u")
    await _aput_chain(saver, "u", 1)
    saver.discard("u")
    assert await saver.aget_tuple(_config("u")) is None and not saver.thread_dir("u").exists()

    saver.hold("v")
    last = (await _aput_chain(saver, "v", 1))[-1]
    await saver.commit("v")
    found = await saver.aget_tuple(last)
    assert found is not None and found.pending_writes == [("task-0", "n", 0)]

    await _aput_chain(saver, "w", 1)  # a thread not held is written at once
    assert saver.thread_dir("w").is_dir()


async def _aput_chain(saver: LocalCheckpointer, thread_id: str, n: int) -> list[RunnableConfig]:
    """``n`` chained checkpoints with one pending write each, through ``aput`` / ``aput_writes``
    (what :func:`tests.test_checkpointer._put_chain` does through the sync methods)."""
    stored: list[RunnableConfig] = []
    config = _config(thread_id)
    for step in range(n):
        cp = _checkpoint({"n": step}, {"n": step + 1})
        config = await saver.aput(
            config, cp, {"source": "loop", "step": step, "parents": {}}, {"n": step + 1}
        )
        await saver.aput_writes(config, [("n", step * 10)], f"task-{step}")
        stored.append(config)
    return stored

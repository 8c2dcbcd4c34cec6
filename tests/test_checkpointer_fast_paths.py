"""A workbench turn in a thread with no checkpoint (every fresh turn: the turn deletes its session's
thread first) reads and deletes nothing through a worker thread: one ``stat`` says there is nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clawlet.engine.checkpointer import LocalCheckpointer
from tests.test_checkpointer import _config, _put_chain


async def test_a_missing_thread_is_neither_read_nor_deleted_by_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = LocalCheckpointer(tmp_path / "checkpoints")
    calls: list[str] = []
    real_get, real_delete = saver.get_tuple, saver.delete_thread

    def get_tuple(config: Any) -> Any:
        calls.append("get")
        return real_get(config)

    def delete_thread(thread_id: str) -> None:
        calls.append("delete")
        real_delete(thread_id)

    monkeypatch.setattr(saver, "get_tuple", get_tuple)
    monkeypatch.setattr(saver, "delete_thread", delete_thread)
    await saver.adelete_thread("fresh")
    assert await saver.aget_tuple(_config("fresh")) is None
    assert calls == []

    stored = _put_chain(saver, "used", 2)
    found = await saver.aget_tuple(_config("used"))
    assert (
        found is not None
        and found.config["configurable"]["checkpoint_id"] == (stored[-1]["configurable"]["checkpoint_id"])
    )
    await saver.adelete_thread("used")
    assert calls == ["get", "delete"]
    assert await saver.aget_tuple(_config("used")) is None

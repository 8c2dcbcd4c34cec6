"""``HeldCheckpointer``: the saver of turns that may pause, which writes a turn's state only if it
paused.

A turn that may pause (a workbench or gateway turn that can ask, a turn with client tools) runs
its graph on a :class:`~clawlet.engine.checkpointer.LocalCheckpointer` with LangGraph's ``exit``
durability: one checkpoint (and its pending writes) when the run ends. Only a turn that paused is
ever continued from it; a turn that finished, failed or was cancelled has its thread deleted right
after (``ApprovalStore.clear``). Writing that state (the conversation serialised, two ``fsync``
calls, a worker thread, a file lock) to delete it right after cost a workbench turn ~3 ms of CPU.

So while a turn :meth:`holds <HeldCheckpointer.hold>` its thread, ``aput`` and ``aput_writes`` keep
the calls in memory; the turn then either :meth:`commits <HeldCheckpointer.commit>` them (it paused:
they are written in order, exactly as LangGraph made them, before the pause is reported) or
:meth:`discards <HeldCheckpointer.discard>` them (it ended). A read of a thread with held writes
writes them first, so no reader ever sees older state than before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

from clawlet.engine.checkpointer import LocalCheckpointer

Write = Callable[[], object]


class HeldCheckpointer(LocalCheckpointer):
    """A :class:`LocalCheckpointer` whose async writes to a held thread wait for the turn's word."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[str, list[Write]] = {}
        self._held_lock = threading.Lock()

    def hold(self, thread_id: str) -> None:
        """Keep the async writes to ``thread_id`` in memory until :meth:`commit` or :meth:`discard`
        (a new run's: whatever an earlier run of the thread left held is dropped)."""
        with self._held_lock:
            self._held[str(thread_id)] = []

    def discard(self, thread_id: str) -> None:
        """Drop what was held for ``thread_id`` (nothing of it is written) and stop holding it."""
        with self._held_lock:
            self._held.pop(str(thread_id), None)

    async def commit(self, thread_id: str) -> None:
        """Write what was held for ``thread_id``, in order, and stop holding it."""
        writes = self._take(str(thread_id))
        if writes:
            await asyncio.to_thread(_run_all, writes)

    def _take(self, thread_id: str) -> list[Write]:
        with self._held_lock:
            return self._held.pop(thread_id, None) or []

    def _keep(self, config: RunnableConfig, write: Write) -> bool:
        """Hold ``write`` if ``config``'s thread is held (True), else leave it to the caller."""
        with self._held_lock:
            held = self._held.get(str(config["configurable"]["thread_id"]))
            if held is None:
                return False
            held.append(write)
            return True

    def _holds_writes(self, config: RunnableConfig) -> bool:
        with self._held_lock:
            return bool(self._held.get(str(config["configurable"]["thread_id"])))

    def _write_held(self, thread_id: object | None) -> None:
        """Before a read: write what is held for ``thread_id`` (``None``: every thread); the thread
        stays held."""
        writes: list[Write] = []
        with self._held_lock:
            for name, held in self._held.items():
                if thread_id is None or name == str(thread_id):
                    writes += held
                    held.clear()
        _run_all(writes)

    # -- LangGraph's async writes ----------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if not checkpoint["id"]:
            raise ValueError("a checkpoint needs a non-empty id")
        if not self._keep(config, lambda: self.put(config, checkpoint, metadata, new_versions)):
            return await super().aput(config, checkpoint, metadata, new_versions)
        configurable = config["configurable"]
        return {
            "configurable": {
                "thread_id": str(configurable["thread_id"]),
                "checkpoint_ns": configurable.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        kept = list(writes)
        if not self._keep(config, lambda: self.put_writes(config, kept, task_id, task_path)):
            await super().aput_writes(config, kept, task_id, task_path)

    # -- reads see what is held ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._write_held(config["configurable"]["thread_id"])
        return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        # a generator: the held writes are made where the listing is read (a worker thread, in alist)
        self._write_held(None if config is None else config["configurable"].get("thread_id"))
        yield from super().list(config, filter=filter, before=before, limit=limit)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self._holds_writes(config):  # held writes: no "nothing on disk" shortcut
            return await asyncio.to_thread(self.get_tuple, config)
        return await super().aget_tuple(config)


def _run_all(writes: list[Write]) -> None:
    for write in writes:
        write()

"""Engine workers: ``clawlet serve`` runs its agent turns on every core (``CLAWLET_ENGINE_WORKERS``).

**Process model.** With ``engine_workers = N > 0`` the server starts N worker processes
(``<python> -m clawlet.runtime.engine_worker``, each a fresh interpreter with the secrets out of
its environment, talking JSON lines over its stdin and stdout, see that module) and runs every
``engine`` turn on the one with the fewest turns running. The server keeps everything else: the
HTTP, SSE and WebSocket edges, the one ``SessionManager`` per workspace (one turn per session,
transcripts, approvals, titles), the inbox. So every guarantee of a single process holds as it is:
no session, subscriber or approval is split across processes; a worker only turns ``(message,
history, context, pause point)`` into events, and a paused turn is continued from its checkpoint
files by whichever worker gets the decision. What moves off the server's core is the agent itself
(LangGraph, LangChain, parsing the model's stream, the tools).

A worker that dies fails the turns it was running (``RunFailed`` naming its exit code) and is
started again for the next turn. ``N = 0`` (the default) runs the engine in the server's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from clawlet.engine.tool_approvals import Decision
from clawlet.events import Event, Pending, event_from_json
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage
from clawlet.runtime.engine_adapter import EngineHandle
from clawlet.runtime.process_pipe import LINE_LIMIT, encode_line, encode_message
from clawlet.secret_env import held_secrets

log = logging.getLogger(__name__)

WORKER_MODULE = "clawlet.runtime.engine_worker"
START_TIMEOUT = 120.0
"""Seconds a worker may take from spawn to ``ready`` (importing LangChain on a loaded machine)."""


def engine_spec(engine: EngineHandle) -> dict[str, Any]:
    """What a worker builds a workspace's engine from: the settings (API keys included: they go over
    the pipe only), the demo model's delay and the parent config of a named workspace's policies."""
    parent = engine.runtime_config.parent
    return {
        "settings": engine.settings.model_dump(mode="json"),
        "demo_token_delay": engine.demo_token_delay,
        "parent_config": None if parent is None else str(parent.path),
    }


class EngineWorkerFailed(RuntimeError):
    """The worker running a turn could not start or died during it."""


@dataclass
class _Worker:
    """One worker process and the turns it runs (their event queues)."""

    process: asyncio.subprocess.Process
    turns: dict[str, asyncio.Queue[dict[str, Any]]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    alive: bool = True


class EnginePool:
    """``size`` engine worker processes, started on first use (or by :meth:`start`); each builds
    the engine of ``warm`` (the server's default home) before it says it is ready."""

    def __init__(self, size: int, *, python: str = sys.executable) -> None:
        self.size = size
        self.warm: dict[str, Any] | None = None
        """The :func:`engine_spec` of the engine each worker builds before it is ready."""
        self.python = python
        self._workers: list[_Worker | None] = [None] * size
        self._starting: list[asyncio.Task[_Worker] | None] = [None] * size
        self._ids = itertools.count()
        self._rotation = itertools.count()
        self.starts = 0

    async def start(self) -> None:
        """Start every worker now (so the first turns do not wait for LangChain's imports)."""
        await asyncio.gather(*(self._worker(slot) for slot in range(self.size)))

    async def _worker(self, slot: int) -> _Worker:
        worker = self._workers[slot]
        if worker is not None and worker.alive:
            return worker
        starting = self._starting[slot]
        if starting is None or (starting.done() and (starting.cancelled() or starting.exception())):
            starting = self._starting[slot] = asyncio.create_task(self._spawn(), name=f"engine-worker-{slot}")
        worker = await asyncio.shield(starting)
        self._workers[slot] = worker
        if not worker.alive:  # died since it started: once more
            self._starting[slot] = None
            return await self._worker(slot)
        return worker

    async def _spawn(self) -> _Worker:
        from clawlet.runtime.process_pipe import child_environment

        process = await asyncio.create_subprocess_exec(
            self.python,
            "-m",
            WORKER_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=child_environment(),
            start_new_session=True,
            limit=LINE_LIMIT,
        )
        assert process.stdin is not None and process.stdout is not None
        self.starts += 1
        try:
            init = {"type": "init", "held_secrets": dict(held_secrets()), "warm": self.warm}
            process.stdin.write(encode_line(init))
            raw = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT)
            ready = json.loads(raw) if raw else None
            if not isinstance(ready, dict) or ready.get("type") != "ready":
                raise EngineWorkerFailed(f"an engine worker did not start (exit code {await process.wait()})")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        worker = _Worker(process)
        worker.reader = asyncio.create_task(self._read(worker), name=f"engine-worker-{process.pid}")
        log.info("engine worker %d ready", process.pid)
        return worker

    async def _read(self, worker: _Worker) -> None:
        stdout = worker.process.stdout
        assert stdout is not None
        try:
            while raw := await stdout.readline():
                line = json.loads(raw)
                queue = worker.turns.get(str(line.get("turn")))
                if queue is not None:
                    queue.put_nowait(line)
        except (ValueError, ConnectionError) as exc:
            log.error("engine worker %d: a bad line (%s); stopping it", worker.process.pid, exc)
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
        finally:
            worker.alive = False
            code = await worker.process.wait()
            for queue in worker.turns.values():
                queue.put_nowait(
                    {"type": "end", "error": f"the engine worker exited (code {code})", "lost": True}
                )
            if code:
                log.error("engine worker %d exited with code %d", worker.process.pid, code)

    async def run(self, engine: EngineHandle, message: UserMessage) -> AsyncGenerator[Event, None]:
        """The events of one turn, run on the least busy worker; raises :class:`EngineWorkerFailed`
        (or the turn's own error, as its text) when the turn fails. Closing the iterator early
        cancels the turn in the worker."""
        # the least busy worker; among equally busy ones, the next in turn (so a paused turn is
        # usually continued by another worker than the one that paused it: nothing depends on it)
        first = next(self._rotation)
        order = [(first + step) % self.size for step in range(self.size)]
        slot = min(order, key=self._load)
        worker = await self._worker(slot)
        turn_id = str(next(self._ids))
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        worker.turns[turn_id] = queue
        ended = False
        try:
            line = encode_message(turn_id, message)
            line.update(engine_spec(engine))
            assert worker.process.stdin is not None
            worker.process.stdin.write(encode_line(line))
            while True:
                item = await queue.get()
                if item["type"] == "event":
                    yield event_from_json(item["event"])
                    continue
                ended = True
                if item.get("error"):
                    raise EngineWorkerFailed(item["error"])
                return
        finally:
            worker.turns.pop(turn_id, None)
            if not ended and worker.alive and worker.process.stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    worker.process.stdin.write(encode_line({"type": "cancel", "turn": turn_id}))

    def workers(self) -> list[asyncio.subprocess.Process]:
        """The worker processes running now."""
        return [worker.process for worker in self._workers if worker is not None and worker.alive]

    def _load(self, slot: int) -> int:
        worker = self._workers[slot]
        return len(worker.turns) if worker is not None and worker.alive else 0

    async def stop(self) -> None:
        """Close every worker's stdin (it cancels its turns and exits) and reap it."""
        for task in self._starting:
            if task is not None and not task.done():
                task.cancel()
        workers = [worker for worker in self._workers if worker is not None]
        for worker in workers:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        for worker in workers:
            try:
                await asyncio.wait_for(worker.process.wait(), 10)
            except TimeoutError:
                worker.process.kill()
            if worker.reader is not None:
                await asyncio.gather(worker.reader, return_exceptions=True)


class PooledEngineAdapter(RuntimeAdapter):
    """The ``engine`` runtime of one session when turns run on engine workers; the workspace's own
    engine (built in the server when first needed) checks decisions against its tools' schemas."""

    supports_approvals = True

    def __init__(self, pool: EnginePool, engine: EngineHandle) -> None:
        self.pool = pool
        self.engine = engine
        self.session_id: str | None = None
        self.turns = 0
        self.running = False

    async def start(self, session_id: str, config: RunConfig) -> None:
        self.session_id = session_id

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        self.turns += 1
        self.running = True
        events = self.pool.run(self.engine, data)
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        finally:
            self.running = False

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        return self.engine.get().check_decision(pending, decision)

    async def cancel(self) -> None:
        return None  # cancelling the task iterating send_message() closes the turn in the worker

    async def stop(self) -> None:
        self.session_id = None

    def get_snapshot(self) -> dict[str, Any]:
        return {
            "runtime_type": "engine",
            "session_id": self.session_id,
            "turns": self.turns,
            "running": self.running,
        }

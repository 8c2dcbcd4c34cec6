"""``TaskExecutor``: runs a task's messages in the background and records what comes back.

The HTTP call that creates a task (or sends a follow-up) returns at once; the executor moves the
task to ``running``, hands the message to the backend, and turns the outcome into an agent message
plus a status: a reply → ``completed``, an error → ``failed`` (the message says why), an abort →
``cancelled``, a run that paused for the user → ``waiting`` (the question is the agent's message and
the Task JSON's ``waitingFor`` lists what it waits for; :meth:`TaskExecutor.resume` continues it).
Every change is broadcast as ``message.created`` / ``task.updated``; while a reply streams,
``message.delta`` carries its text so far (at most a few times a second).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import sqlalchemy.exc

from clawlet.engine.tool_approvals import Decision
from clawlet.events import Pending
from clawlet.inbox.backends import ExecutionBackend, Outcome, ProgressCallback
from clawlet.inbox.broadcaster import EventBroadcaster
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task
from clawlet.inbox.repository import InboxRepository, TaskNotFound
from clawlet.inbox.states import InvalidTransition, TaskStatus
from clawlet.inbox.waiting import pending_json, waiting_message

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.25
DEFAULT_MAX_RUNNING = 8
SHUTDOWN_GRACE = 5.0
RESTART_MESSAGE = (
    "clawlet stopped while this task was running, so its reply was lost. Send a message to try again."
)


def now_ms() -> int:
    return int(time.time() * 1000)


Work = Callable[[Task, ProgressCallback], Awaitable[Outcome]]
"""One run of a task on the backend: a new message, or a paused run continued."""


class TaskExecutor:
    def __init__(
        self,
        repository: InboxRepository,
        broadcaster: EventBroadcaster,
        backend: ExecutionBackend,
        clock: Callable[[], int] = now_ms,
        max_running: int = DEFAULT_MAX_RUNNING,
    ) -> None:
        self.repository = repository
        self.broadcaster = broadcaster
        self.backend = backend
        self.clock = clock
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_running)
        self._holding: set[str] = set()  # tasks whose run has a slot (the others are queued)
        self._stopping = False

    def is_running(self, task_id: str) -> bool:
        return task_id in self._runs

    def start(self, task_id: str, content: str, message_id: str, *, from_pending: bool) -> None:
        """Run ``content`` for the task in the background. ``from_pending``: the task is new and
        the executor moves it to ``running`` itself (a follow-up already moved it). At most
        ``max_running`` runs go at once; a new task waits as ``pending`` for a free slot."""

        def work(task: Task, on_text: ProgressCallback) -> Awaitable[Outcome]:
            return self.backend.run(task, content, message_id, on_text)

        self._launch(task_id, work, from_pending, frozenset())

    def resume(self, task_id: str, approval_id: str, decision: Decision, *, asked: frozenset[str]) -> None:
        """Continue the task's paused run with ``decision`` in the background (the caller moved
        the task from ``waiting`` to ``running``). ``asked``: the approval ids the task's messages
        already asked about (a run that pauses again asks only about new ones)."""

        def work(task: Task, on_text: ProgressCallback) -> Awaitable[Outcome]:
            return self.backend.resume(task, approval_id, decision, on_text)

        self._launch(task_id, work, False, asked)

    def _launch(self, task_id: str, work: Work, from_pending: bool, asked: frozenset[str]) -> None:
        self._runs[task_id] = asyncio.create_task(
            self._execute(task_id, work, from_pending, asked), name=f"inbox-task-{task_id}"
        )

    # -- what a task waits for ---------------------------------------------------------------------

    def waiting_for_sync(self, task: Task) -> list[Pending]:
        """What the task's conversation waits for (blocking); [] if nothing or unreadable."""
        try:
            return self.backend.waiting_for(task)
        except Exception:  # a broken record must not break listing the task
            log.warning("cannot read what inbox task %s waits for", task.id, exc_info=True)
            return []

    async def waiting_for(self, task: Task) -> list[Pending]:
        return await asyncio.to_thread(self.waiting_for_sync, task)

    async def task_json(self, task: Task) -> dict[str, Any]:
        """The Task as the API and events show it: a ``waiting`` task also carries ``waitingFor``."""
        pending = await self.waiting_for(task) if task.status == "waiting" else []
        return task_json(task, pending)

    async def _transition(self, task_id: str, target: TaskStatus) -> Task:
        task = await asyncio.to_thread(self.repository.transition, task_id, target, self.clock())
        self.broadcaster.publish("task.updated", await self.task_json(task), task_id)
        return task

    async def _execute(self, task_id: str, work: Work, from_pending: bool, asked: frozenset[str]) -> None:
        this = asyncio.current_task()
        try:
            async with self._slots:
                self._holding.add(task_id)
                await self._run_holding_slot(task_id, work, from_pending, asked)
        finally:
            # a follow-up accepted once this run's task was finished may already run in its place
            if self._runs.get(task_id) is this:
                del self._runs[task_id]
                self._holding.discard(task_id)

    async def _run_holding_slot(
        self, task_id: str, work: Work, from_pending: bool, asked: frozenset[str]
    ) -> None:
        try:
            if from_pending:
                task = await self._transition(task_id, "running")
            else:
                task = await asyncio.to_thread(self.repository.require_task, task_id)
            last_progress = 0.0

            def on_text(text: str) -> None:
                nonlocal last_progress
                if time.monotonic() - last_progress >= PROGRESS_INTERVAL:
                    last_progress = time.monotonic()
                    self.broadcaster.publish("message.delta", {"taskId": task_id, "content": text}, task_id)

            try:
                outcome = await work(task, on_text)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a backend bug must not leave the task running forever
                log.exception("inbox task %s failed in the %s backend", task_id, self.backend.name)
                outcome = Outcome("error", "", f"{type(exc).__name__}: {exc}")
            await self._finish(task_id, outcome, asked)
        except (TaskNotFound, InvalidTransition) as exc:
            # deleted, or cancelled before it started: nothing left to do
            log.info("inbox task %s not run: %s", task_id, exc)
        except asyncio.CancelledError:
            with suppress(Exception):
                await self._finish(task_id, Outcome("error", "", RESTART_MESSAGE))
            raise

    async def _finish(self, task_id: str, outcome: Outcome, asked: frozenset[str] = frozenset()) -> None:
        target: TaskStatus
        if outcome.state == "waiting" and outcome.pending:
            # the question is the agent's message (only what was not asked before)
            fresh = [item for item in outcome.pending if item.approval_id not in asked]
            content, target = waiting_message(outcome.text, fresh), "waiting"
        elif outcome.state in ("final", "waiting"):
            content, target = outcome.text, "completed"
        elif outcome.state == "error":
            reason = outcome.error or "the run failed"
            content = f"{outcome.text}\n\n⚠️ {reason}" if outcome.text else f"⚠️ {reason}"
            target = "failed"
        else:
            content = outcome.text
            target = "failed" if self._stopping else "cancelled"
            if self._stopping:
                content = f"{content}\n\n⚠️ {RESTART_MESSAGE}" if content else f"⚠️ {RESTART_MESSAGE}"
        if content.strip():
            await self.add_agent_message(task_id, content)
        current = await asyncio.to_thread(self.repository.get_task, task_id)
        if current is None or current.status != "running":
            return  # cancelled (or deleted) meanwhile: the user's choice stands
        try:
            await self._transition(task_id, target)
        except (TaskNotFound, InvalidTransition) as exc:
            log.info("inbox task %s: %s", task_id, exc)

    async def add_agent_message(self, task_id: str, content: str) -> Message | None:
        message = Message(new_ulid(), task_id, "agent", content, self.clock())
        try:
            await asyncio.to_thread(self.repository.add_message, message)
        except sqlalchemy.exc.IntegrityError:
            return None  # the task was deleted meanwhile
        self.broadcaster.publish("message.created", message.to_json(), task_id)
        return message

    async def cancel(self, task_id: str) -> Task:
        """Mark the task cancelled (if the table allows) and abort its run; a waiting task's
        paused tool calls are dropped (they never run)."""
        task = await self._transition(task_id, "cancelled")
        if task_id in self._runs:
            await self.backend.abort(task)
        else:
            await self.drop_pending(task)
        return task

    async def drop_pending(self, task: Task) -> None:
        try:
            await self.backend.drop_pending(task)
        except Exception:
            log.warning("could not drop what inbox task %s waited for", task.id, exc_info=True)

    async def abort_run(self, task: Task) -> None:
        """Stop a task's run without changing its status (before the task is deleted)."""
        run = self._runs.get(task.id)
        if run is None:
            return
        if task.id not in self._holding:  # still queued for a slot: nothing started yet
            run.cancel()
            with suppress(asyncio.CancelledError):
                await run
            return
        await self.backend.abort(task)
        with suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(run), timeout=SHUTDOWN_GRACE)

    async def recover(self) -> None:
        """After a restart: tasks left ``running`` lost their run → ``failed`` with a message
        saying so (unless their run had paused for the user: → ``waiting``, asking); tasks still
        ``pending`` never started → start them now. ``waiting`` tasks stay waiting: what they wait
        for is on disk, and a reply continues them."""
        for task in await asyncio.to_thread(self.repository.tasks_with_status, ["running"]):
            pending = await self.waiting_for(task)
            if pending:  # stopped between the pause and the status change
                await self._finish(task.id, Outcome("waiting", "", pending=tuple(pending)))
        for task in await asyncio.to_thread(
            self.repository.fail_running, self.clock(), f"⚠️ {RESTART_MESSAGE}"
        ):
            self.broadcaster.publish("task.updated", task.to_json(), task.id)
        for task in await asyncio.to_thread(self.repository.tasks_with_status, ["pending"]):
            message = await asyncio.to_thread(self.repository.last_user_message, task.id)
            if message is not None:
                self.start(task.id, message.content, message.id, from_pending=True)

    async def shutdown(self) -> None:
        """Abort running tasks (each is marked failed, saying the server stopped) and close the
        backend."""
        self._stopping = True
        runs = dict(self._runs)
        for task_id in runs:
            task = await asyncio.to_thread(self.repository.get_task, task_id)
            if task is not None:
                with suppress(Exception):
                    await self.backend.abort(task)
        if runs:
            _, still = await asyncio.wait(runs.values(), timeout=SHUTDOWN_GRACE)
            for run in still:
                run.cancel()
            if still:
                await asyncio.wait(still, timeout=SHUTDOWN_GRACE)
        await self.backend.close()


def task_json(task: Task, pending: list[Pending]) -> dict[str, Any]:
    """``task.to_json()`` plus ``waitingFor`` when the task waits for something."""
    data = task.to_json()
    if task.status == "waiting" and pending:
        data["waitingFor"] = [pending_json(item) for item in pending]
    return data

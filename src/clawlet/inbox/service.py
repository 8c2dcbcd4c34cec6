"""``InboxService``: the inbox's operations, called by the REST routes (and nothing else).

It ties the repository, the state machine, the broadcaster, the executor and ``openclaw.json``
together and follows the seed's order: a task and its user message are saved (one transaction)
and broadcast before execution starts, so the backend always finds the message in history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clawlet.config import Settings
from clawlet.engine.tool_approvals import Decision
from clawlet.events import Pending
from clawlet.inbox.agents import AgentConfigError, AgentInfo, OpenClawAgents
from clawlet.inbox.backends import ExecutionBackend, GatewayBackend, LocalBackend
from clawlet.inbox.broadcaster import EventBroadcaster
from clawlet.inbox.db import create_db_engine, migrate
from clawlet.inbox.executor import TaskExecutor, now_ms, task_json
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task, title_from
from clawlet.inbox.repository import InboxRepository, TaskNotFound
from clawlet.inbox.states import InvalidTransition, TaskStatus
from clawlet.inbox.waiting import (
    ApprovalAlreadyDecided,
    ApprovalNotPending,
    InvalidInboxDecision,
    approval_ids,
    decision_message,
    reply_decision,
    trimmed,
)
from clawlet.services import Workspaces

log = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 100_000
MAX_TITLE_CHARS = 200
FOLLOW_UP_FROM: tuple[TaskStatus, ...] = ("completed", "failed", "waiting")
BUSY: tuple[TaskStatus, ...] = ("pending", "running")


PREVIEW_CHARS = 140
SNIPPET_CONTEXT = 30


@dataclass(frozen=True)
class TaskListing:
    """A task as the list shows it: the seed's Task plus ``lastMessage`` (a preview of its newest
    message), for a search ``match`` (a snippet of the first matching message), and for a waiting
    task ``waitingFor``."""

    task: Task
    last_message: Message | None
    match: Message | None = None
    waiting_for: tuple[Pending, ...] = ()

    def to_json(self, search: str | None = None) -> dict[str, Any]:
        data = task_json(self.task, list(self.waiting_for))
        if self.last_message is not None:
            data["lastMessage"] = {
                "senderType": self.last_message.sender_type,
                "content": self.last_message.content[:PREVIEW_CHARS],
                "timestamp": self.last_message.timestamp,
            }
        if self.match is not None and search:
            data["match"] = {"messageId": self.match.id, "snippet": snippet(self.match.content, search)}
        return data


def snippet(content: str, search: str) -> str:
    """The text around the first occurrence of ``search`` (case-insensitive), on one line."""
    flat = " ".join(content.split())
    at = flat.lower().find(search.lower())
    if at < 0:
        return flat[: SNIPPET_CONTEXT * 2]
    start = max(0, at - SNIPPET_CONTEXT)
    end = min(len(flat), at + len(search) + SNIPPET_CONTEXT)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


class UnknownAgent(LookupError):
    def __init__(self, agent_id: str) -> None:
        super().__init__(f"no agent {agent_id!r} in openclaw.json (main and the agents it may delegate to)")
        self.agent_id = agent_id


class TaskBusy(Exception):
    """A follow-up message (or a decision) for a task that is still pending or running."""


def busy_message(task_id: str, status: str) -> str:
    return f"task {task_id} is still {status}; wait for its reply or cancel it before sending more"


@dataclass
class InboxService:
    repository: InboxRepository
    broadcaster: EventBroadcaster
    agents: OpenClawAgents
    executor: TaskExecutor

    async def create_task(self, content: str, agent_id: str | None) -> Task:
        agent_id = agent_id or "main"
        known = await asyncio.to_thread(self.agents.list_agents)
        if agent_id not in {agent.id for agent in known}:
            raise UnknownAgent(agent_id)
        now = now_ms()
        task = Task(new_ulid(now), agent_id, title_from(content), False, "pending", now, now)
        message = Message(new_ulid(now), task.id, "user", content, now)
        await asyncio.to_thread(self.repository.create_task, task, message)
        self.broadcaster.publish("task.created", task.to_json(), task.id)
        self.broadcaster.publish("message.created", message.to_json(), task.id)
        self.executor.start(task.id, content, message.id, from_pending=True)
        return task

    async def list_tasks(
        self, agent_id: str | None, statuses: Sequence[TaskStatus], limit: int, search: str | None = None
    ) -> list[TaskListing]:
        """Tasks in list order, each with its newest message (the preview) and, when searching,
        the first message that matched."""

        def load() -> list[TaskListing]:
            found = self.repository.list_tasks(
                agent_id=agent_id, statuses=statuses, limit=limit, search=search
            )
            ids = [task.id for task in found]
            last = self.repository.last_messages(ids)
            matches = self.repository.first_matches(ids, search) if search else {}
            return [
                TaskListing(
                    task,
                    last.get(task.id),
                    matches.get(task.id),
                    tuple(self.executor.waiting_for_sync(task)) if task.status == "waiting" else (),
                )
                for task in found
            ]

        return await asyncio.to_thread(load)

    async def get_task(self, task_id: str) -> Task:
        return await asyncio.to_thread(self.repository.require_task, task_id)

    async def task_json(self, task: Task) -> dict[str, Any]:
        """The Task's JSON (a waiting task's with ``waitingFor``)."""
        return await self.executor.task_json(task)

    async def rename(self, task_id: str, title: str) -> Task:
        task = await asyncio.to_thread(self.repository.rename_task, task_id, title, now_ms())
        self.broadcaster.publish("task.updated", await self.task_json(task), task_id)
        return task

    async def cancel(self, task_id: str) -> Task:
        return await self.executor.cancel(task_id)

    async def delete(self, task_id: str) -> None:
        task = await self.get_task(task_id)
        await self.executor.abort_run(task)
        if not await asyncio.to_thread(self.repository.delete_task, task_id):
            raise TaskNotFound(task_id)
        if task.status == "waiting":
            await self.executor.drop_pending(task)  # its paused tool calls never run
        self.broadcaster.publish("task.deleted", {"id": task_id, "agentId": task.agent_id}, task_id)

    async def list_messages(self, task_id: str) -> list[Message]:
        await self.get_task(task_id)
        return await asyncio.to_thread(self.repository.list_messages, task_id)

    async def send_message(self, task_id: str, content: str) -> Message:
        """Save a follow-up and resume the task; refused (nothing saved) unless the task is
        completed, failed or waiting. To a task whose run waits for the user the message is the
        reply to the oldest pending item (:func:`~clawlet.inbox.waiting.reply_decision`: the
        answer to a question, a rejection of a tool call) and continues that run; it never starts
        a second one."""
        task = await self.get_task(task_id)
        self._refuse_busy(task)
        pending = await self.executor.waiting_for(task)
        if pending:
            item = pending[0]
            decision = reply_decision(item, content)
            return await self._resume(task_id, content, item.approval_id, decision, pending)
        message = await self._add_reply(task_id, content)
        self.executor.start(task_id, content, message.id, from_pending=False)
        return message

    async def decide(self, task_id: str, approval_id: str, decision: Decision) -> Message:
        """Decide one thing a waiting task waits for (``approve`` / ``edit`` / ``reject`` a tool
        call, ``answer`` / ``reject`` a question) and continue its run (``waiting → running``). The
        decision is saved as the user's message. Checked before anything is saved: the task is not
        busy (:class:`TaskBusy`), it waits for ``approval_id`` (:class:`ApprovalNotPending`,
        :class:`ApprovalAlreadyDecided`), the decision fits, edited arguments included, as the
        runtime checks it (:class:`InvalidInboxDecision`)."""
        task = await self.get_task(task_id)
        self._refuse_busy(task)
        pending = await self.executor.waiting_for(task)
        item = next((found for found in pending if found.approval_id == approval_id), None)
        if item is None:
            decided = await asyncio.to_thread(self.executor.backend.decision_of, task, approval_id)
            if decided:
                raise ApprovalAlreadyDecided(task_id, approval_id, decided)
            raise ApprovalNotPending(task_id, approval_id)
        checked = await self.executor.backend.check_decision(task, approval_id, trimmed(decision))
        return await self._resume(task_id, decision_message(checked), approval_id, checked, pending)

    async def _resume(
        self, task_id: str, content: str, approval_id: str, decision: Decision, pending: list[Pending]
    ) -> Message:
        message = await self._add_reply(task_id, content)
        self.executor.resume(task_id, approval_id, decision, asked=approval_ids(pending))
        return message

    async def _add_reply(self, task_id: str, content: str) -> Message:
        """Save the user's message and move the task to ``running``, announcing both."""
        now = now_ms()
        message = Message(new_ulid(now), task_id, "user", content, now)
        # compare-and-set: of two replies at once, one moves the task to running, the other is
        # refused as busy (the one run per task, like one turn per session)
        try:
            task = await asyncio.to_thread(
                self.repository.add_message_and_transition, message, "running", now, only_from=FOLLOW_UP_FROM
            )
        except InvalidTransition as exc:
            if exc.current in BUSY:
                raise TaskBusy(busy_message(task_id, exc.current)) from exc
            raise
        self.broadcaster.publish("message.created", message.to_json(), task_id)
        self.broadcaster.publish("task.updated", await self.task_json(task), task_id)
        return message

    @staticmethod
    def _refuse_busy(task: Task) -> None:
        if task.status in BUSY:
            raise TaskBusy(busy_message(task.id, task.status))

    async def list_agents(self) -> list[tuple[AgentInfo, int]]:
        agents = await asyncio.to_thread(self.agents.list_agents)
        counts = await asyncio.to_thread(self.repository.count_by_agent)
        return [(agent, counts.get(agent.id, 0)) for agent in agents]

    def gateway_agents(self) -> list[dict[str, Any]]:
        """The agents clawlet's gateway server offers (``agents.list``): the same as the inbox's;
        just ``main`` while openclaw.json cannot be read."""
        try:
            agents = self.agents.list_agents()
        except AgentConfigError:
            log.warning("openclaw.json cannot be read; the gateway offers only 'main'", exc_info=True)
            return [{"id": "main", "name": "main"}]
        return [{"id": agent.id, "name": agent.name} for agent in agents]

    async def start(self) -> None:
        await self.executor.recover()

    async def close(self) -> None:
        await self.executor.shutdown()
        self.broadcaster.close_all()


__all__ = [
    "ApprovalAlreadyDecided",
    "ApprovalNotPending",
    "InvalidInboxDecision",
    "InvalidTransition",
    "TaskBusy",
    "TaskNotFound",
    "UnknownAgent",
    "build_inbox",
]


def build_backend(settings: Settings, workspaces: Workspaces) -> ExecutionBackend:
    if settings.inbox_backend == "gateway":
        from clawlet.gateway.client import GatewayClient

        client = GatewayClient(settings.openclaw_gateway_url, settings.openclaw_gateway_token)
        return GatewayBackend(client, settings.openclaw_gateway_timeout / 1000)
    return LocalBackend(workspaces)


def build_inbox(settings: Settings, workspaces: Workspaces) -> InboxService:
    """The inbox for one server: database migrated to the newest revision, backend per settings."""
    engine = create_db_engine(settings.inbox_database_url)
    migrate(engine)
    repository = InboxRepository(engine)
    broadcaster = EventBroadcaster(settings.inbox_heartbeat_seconds)
    executor = TaskExecutor(
        repository, broadcaster, build_backend(settings, workspaces), max_running=settings.inbox_max_running
    )
    return InboxService(repository, broadcaster, OpenClawAgents(settings.openclaw_config_file), executor)

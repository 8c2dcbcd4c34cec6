"""``InboxRepository``: reads and writes tasks and messages (synchronous SQLAlchemy Core).

Status changes are compare-and-set (``UPDATE ... WHERE status IN (allowed sources)``), so two
concurrent changes can never both pass the transition table; a refused change writes nothing.
Callers in async code run these methods in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from clawlet.inbox.db import messages, tasks
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task
from clawlet.inbox.states import FINISHED, STATUS_PRIORITY, InvalidTransition, TaskStatus, sources_of

MAX_LIST_LIMIT = 500


class TaskNotFound(KeyError):
    """No task has this id."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id)
        self.task_id = task_id

    def __str__(self) -> str:
        return f"no task {self.task_id!r}"


def _task(row: Any) -> Task:
    return Task(
        id=row.id,
        agent_id=row.agent_id,
        title=row.title,
        title_locked=bool(row.title_locked),
        status=row.status,
        created_at=int(row.created_at),
        updated_at=int(row.updated_at),
        completed_at=int(row.completed_at) if row.completed_at is not None else None,
    )


def _message(row: Any) -> Message:
    return Message(
        id=row.id,
        task_id=row.task_id,
        sender_type=row.sender_type,
        content=row.content,
        timestamp=int(row.timestamp),
    )


_PRIORITY = sa.case(
    *((tasks.c.status == status, rank) for status, rank in STATUS_PRIORITY.items()),
    else_=len(STATUS_PRIORITY),
)


class InboxRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- tasks -----------------------------------------------------------------------------------

    def create_task(self, task: Task, first_message: Message) -> None:
        """Insert a task and its first user message in one transaction."""
        with self.engine.begin() as conn:
            conn.execute(tasks.insert().values(**_task_row(task)))
            conn.execute(messages.insert().values(**_message_row(first_message)))

    def get_task(self, task_id: str) -> Task | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(tasks).where(tasks.c.id == task_id)).first()
        return _task(row) if row is not None else None

    def require_task(self, task_id: str) -> Task:
        task = self.get_task(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def list_tasks(
        self,
        *,
        agent_id: str | None = None,
        statuses: Sequence[TaskStatus] = (),
        limit: int = 50,
        search: str | None = None,
    ) -> list[Task]:
        """Tasks by status priority (running, waiting, pending, completed, failed, cancelled),
        then most recently updated first. ``search`` keeps tasks whose title or any message
        contains it (case-insensitive for Latin letters; any script matches)."""
        query = sa.select(tasks)
        if agent_id is not None:
            query = query.where(tasks.c.agent_id == agent_id)
        if statuses:
            query = query.where(tasks.c.status.in_(list(statuses)))
        if search:
            pattern = _like_pattern(search)
            in_messages = sa.exists().where(
                messages.c.task_id == tasks.c.id, messages.c.content.ilike(pattern, escape="\\")
            )
            query = query.where(sa.or_(tasks.c.title.ilike(pattern, escape="\\"), in_messages))
        query = query.order_by(_PRIORITY, tasks.c.updated_at.desc(), tasks.c.id.desc())
        query = query.limit(max(1, min(limit, MAX_LIST_LIMIT)))
        with self.engine.connect() as conn:
            return [_task(row) for row in conn.execute(query)]

    def tasks_with_status(self, statuses: Iterable[TaskStatus]) -> list[Task]:
        query = sa.select(tasks).where(tasks.c.status.in_(list(statuses))).order_by(tasks.c.created_at)
        with self.engine.connect() as conn:
            return [_task(row) for row in conn.execute(query)]

    def count_by_agent(self) -> dict[str, int]:
        query = sa.select(tasks.c.agent_id, sa.func.count()).group_by(tasks.c.agent_id)
        with self.engine.connect() as conn:
            return {agent: int(count) for agent, count in conn.execute(query)}

    def rename_task(self, task_id: str, title: str, now: int) -> Task:
        with self.engine.begin() as conn:
            result = conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id)
                .values(title=title, title_locked=1, updated_at=now)
                .returning(*tasks.c)
            )
            row = result.first()
        if row is None:
            raise TaskNotFound(task_id)
        return _task(row)

    def transition(
        self, task_id: str, target: TaskStatus, now: int, *, conn: Connection | None = None
    ) -> Task:
        """Move a task to ``target`` if the table allows it from its current status.

        Raises :class:`TaskNotFound` or :class:`InvalidTransition`; either way nothing changes."""
        if conn is None:
            with self.engine.begin() as own:
                return self.transition(task_id, target, now, conn=own)
        values: dict[str, Any] = {"status": target, "updated_at": now}
        values["completed_at"] = now if target in FINISHED else None
        row = conn.execute(
            tasks.update()
            .where(tasks.c.id == task_id, tasks.c.status.in_(sorted(sources_of(target))))
            .values(**values)
            .returning(*tasks.c)
        ).first()
        if row is not None:
            return _task(row)
        current = conn.execute(sa.select(tasks.c.status).where(tasks.c.id == task_id)).scalar()
        if current is None:
            raise TaskNotFound(task_id)
        raise InvalidTransition(task_id, current, target)

    def add_message_and_transition(
        self, message: Message, target: TaskStatus, now: int, *, only_from: Iterable[TaskStatus] | None = None
    ) -> Task:
        """Save a message and move its task to ``target`` in one transaction: both happen or
        neither does (a refused transition leaves no message behind)."""
        with self.engine.begin() as conn:
            if only_from is not None:
                current = conn.execute(
                    sa.select(tasks.c.status).where(tasks.c.id == message.task_id)
                ).scalar()
                if current is None:
                    raise TaskNotFound(message.task_id)
                if current not in set(only_from):
                    raise InvalidTransition(message.task_id, current, target)
            task = self.transition(message.task_id, target, now, conn=conn)
            conn.execute(messages.insert().values(**_message_row(message)))
            return task

    def touch(self, task_id: str, now: int, conn: Connection) -> None:
        conn.execute(tasks.update().where(tasks.c.id == task_id).values(updated_at=now))

    def fail_running(self, now: int, content: str) -> list[Task]:
        """Mark every ``running`` task ``failed`` and give each an agent message saying why, in
        one transaction (after a restart, their runs are gone)."""
        with self.engine.begin() as conn:
            failed = [
                _task(row)
                for row in conn.execute(
                    tasks.update()
                    .where(tasks.c.status == "running")
                    .values(status="failed", updated_at=now, completed_at=now)
                    .returning(*tasks.c)
                )
            ]
            if failed:
                conn.execute(
                    messages.insert(),
                    [_message_row(Message(new_ulid(now), task.id, "agent", content, now)) for task in failed],
                )
        return failed

    def delete_task(self, task_id: str) -> bool:
        """Delete a task and (by cascade) its messages; False if there was none."""
        with self.engine.begin() as conn:
            result = conn.execute(tasks.delete().where(tasks.c.id == task_id))
        return result.rowcount > 0

    # -- messages --------------------------------------------------------------------------------

    def add_message(self, message: Message) -> None:
        """Save a message and bump its task's ``updatedAt``."""
        with self.engine.begin() as conn:
            conn.execute(messages.insert().values(**_message_row(message)))
            self.touch(message.task_id, message.timestamp, conn)

    def list_messages(self, task_id: str) -> list[Message]:
        query = (
            sa.select(messages)
            .where(messages.c.task_id == task_id)
            .order_by(messages.c.timestamp, messages.c.id)
        )
        with self.engine.connect() as conn:
            return [_message(row) for row in conn.execute(query)]

    def last_messages(self, task_ids: Sequence[str]) -> dict[str, Message]:
        """The newest message of each task (for list previews), in one query."""
        if not task_ids:
            return {}
        rank = (
            sa.func.row_number()
            .over(
                partition_by=messages.c.task_id, order_by=(messages.c.timestamp.desc(), messages.c.id.desc())
            )
            .label("rank")
        )
        ranked = sa.select(messages, rank).where(messages.c.task_id.in_(list(task_ids))).subquery()
        query = sa.select(ranked).where(ranked.c.rank == 1)
        with self.engine.connect() as conn:
            return {row.task_id: _message(row) for row in conn.execute(query)}

    def first_matches(self, task_ids: Sequence[str], search: str) -> dict[str, Message]:
        """The oldest message of each task containing ``search``."""
        if not task_ids or not search:
            return {}
        query = (
            sa.select(messages)
            .where(
                messages.c.task_id.in_(list(task_ids)),
                messages.c.content.ilike(_like_pattern(search), escape="\\"),
            )
            .order_by(messages.c.timestamp, messages.c.id)
        )
        found: dict[str, Message] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                found.setdefault(row.task_id, _message(row))
        return found

    def last_user_message(self, task_id: str) -> Message | None:
        query = (
            sa.select(messages)
            .where(messages.c.task_id == task_id, messages.c.sender_type == "user")
            .order_by(messages.c.timestamp.desc(), messages.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return _message(row) if row is not None else None


def _like_pattern(text: str) -> str:
    """``%text%`` with LIKE's wildcards in ``text`` escaped (escape character ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _task_row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "agent_id": task.agent_id,
        "title": task.title,
        "title_locked": int(task.title_locked),
        "status": task.status,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "completed_at": task.completed_at,
    }


def _message_row(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "task_id": message.task_id,
        "sender_type": message.sender_type,
        "content": message.content,
        "timestamp": message.timestamp,
    }

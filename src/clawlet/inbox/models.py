"""Inbox records and their JSON shapes (the seed's camelCase ``Task`` and ``Message``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from clawlet.inbox.states import TaskStatus

SenderType = Literal["user", "agent"]

TITLE_CHARS = 20
"""A new task's title: the first 20 characters of its first line."""


@dataclass(frozen=True)
class Task:
    id: str
    agent_id: str
    title: str
    title_locked: bool
    status: TaskStatus
    created_at: int
    updated_at: int
    completed_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "agentId": self.agent_id,
            "title": self.title,
            "titleLocked": self.title_locked,
            "status": self.status,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        if self.completed_at is not None:
            data["completedAt"] = self.completed_at
        return data


@dataclass(frozen=True)
class Message:
    id: str
    task_id: str
    sender_type: SenderType
    content: str
    timestamp: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "taskId": self.task_id,
            "senderType": self.sender_type,
            "content": self.content,
            "timestamp": self.timestamp,
        }


def title_from(content: str) -> str:
    """The seed's automatic title: the first line, whitespace collapsed, cut to 20 characters."""
    for line in content.splitlines():
        collapsed = " ".join(line.split())
        if collapsed:
            return collapsed[:TITLE_CHARS]
    return " ".join(content.split())[:TITLE_CHARS]

"""``/api/v1/tasks``: create (and run), list, get, rename, cancel, delete; messages list and send;
decide what a waiting task waits for.

Response shapes follow the seed exactly: a list is a plain ``Task[]`` (each also carrying a
``lastMessage`` preview, and a ``match`` snippet when searching with ``q``); sending a message
answers ``{"ok": true}`` (the agent's reply arrives later over SSE). A ``waiting`` task also carries
``waitingFor`` (see :mod:`clawlet.inbox.waiting`); ``POST /tasks/{id}/approvals/{approvalId}``
decides one item (:class:`~clawlet.api.decision_request.DecisionBody`, as the workbench's) and
answers ``{"ok": true}`` too.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from clawlet.api.decision_request import DecisionBody
from clawlet.api.deps import InboxDep
from clawlet.errors import ApiError
from clawlet.inbox.repository import MAX_LIST_LIMIT
from clawlet.inbox.service import MAX_CONTENT_CHARS, MAX_TITLE_CHARS
from clawlet.inbox.states import STATUSES, TaskStatus, parse_status

router = APIRouter()


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


class CreateTask(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    agent_id: str | None = Field(default=None, alias="agentId", max_length=64)

    _content = field_validator("content")(_not_blank)


class SendMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)

    _content = field_validator("content")(_not_blank)


class UpdateTask(BaseModel):
    model_config = ConfigDict(extra="ignore")

    title: str | None = Field(default=None, max_length=MAX_TITLE_CHARS)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = " ".join(value.split())
        if not value:
            raise ValueError("title must not be blank")
        return value


def _statuses(raw: str | None) -> list[TaskStatus]:
    if not raw:
        return []
    try:
        return [parse_status(part.strip()) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise ApiError(
            422, "invalid_request", str(exc), {"field": "status", "allowed": list(STATUSES)}
        ) from exc


@router.post("/tasks", status_code=201)
async def create_task(body: CreateTask, inbox: InboxDep) -> dict[str, Any]:
    return (await inbox.create_task(body.content, body.agent_id)).to_json()


@router.get("/tasks")
async def list_tasks(
    inbox: InboxDep,
    agent_id: Annotated[str | None, Query(alias="agentId", max_length=64)] = None,
    status: Annotated[str | None, Query(description="a status, or several separated by commas")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
    q: Annotated[str | None, Query(max_length=200, description="search titles and messages")] = None,
) -> list[dict[str, Any]]:
    search = q.strip() if q and q.strip() else None
    listed = await inbox.list_tasks(agent_id or None, _statuses(status), limit, search)
    return [item.to_json(search) for item in listed]


@router.get("/tasks/{task_id}")
async def get_task(task_id: str, inbox: InboxDep) -> dict[str, Any]:
    return await inbox.task_json(await inbox.get_task(task_id))


@router.patch("/tasks/{task_id}")
async def update_task(task_id: str, body: UpdateTask, inbox: InboxDep) -> dict[str, Any]:
    if body.title is None:
        return await inbox.task_json(await inbox.get_task(task_id))
    return await inbox.task_json(await inbox.rename(task_id, body.title))


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(task_id: str, inbox: InboxDep) -> dict[str, Any]:
    return (await inbox.cancel(task_id)).to_json()


@router.delete("/tasks/{task_id}", status_code=204)
async def delete_task(task_id: str, inbox: InboxDep) -> Response:
    await inbox.delete(task_id)
    return Response(status_code=204)


@router.get("/tasks/{task_id}/messages")
async def list_messages(task_id: str, inbox: InboxDep) -> list[dict[str, Any]]:
    return [message.to_json() for message in await inbox.list_messages(task_id)]


@router.post("/tasks/{task_id}/messages")
async def send_message(task_id: str, body: SendMessage, inbox: InboxDep) -> dict[str, bool]:
    await inbox.send_message(task_id, body.content)
    return {"ok": True}


@router.post("/tasks/{task_id}/approvals/{approval_id}")
async def decide(task_id: str, approval_id: str, body: DecisionBody, inbox: InboxDep) -> dict[str, bool]:
    """Decide one item of the task's ``waitingFor``; the run continues (``waiting → running``) and
    its reply arrives over SSE, like a message's."""
    await inbox.decide(task_id, approval_id, body.to_decision())
    return {"ok": True}

"""Inbox SSE: ``/api/v1/events`` (everything) and ``/api/v1/tasks/{id}/events`` (one task).

Events: ``task.created`` and ``task.updated`` (the full Task), ``message.created`` (the full
Message), ``message.delta`` (``{taskId, content}``: a reply's text so far), ``task.deleted``
(``{id, agentId}``) and ``heartbeat`` (``{timestamp}``) after 30 s of silence.
"""

from __future__ import annotations

from fastapi import APIRouter

from clawlet.api.deps import InboxDep
from clawlet.api.sse_response import SseResponse

router = APIRouter()


def _response(inbox: InboxDep, task_id: str | None) -> SseResponse:
    return SseResponse(inbox.broadcaster.stream(task_id))


@router.get("/events")
async def all_events(inbox: InboxDep) -> SseResponse:
    return _response(inbox, None)


@router.get("/tasks/{task_id}/events")
async def task_events(task_id: str, inbox: InboxDep) -> SseResponse:
    await inbox.get_task(task_id)  # 404 for an unknown task
    return _response(inbox, task_id)

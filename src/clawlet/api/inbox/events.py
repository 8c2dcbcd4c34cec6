"""Inbox SSE: ``/api/v1/events`` (everything) and ``/api/v1/tasks/{id}/events`` (one task).

Events: ``task.created`` and ``task.updated`` (the full Task), ``message.created`` (the full
Message), ``message.delta`` (``{taskId, content}``: a reply's text so far), ``task.deleted``
(``{id, agentId}``) and ``heartbeat`` (``{timestamp}``) after 30 s of silence.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from clawlet.api.deps import InboxDep

router = APIRouter()

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _response(inbox: InboxDep, task_id: str | None) -> StreamingResponse:
    return StreamingResponse(
        inbox.broadcaster.stream(task_id), media_type="text/event-stream", headers=SSE_HEADERS
    )


@router.get("/events")
async def all_events(inbox: InboxDep) -> StreamingResponse:
    return _response(inbox, None)


@router.get("/tasks/{task_id}/events")
async def task_events(task_id: str, inbox: InboxDep) -> StreamingResponse:
    await inbox.get_task(task_id)  # 404 for an unknown task
    return _response(inbox, task_id)

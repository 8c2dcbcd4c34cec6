"""``POST /api/chat``: one chat turn, streamed as the seed's SSE events (or answered as JSON)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, field_validator

from clawlet.api.deps import ServicesDep
from clawlet.api.errors import ApiError
from clawlet.api.sse import KEEPALIVE, sse_frame, workbench_event
from clawlet.api.workbench.sessions import corrupt_error
from clawlet.events import RunCancelled, RunFailed, RunFinished, Title
from clawlet.runtime.manager import Run, SessionBusy
from clawlet.sessions.store import InvalidSessionId, SessionCorrupt, validate_session_id

router = APIRouter()

MAX_MESSAGE_CHARS = 100_000
KEEPALIVE_SECONDS = 15.0


class ChatRequest(BaseModel):
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    session_id: str | None = None
    stream: bool = True

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("message must not be blank")
        return value


async def _sse(run: Run) -> AsyncIterator[str]:
    async for event in run.events(keepalive=KEEPALIVE_SECONDS):
        if event is None:
            yield KEEPALIVE
            continue
        mapped = workbench_event(event)
        if mapped is not None:
            yield sse_frame(*mapped)


async def _collect(run: Run) -> dict[str, Any]:
    result: dict[str, Any] = {"session_id": run.session_id, "content": "", "title": None}
    async for event in run.events():
        if isinstance(event, RunFinished | RunCancelled):
            result["content"] = event.content
            result["cancelled"] = isinstance(event, RunCancelled)
        elif isinstance(event, RunFailed):
            raise ApiError(502, "run_failed", event.error)
        elif isinstance(event, Title):
            result["title"] = event.title
    return result


@router.post("/chat", response_model=None)
async def chat(body: ChatRequest, services: ServicesDep) -> StreamingResponse | dict[str, Any]:
    session_id = body.session_id
    if session_id is None:
        session_id, _ = services.transcripts.create()
    try:
        validate_session_id(session_id)
        run = await services.sessions.start_turn(session_id, body.message)
    except InvalidSessionId as exc:
        raise ApiError(422, "invalid_request", str(exc)) from exc
    except SessionCorrupt as exc:
        raise corrupt_error(session_id) from exc
    except SessionBusy as exc:
        raise ApiError(
            409, "session_busy", f"session {session_id!r} is still answering; wait or cancel it"
        ) from exc
    if not body.stream:
        return await _collect(run)
    return StreamingResponse(
        _sse(run),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Session-ID": session_id},
    )

"""``POST /api/chat``: one chat turn, streamed as the seed's SSE events (or answered as JSON).

Workbench turns may pause for the user (tools whose approval policy is ``ask``, the agent's
``ask_user`` questions): the stream then sends ``approval_required`` / ``question`` events and ends
with ``waiting``. ``GET /api/sessions/{id}/approvals`` lists what a session waits for (also after a
restart) and ``POST /api/sessions/{id}/approvals/{approval_id}`` decides one item and streams the
continuation exactly like ``/api/chat``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field, field_validator

from clawlet.api.decision_request import DecisionBody
from clawlet.api.deps import ServicesDep
from clawlet.api.event_stream import KEEPALIVE_SECONDS
from clawlet.api.sse_response import SseResponse
from clawlet.api.workbench.stream import WorkbenchStream
from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import pending_to_json
from clawlet.errors import ApiError
from clawlet.events import RunCancelled, RunFailed, RunWaiting
from clawlet.runtime.manager import (
    Run,
)
from clawlet.runtime.session_errors import SESSION_ERRORS, session_error
from clawlet.services import Services
from clawlet.sessions.store import InvalidSessionId, validate_session_id

router = APIRouter()

MAX_MESSAGE_CHARS = 100_000
WORKBENCH_CONTEXT = RunContext.for_edge(can_ask=True)
"""The workbench can show approval cards and questions, so its turns ask."""


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


class DecisionRequest(DecisionBody):
    """A decision (:class:`~clawlet.api.decision_request.DecisionBody`); ``stream``: answer with the
    continuation's SSE stream (else its JSON)."""

    stream: bool = True


async def _collect(run: Run) -> dict[str, Any]:
    stream = WorkbenchStream()
    await stream.consume(run.events())
    end = stream.end
    if isinstance(end, RunFailed):
        raise ApiError(502, "run_failed", end.error)
    result: dict[str, Any] = {"session_id": run.session_id, "content": "", "title": stream.title}
    if end is not None:
        result["content"] = end.content
        result["cancelled"] = isinstance(end, RunCancelled)
    if isinstance(end, RunWaiting):
        result["waiting"] = True
        result["pending"] = [pending_to_json(item) for item in end.pending]
    return result


def _respond(run: Run, session_id: str) -> SseResponse:
    events = run.events(keepalive=KEEPALIVE_SECONDS, merge_text=True)
    return WorkbenchStream().response(events, {"X-Session-ID": session_id})


@router.post("/chat", response_model=None)
async def chat(body: ChatRequest, services: ServicesDep) -> SseResponse | dict[str, Any]:
    # a new session's file is written with its first message, by start_turn's worker thread
    session_id = uuid.uuid4().hex if body.session_id is None else body.session_id
    try:
        validate_session_id(session_id)
        run = await services.sessions.start_turn(session_id, body.message, context=WORKBENCH_CONTEXT)
    except SESSION_ERRORS as exc:
        raise session_error(exc, session_id) from exc
    if not body.stream:
        return await _collect(run)
    return _respond(run, session_id)


def _known_session(services: Services, session_id: str) -> None:
    try:
        validate_session_id(session_id)
    except InvalidSessionId as exc:
        raise ApiError(422, "invalid_request", str(exc)) from exc
    if not services.transcripts.exists(session_id) and not services.sessions.is_waiting(session_id):
        raise ApiError(404, "not_found", f"session {session_id!r} not found")


@router.get("/sessions/{session_id}/approvals")
async def list_approvals(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """What the session waits for: ``{session_id, waiting, running, pending: [...]}``."""
    _known_session(services, session_id)
    pending = await asyncio.to_thread(services.sessions.waiting_for, session_id)
    return {
        "session_id": session_id,
        "waiting": bool(pending),
        "running": services.sessions.is_running(session_id),
        "pending": [pending_to_json(item) for item in pending],
    }


@router.post("/sessions/{session_id}/approvals/{approval_id}", response_model=None)
async def decide_approval(
    session_id: str, approval_id: str, body: DecisionRequest, services: ServicesDep
) -> SseResponse | dict[str, Any]:
    """Decide one pending approval or question; the continuation streams like ``/api/chat``."""
    _known_session(services, session_id)
    try:
        run = await services.sessions.resume(session_id, approval_id, body.to_decision())
    except SESSION_ERRORS as exc:
        raise session_error(exc, session_id, approval_id) from exc
    if not body.stream:
        return await _collect(run)
    return _respond(run, session_id)

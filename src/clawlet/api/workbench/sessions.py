"""Session endpoints: list, create, rename, delete, messages, history, title, cancel."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field, field_validator

from clawlet.api.deps import ServicesDep
from clawlet.errors import ApiError
from clawlet.runtime.session_errors import corrupt_error
from clawlet.services import Services
from clawlet.sessions.store import InvalidSessionId, SessionCorrupt, SessionData, SessionNotFound

router = APIRouter()


class CreateSession(BaseModel):
    title: str = Field(default="", max_length=100)


class RenameSession(BaseModel):
    title: str = Field(min_length=1, max_length=100)

    @field_validator("title")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("title must not be blank")
        return value


def load_or_404(services: Services, session_id: str) -> SessionData:
    try:
        return services.transcripts.load(session_id)
    except InvalidSessionId as exc:
        raise ApiError(422, "invalid_request", str(exc)) from exc
    except SessionNotFound as exc:
        raise ApiError(404, "not_found", f"session {session_id!r} not found") from exc
    except SessionCorrupt as exc:
        raise corrupt_error(session_id) from exc


def summary(session_id: str, data: SessionData) -> dict[str, Any]:
    return {
        "id": session_id,
        "title": data["title"],
        "created_at": data["created_at"],
        "updated_at": data["updated_at"],
        "message_count": len(data["messages"]),
    }


@router.get("/sessions")
def list_sessions(services: ServicesDep) -> list[dict[str, Any]]:
    """Every session, newest first, each with ``waiting``: whether it waits for an approval or an
    answer (so a client marks waiting sessions without opening them)."""
    return [
        {**item, "waiting": services.sessions.is_waiting(item["id"])}
        for item in services.transcripts.list_sessions()
    ]


@router.post("/sessions", status_code=201)
def create_session(services: ServicesDep, body: CreateSession | None = None) -> dict[str, Any]:
    session_id, data = services.transcripts.create(title=(body.title.strip() if body else ""))
    return summary(session_id, data)


@router.put("/sessions/{session_id}")
def rename_session(session_id: str, body: RenameSession, services: ServicesDep) -> dict[str, Any]:
    load_or_404(services, session_id)
    return summary(session_id, services.transcripts.rename(session_id, body.title))


@router.delete("/sessions/{session_id}")
async def delete_session(session_id: str, services: ServicesDep) -> dict[str, Any]:
    load_or_404(services, session_id)
    try:
        await services.sessions.delete(session_id)  # stops its turn; none starts meanwhile
    except SessionNotFound as exc:  # deleted by another request meanwhile
        raise ApiError(404, "not_found", f"session {session_id!r} not found") from exc
    return {"ok": True, "id": session_id}


@router.get("/sessions/{session_id}/messages")
def session_messages(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """Everything the model sees: the system prompt, then the history as sent to the model."""
    load_or_404(services, session_id)
    system_prompt = services.engine.system_prompt()
    history = services.transcripts.load_for_agent(session_id)
    return {
        "session_id": session_id,
        "system_prompt": system_prompt,
        "messages": [{"role": "system", "content": system_prompt}, *history],
    }


@router.get("/sessions/{session_id}/history")
def session_history(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """The stored transcript: each assistant segment with its tool calls, no system prompt;
    ``waiting`` is true while the session waits for approvals or answers (``GET .../approvals``).
    A user message a stopped server never answered is followed by a marker with
    ``"interrupted": true`` (added when the server starts again)."""
    data = load_or_404(services, session_id)
    return {
        **summary(session_id, data),
        "compressed_context": data["compressed_context"],
        "messages": data["messages"],
        "running": services.sessions.is_running(session_id),
        "waiting": services.sessions.is_waiting(session_id),
    }


@router.post("/sessions/{session_id}/generate-title")
async def generate_session_title(session_id: str, services: ServicesDep) -> dict[str, Any]:
    data = load_or_404(services, session_id)
    user = next((m for m in data["messages"] if m.get("role") == "user"), None)
    if user is None:
        raise ApiError(409, "no_messages", "the session has no user message to title yet")
    reply = next((m for m in data["messages"] if m["role"] == "assistant" and not m.get("interrupted")), None)
    sessions = services.sessions
    made = await sessions.titles.title(sessions.settings, user["content"], reply["content"] if reply else "")
    await asyncio.to_thread(services.transcripts.rename, session_id, made.title)
    return {"session_id": session_id, "title": made.title}


@router.post("/sessions/{session_id}/cancel")
async def cancel_session_run(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """Cancel the running turn, or drop what a waiting session waits for (the paused tools never run)."""
    load_or_404(services, session_id)
    return {"session_id": session_id, "cancelled": await services.sessions.cancel(session_id)}

"""``POST /api/sessions/{id}/compress``: summarise and archive the first half of a session."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from clawlet.api.deps import ServicesDep
from clawlet.api.workbench.sessions import load_or_404
from clawlet.engine.compression import NotEnoughMessages, SummaryFailed, compress_session
from clawlet.errors import ApiError
from clawlet.runtime.manager import SessionBusy
from clawlet.sessions.store import CompressionConflict, SessionNotFound

router = APIRouter()


@router.post("/sessions/{session_id}/compress")
async def compress(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """The session is held while it is compressed: a turn meanwhile gets 409 ``session_busy``."""
    load_or_404(services, session_id)
    try:
        done = await compress_session(services.settings, services.transcripts, services.sessions, session_id)
    except SessionBusy as exc:
        raise ApiError(409, "session_busy", "the session is answering; compress it when it is done") from exc
    except SessionNotFound as exc:
        raise ApiError(404, "not_found", f"session {session_id!r} not found") from exc
    except NotEnoughMessages as exc:
        raise ApiError(400, "not_enough_messages", str(exc)) from exc
    except SummaryFailed as exc:
        raise ApiError(502, "summary_failed", str(exc)) from exc
    except CompressionConflict as exc:
        raise ApiError(409, "session_changed", "the session changed during compression") from exc
    return {
        "archived_count": done.archived_count,
        "remaining_count": done.remaining_count,
        "summary": done.summary,
    }

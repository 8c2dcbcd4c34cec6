"""``POST /api/sessions/{id}/compress``: summarise and archive the first half of a session."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter

from clawlet.api.deps import ServicesDep
from clawlet.api.errors import ApiError
from clawlet.api.workbench.sessions import load_or_404
from clawlet.engine.compression import NotEnoughMessages, compression_cut, summarise
from clawlet.runtime.manager import SessionBusy
from clawlet.services import Services
from clawlet.sessions.store import CompressionConflict, archive_and_summarise

router = APIRouter()
log = logging.getLogger(__name__)


@router.post("/sessions/{session_id}/compress")
async def compress_session(session_id: str, services: ServicesDep) -> dict[str, Any]:
    """The session is held while it is compressed: a turn meanwhile gets 409 ``session_busy``."""
    load_or_404(services, session_id)
    try:
        with services.sessions.hold(session_id):
            return await _compress(services, session_id)
    except SessionBusy as exc:
        raise ApiError(409, "session_busy", "the session is answering; compress it when it is done") from exc


async def _compress(services: Services, session_id: str) -> dict[str, Any]:
    messages = load_or_404(services, session_id)["messages"]
    try:
        cut = compression_cut(messages)
    except NotEnoughMessages as exc:
        raise ApiError(400, "not_enough_messages", str(exc)) from exc
    archived = messages[:cut]
    try:
        summary = await summarise(services.settings, archived)
    except Exception as exc:
        log.warning("compression summary failed: %s", exc)
        raise ApiError(502, "summary_failed", f"the model could not summarise: {exc}") from exc
    try:
        archived_count, remaining = await asyncio.to_thread(
            archive_and_summarise, services.transcripts, session_id, archived, summary
        )
    except CompressionConflict as exc:
        raise ApiError(409, "session_changed", "the session changed during compression") from exc
    return {"archived_count": archived_count, "remaining_count": remaining, "summary": summary}

"""``GET /api/v1/health``: the inbox seed's health answer, ``{"status": "ok", "timestamp"}``.

The server-wide ``/health`` keeps the UniAiAgent seed's richer shape (with an ``inbox`` check);
this one is what the inbox seed's clients expect, plus which backend runs tasks.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from clawlet.api.deps import InboxDep

router = APIRouter()


@router.get("/health")
async def inbox_health(inbox: InboxDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "timestamp": int(time.time() * 1000),
        "backend": inbox.executor.backend.name,
    }

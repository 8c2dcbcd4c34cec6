"""``GET/PUT /api/config/rag-mode``: the RAG switch, persisted in ``config.json``."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, StrictBool

from clawlet.api.deps import ServicesDep

router = APIRouter()


class RagMode(BaseModel):
    enabled: StrictBool


@router.get("/config/rag-mode")
def get_rag_mode(services: ServicesDep) -> RagMode:
    return RagMode(enabled=services.runtime_config.get_rag_mode())


@router.put("/config/rag-mode")
async def set_rag_mode(body: RagMode, services: ServicesDep) -> RagMode:
    await asyncio.to_thread(services.runtime_config.set_rag_mode, body.enabled)
    return RagMode(enabled=body.enabled)

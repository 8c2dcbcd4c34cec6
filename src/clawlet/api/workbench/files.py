"""``GET /api/files?path=`` and ``POST /api/files``: the editor's view of the home's files."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from clawlet.api.deps import ServicesDep
from clawlet.errors import ApiError
from clawlet.files import EditableFileNotFound, FileAccessError
from clawlet.tokens import count_tokens

router = APIRouter()


class SaveFile(BaseModel):
    path: str = Field(min_length=1, max_length=1024)
    content: str


@router.get("/files")
def read_file(path: str, services: ServicesDep) -> dict[str, Any]:
    try:
        relative, content = services.files.read(path)
    except FileAccessError as exc:
        raise ApiError(403, "forbidden_path", str(exc)) from exc
    except EditableFileNotFound as exc:
        raise ApiError(404, "not_found", f"file {path!r} not found") from exc
    return {"path": relative, "content": content, "tokens": count_tokens(content)}


@router.post("/files")
async def save_file(body: SaveFile, services: ServicesDep) -> dict[str, Any]:
    try:
        relative = await asyncio.to_thread(services.files.write, body.path, body.content)
    except FileAccessError as exc:
        raise ApiError(403, "forbidden_path", str(exc)) from exc
    return {"ok": True, "path": relative, "tokens": count_tokens(body.content)}

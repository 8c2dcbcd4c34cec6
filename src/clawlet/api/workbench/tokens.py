"""Token counts (cl100k_base): a session's context and a batch of files."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from clawlet.api.deps import ServicesDep
from clawlet.api.workbench.sessions import load_or_404
from clawlet.errors import ApiError
from clawlet.files import EditableFileNotFound, FileAccessError
from clawlet.tokens import count_tokens

router = APIRouter()


class FileTokensRequest(BaseModel):
    paths: list[str] = Field(min_length=1, max_length=200)


@router.get("/tokens/session/{session_id}")
def session_tokens(session_id: str, services: ServicesDep) -> dict[str, Any]:
    load_or_404(services, session_id)
    system_tokens = count_tokens(services.engine.system_prompt())
    history = services.transcripts.load_for_agent(session_id)
    message_tokens = sum(count_tokens(message["content"]) for message in history)
    return {
        "session_id": session_id,
        "system_tokens": system_tokens,
        "message_tokens": message_tokens,
        "total_tokens": system_tokens + message_tokens,
    }


@router.post("/tokens/files")
def file_tokens(body: FileTokensRequest, services: ServicesDep) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    for path in body.paths:
        try:
            relative, content = services.files.read(path)
        except FileAccessError as exc:
            raise ApiError(403, "forbidden_path", str(exc)) from exc
        except EditableFileNotFound:
            files.append({"path": path, "tokens": 0, "exists": False})
            continue
        files.append({"path": relative, "tokens": count_tokens(content), "exists": True})
    return {"files": files, "total_tokens": sum(item["tokens"] for item in files)}

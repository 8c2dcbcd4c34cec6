"""``POST /v1/chat/completions`` and ``GET /v1/models``: clawlet's agent served as a model.

The last user message is the turn; earlier messages seed a new session's history. A session is
resumed from the ``X-Session-ID`` or ``X-OpenWebUI-Chat-Id`` header or a ``session_id`` body field,
and its id comes back in the ``X-Session-ID`` header (and the body when not streaming). Tools run
inside the agent: their activity never appears as OpenAI ``tool_calls`` (a client would run them
again); ``: keep-alive`` comments flow while they run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from clawlet.api.deps import ServicesDep
from clawlet.api.openai.errors import openai_error, openai_error_body
from clawlet.api.sse import KEEPALIVE
from clawlet.events import (
    NewSegment,
    RunCancelled,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.llm.providers import describe_model
from clawlet.runtime.manager import Run, SessionBusy
from clawlet.sessions.store import InvalidSessionId, SessionCorrupt, validate_session_id
from clawlet.tokens import count_tokens

router = APIRouter()

AGENT_MODEL_ID = "clawlet"
KEEPALIVE_SECONDS = 15.0


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    session_id: str | None = None


def message_text(message: ChatMessage) -> str:
    """Text of a message; content parts other than text (images...) are skipped."""
    if isinstance(message.content, str):
        return message.content
    if not message.content:
        return ""
    return "".join(str(part.get("text", "")) for part in message.content if part.get("type") == "text")


class Turn(BaseModel):
    text: str
    prior: list[dict[str, str]]


def split_turn(messages: list[ChatMessage]) -> Turn | str:
    """The last user message and the user/assistant history before it, or an error message."""
    if messages[-1].role != "user":
        return "the last message must have role 'user'"
    text = message_text(messages[-1]).strip()
    if not text:
        return "the last user message has no text content"
    prior = [
        {"role": m.role, "content": message_text(m)}
        for m in messages[:-1]
        if m.role in ("user", "assistant") and message_text(m)
    ]
    return Turn(text=text, prior=prior)


def chunk(completion_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> str:
    body = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def usage_body(usage: Usage | None, prompt: str, completion: str) -> dict[str, int]:
    if usage is not None:
        prompt_tokens, completion_tokens = usage.input_tokens, usage.output_tokens
    else:  # the demo model reports no usage: count the visible text instead
        prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(completion)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


async def stream_completion(
    run: Run, completion_id: str, created: int, model: str, include_usage: bool, prompt: str
) -> AsyncIterator[str]:
    yield chunk(completion_id, created, model, {"role": "assistant", "content": ""}, None)
    text = ""
    usage: Usage | None = None
    async for event in run.events(keepalive=KEEPALIVE_SECONDS):
        if event is None or isinstance(event, ToolStart | ToolEnd):
            yield KEEPALIVE
        elif isinstance(event, TextDelta):
            text += event.text
            yield chunk(completion_id, created, model, {"content": event.text}, None)
        elif isinstance(event, NewSegment) and text:
            text += "\n\n"
            yield chunk(completion_id, created, model, {"content": "\n\n"}, None)
        elif isinstance(event, Usage):
            usage = event
        elif isinstance(event, RunFailed):
            error = openai_error_body(event.error, 500, code="agent_run_failed")
            yield f"data: {json.dumps(error, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
            return
        elif isinstance(event, RunFinished | RunCancelled):
            yield chunk(completion_id, created, model, {}, "stop")
            if include_usage:
                body = {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage_body(usage, prompt, text),
                }
                yield f"data: {json.dumps(body)}\n\n"
            yield "data: [DONE]\n\n"
            return


def pick_session_id(request: Request, body: ChatCompletionRequest) -> str:
    for candidate in (
        request.headers.get("x-session-id"),
        body.session_id,
        request.headers.get("x-openwebui-chat-id"),
    ):
        if candidate:
            return candidate.strip()
    return f"oai-{uuid.uuid4().hex}"


@router.post("/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionRequest, request: Request, services: ServicesDep) -> Response:
    turn = split_turn(body.messages)
    if isinstance(turn, str):
        return openai_error(turn, 400, param="messages")
    session_id = pick_session_id(request, body)
    try:
        validate_session_id(session_id)
        run = await services.sessions.start_turn(session_id, turn.text, prior=turn.prior, title=False)
    except InvalidSessionId as exc:
        return openai_error(str(exc), 400, code="invalid_session_id", param="session_id")
    except SessionCorrupt:
        return openai_error(f"session {session_id!r} has a corrupt transcript", 409, code="session_corrupt")
    except SessionBusy:
        return openai_error(
            f"session {session_id!r} is still answering a previous message", 409, code="session_busy"
        )
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    headers = {"X-Session-ID": session_id}
    prompt = "\n".join(message_text(m) for m in body.messages)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            stream_completion(run, completion_id, created, body.model, include_usage, prompt),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    text = ""
    usage: Usage | None = None
    async for event in run.events():
        if isinstance(event, Usage):
            usage = event
        elif isinstance(event, RunFailed):
            response = openai_error(event.error, 500, code="agent_run_failed", run_started=True)
            response.headers["X-Session-ID"] = session_id
            return response
        elif isinstance(event, RunFinished | RunCancelled):
            text = event.content
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage_body(usage, prompt, text),
            "session_id": session_id,
        },
        headers=headers,
    )


@router.get("/models")
def list_models(services: ServicesDep) -> dict[str, Any]:
    info = describe_model(services.settings)
    return {
        "object": "list",
        "data": [
            {
                "id": AGENT_MODEL_ID,
                "object": "model",
                "created": 1_767_225_600,
                "owned_by": "clawlet",
                "description": f"clawlet agent on {info.label}",
            }
        ],
    }

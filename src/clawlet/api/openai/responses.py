"""``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}``: OpenAI's Responses API.

The same agent turn as ``/v1/chat/completions`` (:mod:`clawlet.api.openai.chat`), in the
Responses API's shapes (:mod:`clawlet.api.openai.responses_stream`): ``input`` is a string (the
user's message) or a list of message items (``input_text`` parts; the last must be the user's;
earlier ones seed a new session as chat messages do), ``instructions`` and system/developer items
are the client's system prompt, ``max_output_tokens``/``temperature``/``top_p`` go to every model
call of the turn. Every response belongs to a clawlet session (the ``X-Session-ID`` header and the
``session_id`` field say which); ``previous_response_id`` continues that session (and workspace).
With ``store`` (the default) the response is kept (:mod:`clawlet.api.openai.responses_store`)
for ``GET /v1/responses/{id}`` and ``previous_response_id``; ``store: false`` keeps nothing.

Not served yet, each refused with a 400 naming its field: function ``tools`` (they need the
client tools of chat completions; to wire them, turn ``body.tools`` into the engine's client tools
in :func:`create_response` where :func:`unsupported` refuses them, and emit ``function_call``
items in :class:`~clawlet.api.openai.responses_stream.ResponseStream`; ``function_call_output``
input items then resume the run), ``text.format`` other than ``text`` (structured output),
``background``, ``conversation``, and input items other than messages (or ``item_reference`` to
a stored output item, as the AI SDK sends for earlier answers) or parts other than text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from clawlet.api.deps import WorkspacesDep
from clawlet.api.openai.chat import (
    AGENT_MODEL_ID,
    ChatMessage,
    model_not_found,
    resolve_options,
    split_turn,
    start_agent_turn,
)
from clawlet.api.openai.errors import openai_error
from clawlet.api.openai.responses_store import ResponseStore, StoredResponse
from clawlet.api.openai.responses_stream import ResponseStream, new_response_id
from clawlet.api.options import OptionError
from clawlet.events import Event
from clawlet.llm.sampling import Sampling
from clawlet.services import Workspaces

router = APIRouter()

INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text"})


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, examples=[AGENT_MODEL_ID])
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = None
    text: TextOptions | None = None
    metadata: dict[str, str] | None = None
    background: bool | None = None
    conversation: Any = None
    user: str | None = None
    session_id: str | None = None

    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_output_tokens)

    def echo(self) -> dict[str, Any]:
        """The request fields a response object repeats."""
        return {
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "previous_response_id": self.previous_response_id,
            "store": self.store,
            "metadata": self.metadata or {},
            "user": self.user,
            "background": False,
            "reasoning": {"effort": None, "summary": None},
        }


def unsupported(body: ResponsesRequest) -> JSONResponse | None:
    """The 400 for what this endpoint does not serve yet (see the module docstring), else None."""
    if body.tools:
        kinds = sorted({str(tool.get("type")) for tool in body.tools})
        return openai_error(
            f"tools ({', '.join(kinds)}) are not supported on /v1/responses yet: clawlet's agent "
            "runs its own tools; send the request without tools",
            400,
            code="unsupported_parameter",
            param="tools",
        )
    if body.text is not None and body.text.format is not None and body.text.format.type != "text":
        return openai_error(
            f"text.format {body.text.format.type!r} is not supported yet: only 'text'",
            400,
            code="unsupported_value",
            param="text.format",
        )
    if body.background:
        return openai_error(
            "background responses are not supported: stream instead",
            400,
            code="unsupported_parameter",
            param="background",
        )
    if body.conversation is not None:
        return openai_error(
            "conversation is not supported: continue with previous_response_id (or a session_id)",
            400,
            code="unsupported_parameter",
            param="conversation",
        )
    return None


def item_text(index: int, content: Any) -> str:
    """The text of input item ``index``'s ``content``; ValueError says what is wrong with it."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"input[{index}].content must be a string or a list of input_text parts")
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise ValueError(
                f"input[{index}].content: parts of type {kind!r} are not supported; send input_text parts"
            )
        texts.append(part["text"])
    return "".join(texts)


def input_messages(
    value: str | list[dict[str, Any]], find_item: Callable[[str], dict[str, Any] | None]
) -> list[ChatMessage]:
    """``input`` as chat messages, an ``item_reference`` replaced by the stored item it names
    (``find_item``; a reasoning item adds nothing); ValueError says which item clawlet cannot read."""
    if isinstance(value, str):
        return [ChatMessage(role="user", content=value)]
    if not value:
        raise ValueError("input must not be empty")
    messages: list[ChatMessage] = []
    for index, item in enumerate(value):
        kind = item.get("type", "message")
        if kind == "item_reference":
            found = find_item(str(item.get("id")))
            if found is None:
                raise ValueError(f"input[{index}]: item with id {item.get('id')!r} not found")
            if found["type"] != "message":
                continue
            item = found
        elif kind != "message":
            raise ValueError(
                f"input[{index}] has type {kind!r}: only message items (and item references) are "
                "supported; continue a conversation with previous_response_id"
            )
        role = item.get("role")
        if not isinstance(role, str) or role not in INPUT_ROLES:
            raise ValueError(f"input[{index}].role must be one of {', '.join(sorted(INPUT_ROLES))}")
        messages.append(ChatMessage(role=role, content=item_text(index, item.get("content"))))
    return messages


def response_store(workspaces: Workspaces) -> ResponseStore:
    """The stored responses, in the main home whatever workspace a response ran in."""
    return ResponseStore(workspaces.default.settings.paths.root)


@router.post("/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request, workspaces: WorkspacesDep) -> Response:
    if body.model != AGENT_MODEL_ID:
        return model_not_found(body.model)
    refusal = unsupported(body)
    if refusal is not None:
        return refusal
    store = response_store(workspaces)
    try:
        messages = await asyncio.to_thread(input_messages, body.input, store.item)
    except ValueError as exc:
        return openai_error(str(exc), 400, code="invalid_value", param="input")
    previous: StoredResponse | None = None
    if body.previous_response_id is not None:
        previous = await asyncio.to_thread(store.load, body.previous_response_id)
        if previous is None:
            return openai_error(
                f"Previous response with id '{body.previous_response_id}' not found.",
                404,
                code="previous_response_not_found",
                param="previous_response_id",
            )
    try:
        options, messages, system_prompt = resolve_options(
            request, messages, body.model_extra, body.session_id
        )
    except OptionError as exc:
        return openai_error(str(exc), 400, code="invalid_option", param=exc.param)
    if previous is not None:  # the earlier response's session and workspace
        options.session_id, options.workspace = previous["session_id"], previous["workspace"]
    turn = split_turn(messages)
    if isinstance(turn, str):
        return openai_error(turn.replace("message", "input item", 1), 400, param="input")
    instructions = "\n\n".join(text for text in (body.instructions, system_prompt) if text)
    started = await start_agent_turn(workspaces, options, turn, instructions, body.sampling())
    if isinstance(started, JSONResponse):
        return started
    response_id, created_at = new_response_id(), int(time.time())

    def new_stream() -> ResponseStream:
        return ResponseStream(
            response_id=response_id,
            created_at=created_at,
            model=body.model,
            prompt="\n".join(str(m.content) for m in messages),
            session_id=started.session_id,
            echo=body.echo(),
        )

    stream = new_stream()
    if body.store:
        recorded = await record_response(store, new_stream(), started.run.events(), options.workspace)
        if not body.stream:
            return answer(await asyncio.shield(recorded), started.headers)
        stream.on_final = lambda _: asyncio.shield(recorded)
    if body.stream:
        return stream.response(started.events, started.headers)
    await stream.consume(started.events)
    return answer(stream.final, started.headers)


def answer(final: dict[str, Any], headers: dict[str, str]) -> JSONResponse:
    """The non-streamed answer: the final response, or the run's failure as a 500."""
    if final["status"] == "failed":
        failed = openai_error(final["error"]["message"], 500, code="agent_run_failed", run_started=True)
        failed.headers.update(headers)
        return failed
    return JSONResponse(final, headers=headers)


RECORDERS: set[asyncio.Task[dict[str, Any]]] = set()
"""The responses being recorded (a reference each, so none is collected mid-run)."""


async def record_response(
    store: ResponseStore,
    stream: ResponseStream,
    events: AsyncIterator[Event | None],
    workspace: str | None,
) -> asyncio.Task[dict[str, Any]]:
    """Store ``stream``'s response now (``in_progress``; ``workspace``: where its session is), then
    follow the run (``events``) on its own and store the final response (the task's result) when it
    ends: the client's answer is another watcher of the run, so a client that leaves early (a
    dropped stream) still leaves the final response stored."""

    def save(response: dict[str, Any]) -> None:
        store.save(StoredResponse(response=response, session_id=stream.session_id, workspace=workspace))

    async def follow() -> dict[str, Any]:
        await stream.consume(events)
        await asyncio.to_thread(save, stream.final)
        return stream.final

    await asyncio.to_thread(save, stream.response_object())
    task = asyncio.create_task(follow())
    RECORDERS.add(task)
    task.add_done_callback(RECORDERS.discard)
    return task


def response_not_found(response_id: str) -> JSONResponse:
    return openai_error(f"Response with id '{response_id}' not found.", 404, param="response_id")


@router.get("/responses/{response_id}", response_model=None)
async def retrieve_response(response_id: str, workspaces: WorkspacesDep) -> dict[str, Any] | JSONResponse:
    record = await asyncio.to_thread(response_store(workspaces).load, response_id)
    if record is None:
        return response_not_found(response_id)
    return record["response"]


@router.delete("/responses/{response_id}", response_model=None)
async def delete_response(response_id: str, workspaces: WorkspacesDep) -> dict[str, Any] | JSONResponse:
    """Forget a stored response (the session it belongs to stays)."""
    if not await asyncio.to_thread(response_store(workspaces).delete, response_id):
        return response_not_found(response_id)
    return {"id": response_id, "object": "response", "deleted": True}

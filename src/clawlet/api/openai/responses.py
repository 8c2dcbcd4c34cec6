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

Function ``tools`` are the client's tools of chat completions (:mod:`clawlet.api.openai.client_tools`;
the Responses shapes are read in :mod:`clawlet.api.openai.responses_input`): a run that calls one
pauses, and its response (``completed``) holds a ``function_call`` item per call. The next request's
trailing ``function_call_output`` items continue that run, in the session ``previous_response_id``
names, else the one that issued the calls (the AI SDK resends the conversation instead). ``text.format``
``json_object``/``json_schema`` shapes the final answer as chat completions' ``response_format`` does.

Not served, each refused with a 400 naming its field: built-in tools (``web_search``...),
``background``, ``conversation``, and input items other than messages, function calls and their
outputs (or ``item_reference`` to a stored output item), or parts other than text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from clawlet.api.deps import WorkspacesDep
from clawlet.api.openai.chat import (
    AGENT_MODEL_ID,
    continue_turn,
    model_not_found,
    resolve_options,
    split_turn,
    start_agent_turn,
)
from clawlet.api.openai.client_tools import ToolsError
from clawlet.api.openai.errors import openai_error
from clawlet.api.openai.responses_input import chat_tool_choice, chat_tools, read_input
from clawlet.api.openai.responses_store import ResponseStore, StoredResponse
from clawlet.api.openai.responses_stream import ResponseStream, new_response_id
from clawlet.api.options import OptionError
from clawlet.events import Event
from clawlet.llm.response_format import ResponseFormatError, parse_text_format
from clawlet.llm.sampling import Sampling
from clawlet.services import Workspaces

router = APIRouter()


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: dict[str, Any] | None = None


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
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
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
            "tools": self.tools or [],
            "tool_choice": self.tool_choice or "auto",
            "parallel_tool_calls": self.parallel_tool_calls is not False,
            "text": {"format": self.text_format or {"type": "text"}},
        }

    @property
    def text_format(self) -> dict[str, Any] | None:
        return self.text.format if self.text is not None else None


def unsupported(body: ResponsesRequest) -> JSONResponse | None:
    """The 400 for what this endpoint does not serve yet (see the module docstring), else None."""
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
    try:
        response_format = parse_text_format(body.text_format)
        tools, tool_choice = chat_tools(body.tools), chat_tool_choice(body.tool_choice)
    except ResponseFormatError as exc:
        return openai_error(str(exc), 400, code="invalid_response_format", param="text.format")
    except ToolsError as exc:
        return openai_error(str(exc), 400, param=exc.param)
    store = response_store(workspaces)
    try:
        read = await asyncio.to_thread(read_input, body.input, store.item)
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
            request, read.messages, body.model_extra, body.session_id
        )
    except OptionError as exc:
        return openai_error(str(exc), 400, code="invalid_option", param=exc.param)
    if previous is not None:  # the earlier response's session and workspace
        options.session_id, options.workspace = previous["session_id"], previous["workspace"]
    if read.results:  # function call results: the run paused on those calls continues
        started = await continue_turn(workspaces, options, read.results, "input")
        prompt = "\n".join(read.results.values())
    else:
        turn = split_turn(messages) if messages else "the input holds no user message"
        if isinstance(turn, str):
            return openai_error(turn.replace("message", "input item", 1), 400, param="input")
        instructions = "\n\n".join(text for text in (body.instructions, system_prompt) if text)
        started = await start_agent_turn(
            workspaces,
            options,
            turn,
            instructions,
            body.sampling(),
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            user=body.user,
        )
        prompt = "\n".join(str(m.content) for m in messages)
    if isinstance(started, JSONResponse):
        return started
    response_id, created_at = new_response_id(), int(time.time())

    def new_stream() -> ResponseStream:
        return ResponseStream(
            response_id=response_id,
            created_at=created_at,
            model=body.model,
            prompt=prompt,
            session_id=started.session_id,
            echo=body.echo(),
        )

    stream = new_stream()
    if body.store:
        # not streamed, the recorder is the answer's only watcher: it reads the turn's own events
        # (which remember the client calls the run pauses on); streamed, it watches on its own
        watched = started.run.events() if body.stream else started.events
        recorded = await record_response(store, new_stream(), watched, options.workspace)
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

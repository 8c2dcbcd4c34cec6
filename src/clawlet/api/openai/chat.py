"""``POST /v1/chat/completions`` and ``GET /v1/models``: clawlet's agent served as a model.

The last user message is the turn; earlier messages seed a new session's history. A session is
resumed from the ``X-Session-ID`` or ``X-OpenWebUI-Chat-Id`` header or a ``session_id`` body field,
and its id comes back in the ``X-Session-ID`` header (and the body when not streaming). Tools run
inside the agent: their activity never appears as OpenAI ``tool_calls`` (a client would run them
again); ``: keep-alive`` comments flow while they run. The client's own ``tools`` are offered beside
them; a call to one ends the answer with ``finish_reason: "tool_calls"``, and the client's next
request (its ``role: "tool"`` results) continues the same run (:mod:`clawlet.api.openai.client_tools`).

The model is ``clawlet`` (other ids get 404 ``model_not_found``); the client's sampling options
(``temperature``, ``top_p``, ``max_tokens``...) apply to every model call of the turn, and
``finish_reason`` is ``length`` when the cap cut the answer. Open WebUI's background tasks are no
turns: the model alone answers them, in no session (:mod:`clawlet.api.openai.tasks`).

``response_format`` (``json_object``, ``json_schema``) shapes the turn's final answer
(:mod:`clawlet.engine.structured`); images in the user message reach a model that accepts them and
are refused (400) for one that does not (:mod:`clawlet.llm.images`); ``user`` is logged with the
session id.

This endpoint cannot ask the user anything, so tools whose approval policy is ``ask`` are denied
(not offered; a call is refused) unless the request says ``dangerously-skip-permissions=true``,
which runs them without asking; ``ask_user`` is never offered. With thinking on, the thinking
block says which tools this affected.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from clawlet.api.deps import ServicesDep, WorkspacesDep
from clawlet.api.event_stream import KEEPALIVE_SECONDS
from clawlet.api.openai.client_tools import (
    ToolsError,
    call_index,
    continue_with_results,
    drop_unanswered_calls,
    match_results,
    parse_tool_choice,
    parse_tools,
    remembering_calls,
    tool_results,
)
from clawlet.api.openai.errors import openai_api_error, openai_error
from clawlet.api.openai.stream import ChatCompletionStream, finish_reason, usage_body
from clawlet.api.openai.tasks import is_task_prompt, task_events
from clawlet.api.options import (
    BODY_KEYS,
    HEADER_KEYS,
    AgentOptions,
    OptionError,
    check_tool_names,
    extract_in_message,
    from_mapping,
)
from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import permission_note
from clawlet.events import Event, RunFailed
from clawlet.llm.images import ContentError, Image, accepts_images, image_note, image_of
from clawlet.llm.providers import describe_model
from clawlet.llm.response_format import ResponseFormat, ResponseFormatError, parse_response_format
from clawlet.llm.sampling import Sampling
from clawlet.runtime.manager import Run
from clawlet.runtime.session_errors import SESSION_ERRORS, session_error
from clawlet.services import InvalidWorkspace, Services, Workspaces
from clawlet.sessions.store import validate_session_id

log = logging.getLogger(__name__)
router = APIRouter()

AGENT_MODEL_ID = "clawlet"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, examples=[AGENT_MODEL_ID])
    messages: list[ChatMessage] = Field(min_length=1)
    n: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    session_id: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = Field(default=None, max_length=256)

    def sampling(self) -> Sampling:
        """The sampling options for each model call (``max_completion_tokens`` wins)."""
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return Sampling(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_completion_tokens or self.max_tokens,
            stop=stop,
            seed=self.seed,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
        )


def message_text(message: ChatMessage) -> str:
    """Text of a message, a note per image after it (see :func:`content_error`)."""
    if isinstance(message.content, str):
        return message.content
    if not message.content:
        return ""
    text = "".join(str(part.get("text", "")) for part in message.content if part.get("type") == "text")
    notes = "\n".join(
        image_note(image_of(part).url) for part in message.content if part.get("type") == "image_url"
    )
    return "\n\n".join(piece for piece in (text, notes) if piece)


def message_images(message: ChatMessage) -> tuple[Image, ...]:
    """The images of a message."""
    if not isinstance(message.content, list):
        return ()
    return tuple(image_of(part) for part in message.content if part.get("type") == "image_url")


def content_error(messages: list[ChatMessage]) -> JSONResponse | None:
    """A 400 for a content part clawlet cannot pass on (never dropped silently), else ``None``."""
    for index, message in enumerate(messages):
        for part in message.content if isinstance(message.content, list) else ():
            kind = part.get("type")
            try:
                if kind == "image_url":
                    image_of(part)
                elif kind != "text":
                    raise ContentError(
                        f"content parts of type {kind!r} are not supported: send 'text' or 'image_url'"
                    )
            except ContentError as exc:
                return openai_error(
                    f"messages[{index}]: {exc}", 400, code="unsupported_content", param="messages"
                )
    return None


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


def resolve_options(
    request: Request,
    messages: list[ChatMessage],
    extra: dict[str, Any] | None = None,
    session_id: str | None = None,
) -> tuple[AgentOptions, list[ChatMessage], str]:
    """Options by precedence (``extra``: the body's other fields; ``session_id``: its
    ``session_id``), the messages with in-message options removed, and the client's system prompt
    (its system messages joined). Chat completions and the Responses API share it."""
    options = AgentOptions()
    fallback_session = request.headers.get("x-openwebui-chat-id")
    if fallback_session:
        options.session_id = fallback_session.strip()
    options.overlay(from_mapping(request.headers, [("x-session-id", "session-id"), *HEADER_KEYS]))
    options.overlay(from_mapping(extra or {}, BODY_KEYS))
    if session_id:
        options.session_id = session_id.strip()
    cleaned: list[ChatMessage] = []
    layers: dict[str, list[dict[str, Any]]] = {"system": [], "assistant": [], "user": []}
    for index, message in enumerate(messages):
        text, found = extract_in_message(message_text(message))
        is_current = index == len(messages) - 1
        role = "system" if message.role in ("system", "developer") else message.role
        if role == "system" or role == "assistant" or is_current:
            layers.get(role, layers["user"]).append(found)
        cleaned.append(ChatMessage(role=message.role, content=text))
    for role in ("system", "assistant", "user"):
        for found in layers[role]:
            options.overlay(found)
    system_prompt = "\n\n".join(
        message_text(m) for m in cleaned if m.role in ("system", "developer") and message_text(m)
    )
    return options, cleaned, system_prompt


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, workspaces: WorkspacesDep
) -> Response:
    if body.model != AGENT_MODEL_ID:
        return model_not_found(body.model)
    if body.n is not None and body.n > 1:
        return openai_error(
            "n > 1 is not supported: an agent run is not repeatable; send n=1 or leave it out",
            400,
            code="unsupported_value",
            param="n",
        )
    refused = content_error(body.messages)
    if refused is not None:
        return refused
    try:
        response_format = parse_response_format(body.response_format)
    except ResponseFormatError as exc:
        return openai_error(str(exc), 400, code="invalid_response_format", param="response_format")
    if len(body.messages) == 1 and body.messages[0].role == "user":
        only = message_text(body.messages[0])
        if is_task_prompt(only):
            return await answer_task(body, workspaces, only)
    try:
        options, messages, system_prompt = resolve_options(
            request, body.messages, body.model_extra, body.session_id
        )
        results = tool_results(body.messages, message_text)
    except OptionError as exc:
        return openai_error(str(exc), 400, code="invalid_option", param=exc.param)
    except ToolsError as exc:
        return openai_error(str(exc), 400, param=exc.param)
    if results is not None:
        return await answer_tool_results(body, workspaces, options, results, messages)
    turn = split_turn(messages)
    if isinstance(turn, str):
        return openai_error(turn, 400, param="messages")
    started = await start_agent_turn(
        workspaces,
        options,
        turn,
        system_prompt,
        body.sampling(),
        tools=body.tools,
        tool_choice=body.tool_choice,
        response_format=response_format,
        images=message_images(body.messages[-1]),
        user=body.user,
    )
    if isinstance(started, JSONResponse):
        return started
    prompt = "\n".join(message_text(m) for m in messages)
    return await respond(
        body, started.events, prompt, started.headers, started.session_id, options.thinking, started.note
    )


@dataclass(frozen=True)
class StartedTurn:
    """A turn the agent runs (``run``, which more watchers can follow): its events (keep-alive
    moments included), its session, the response headers naming the session (and workspace), and
    what the permission mode did to tools."""

    run: Run
    events: AsyncIterator[Event | None]
    session_id: str
    headers: dict[str, str]
    note: str


def session_headers(session_id: str, workspace: str | None) -> dict[str, str]:
    """The response headers naming a turn's session (and workspace)."""
    headers = {"X-Session-ID": session_id}
    if workspace:
        headers["X-Clawlet-Workspace"] = workspace
    return headers


async def start_agent_turn(
    workspaces: Workspaces,
    options: AgentOptions,
    turn: Turn,
    system_prompt: str,
    sampling: Sampling,
    *,
    tools: Any = None,
    tool_choice: Any = None,
    response_format: ResponseFormat | None = None,
    images: tuple[Image, ...] = (),
    user: str | None = None,
) -> StartedTurn | JSONResponse:
    """Start ``turn`` in the session ``options`` name (a new ``oai-*`` one if none), with the
    client's ``tools`` / ``tool_choice`` (as sent), answer format, the turn's images and its end
    ``user``, or the OpenAI-shaped error that refused it. Chat completions and the Responses API
    share it."""
    try:
        services = workspaces.get(options.workspace)
        clawlet_tools = await services.engine.available_tool_names()
        check_tool_names(options, clawlet_tools)
        client_tools = parse_tools(tools, clawlet_tools)
        choice = parse_tool_choice(tool_choice, client_tools)
    except InvalidWorkspace as exc:
        return openai_error(str(exc), 400, code="invalid_workspace", param="workspace")
    except OptionError as exc:
        return openai_error(str(exc), 400, code="unknown_tool", param=exc.param)
    except ToolsError as exc:
        return openai_error(str(exc), 400, param=exc.param)
    if images and not accepts_images(services.engine.provider):
        return openai_error(
            f"the model behind clawlet ({describe_model(services.settings).label}) does not accept "
            "images: send the message as text",
            400,
            code="unsupported_content",
            param="messages",
        )
    session_id = options.session_id or f"oai-{uuid.uuid4().hex}"
    context = RunContext.for_edge(
        skip_permissions=options.skip_permissions,
        allowed_tools=options.allowed_tools,
        disallowed_tools=options.disallowed_tools,
        extra_system_prompt=system_prompt,
        sampling=sampling,
        client_tools=client_tools,
        tool_choice=choice,
        response_format=response_format,
        images=images,
    )
    if user:
        log.info("chat completion for end user %r in session %s", user, session_id)
    note = permission_note(await services.engine.resolve_context(context))
    try:
        validate_session_id(session_id)
        await drop_unanswered_calls(services.sessions, session_id)
        run = await services.sessions.start_turn(
            session_id, turn.text, prior=turn.prior, title=False, context=context
        )
    except SESSION_ERRORS as exc:
        return openai_api_error(session_error(exc, session_id))
    headers = session_headers(session_id, options.workspace)
    events = run.events(keepalive=KEEPALIVE_SECONDS, merge_text=True)
    if client_tools:
        events = remembering_calls(events, call_index(services.sessions), session_id)
    return StartedTurn(run=run, events=events, session_id=session_id, headers=headers, note=note)


async def answer_tool_results(
    body: ChatCompletionRequest,
    workspaces: Workspaces,
    options: AgentOptions,
    results: dict[str, str],
    messages: list[ChatMessage],
) -> Response:
    """The client's results for the tool calls a run paused on (see
    :mod:`clawlet.api.openai.client_tools`): that run continues, and its continuation is the answer."""
    resumed = await continue_turn(workspaces, options, results, "messages")
    if isinstance(resumed, JSONResponse):
        return resumed
    prompt = "\n".join(results.values())
    return await respond(body, resumed.events, prompt, resumed.headers, resumed.session_id, options.thinking)


async def continue_turn(
    workspaces: Workspaces, options: AgentOptions, results: dict[str, str], param: str
) -> StartedTurn | JSONResponse:
    """Continue the run paused on the client tool calls ``results`` answer (by call id), in the
    session ``options`` name, else the one that issued the calls; or the OpenAI-shaped error
    (``param``: the request field holding the results). Chat completions and the Responses API
    share it."""
    try:
        services = workspaces.get(options.workspace)
    except InvalidWorkspace as exc:
        return openai_error(str(exc), 400, code="invalid_workspace", param="workspace")
    index = call_index(services.sessions)
    session_id = options.session_id or index.session_of(next(iter(results)))
    if not session_id:
        return openai_error(
            f"unknown tool call id(s) {', '.join(results)}: no paused run issued them "
            "(send the session's X-Session-ID header, or start with a user message)",
            400,
            param=param,
        )
    try:
        validate_session_id(session_id)
        answered = match_results(services.sessions.waiting_for(session_id), results)
        run = await continue_with_results(services.sessions, session_id, answered)
    except ToolsError as exc:
        return openai_error(str(exc), 400, param=param)
    except SESSION_ERRORS as exc:
        return openai_api_error(session_error(exc, session_id))
    headers = session_headers(session_id, options.workspace)
    events = remembering_calls(run.events(keepalive=KEEPALIVE_SECONDS, merge_text=True), index, session_id)
    return StartedTurn(run=run, events=events, session_id=session_id, headers=headers, note="")


async def respond(
    body: ChatCompletionRequest,
    events: AsyncIterator[Event | None],
    prompt: str,
    headers: dict[str, str],
    session_id: str | None,
    thinking: str | None = None,
    note: str = "",
) -> Response:
    """The completion (streamed or not) of a run's ``events``; ``session_id`` None for an answer
    that belongs to no session."""
    stream = ChatCompletionStream(
        thinking=thinking,
        session_id=session_id or "",
        note=note,
        completion_id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=body.model,
        prompt=prompt,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
    )
    if body.stream:
        return stream.response(events, headers)
    await stream.consume(events)
    if isinstance(stream.end, RunFailed):
        response = openai_error(stream.end.error, 500, code="agent_run_failed", run_started=True)
        response.headers.update(headers)
        return response
    message: dict[str, Any] = {"role": "assistant", "content": stream.content}
    if stream.tool_calls:
        message["content"] = stream.content or None
        message["tool_calls"] = [call.as_openai() for call in stream.tool_calls]
    completion: dict[str, Any] = {
        "id": stream.completion_id,
        "object": "chat.completion",
        "created": stream.created,
        "model": body.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(stream.usage, bool(stream.tool_calls)),
                "logprobs": None,
            }
        ],
        "usage": usage_body(stream.usage, prompt, stream.content),
    }
    if session_id is not None:
        completion["session_id"] = session_id
    return JSONResponse(completion, headers=headers)


async def answer_task(body: ChatCompletionRequest, workspaces: Workspaces, prompt: str) -> Response:
    """An Open WebUI background task (see :mod:`clawlet.api.openai.tasks`): the model alone, in
    no session, whatever session or options the request names."""
    engine = workspaces.default.engine
    return await respond(body, task_events(engine, prompt, body.sampling()), prompt, {}, None)


def model_not_found(model: str) -> JSONResponse:
    return openai_error(
        f"The model {model!r} does not exist: this server serves {AGENT_MODEL_ID!r} (see GET /v1/models)",
        404,
        code="model_not_found",
        param="model",
    )


def model_entry(services: Services) -> dict[str, Any]:
    """The agent as an OpenAI model object."""
    info = describe_model(services.settings)
    return {
        "id": AGENT_MODEL_ID,
        "object": "model",
        "created": 1_767_225_600,
        "owned_by": "clawlet",
        "description": f"clawlet agent on {info.label}",
    }


@router.get("/models")
def list_models(services: ServicesDep) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(services)]}


@router.get("/models/{model_id}", response_model=None)
def get_model(model_id: str, services: ServicesDep) -> dict[str, Any] | JSONResponse:
    if model_id != AGENT_MODEL_ID:
        return model_not_found(model_id)
    return model_entry(services)

"""LangChain's OpenAI-compatible chat models, relaying a streamed answer without per-chunk objects.

Streaming through ``ChatOpenAI``, the openai SDK builds a pydantic ``ChatCompletionChunk`` for
every chunk (``construct_type``, with runtime ``Protocol`` checks on each nested object), only for
LangChain to ``model_dump`` it straight back into a dict; and LangChain bounds the wait for each
chunk with ``asyncio.wait_for`` (a task per chunk). Together most of the CPU a relayed chunk costs.

Here the SDK sends the same request and opens the response as ``AsyncStream[object]`` (the SDK's
own request, retries and HTTP errors, unchanged), and :class:`~clawlet.llm.sse_chunks.SseChunks`
reads its body as the SDK would (server-sent events, ``[DONE]``, in-stream ``error``), giving each
chunk as the dict it arrived as; LangChain's own dict-based conversion turns it into the very
message chunks it builds from the ``model_dump``. Text chunks already buffered go on joined
(:class:`PlainChunkStream`). The per-chunk timeout (``stream_chunk_timeout``: same default, same
``LANGCHAIN_OPENAI_STREAM_CHUNK_TIMEOUT_S``, same :class:`~langchain_openai.StreamChunkTimeoutError`)
is kept, enforced here with ``asyncio.timeout``. Everything else (non-streamed calls, the Responses
API, structured output through the SDK's parsing stream) is LangChain's and the SDK's, unchanged.

The streamed request skips the SDK's request ``transform`` too, which walks every message against
the ``CompletionCreateParams`` TypedDicts (~20 ms for a session of 100 messages). Those types carry
no alias and no format (see :func:`transform_free_fields`), so on a body made only of JSON values
the transform only copies it; such a body goes to the resource's own ``_post`` with the options
``create`` would build (same path, keys in the same order, headers, timeout, retries, errors),
encoded by orjson (the SDK's own encoder writes the same compact JSON, slower). A body holding
anything else (a pydantic object, a tuple, ``omit``, an unknown parameter, a float that is not
finite) or a field whose type would need transforming takes the SDK's ``create`` as before.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Sequence
from functools import cache
from types import TracebackType
from typing import Any, Self, cast, get_args, get_type_hints

import orjson
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable
from langchain_deepseek import ChatDeepSeek
from langchain_openai import ChatOpenAI, StreamChunkTimeoutError
from langchain_openai.chat_models.base import BaseChatOpenAI
from openai import AsyncStream, not_given
from openai._base_client import make_request_options
from openai._utils._transform import PropertyInfo
from openai.resources.chat.completions import AsyncCompletions
from openai.types.chat import ChatCompletion
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import model_validator
from typing_extensions import is_typeddict

from clawlet.llm import request_sent
from clawlet.llm.assistant_text import build_payload
from clawlet.llm.chunk_join import MAX_JOINED, join_into, text_of
from clawlet.llm.sse_chunks import SseChunks
from clawlet.llm.tool_schemas import bind_converted_tools
from clawlet.ready_now import Suspended, step_once

logger = logging.getLogger(__name__)


class PlainChunkStream:
    """One streamed chat completion whose chunks come as the dicts they were sent as, the text chunks
    already buffered behind a text chunk joined to it (:mod:`clawlet.llm.chunk_join`). The stream's
    first text goes out alone, at once; after it, each text chunk takes with it the text-only chunks
    that can be read without waiting (:func:`clawlet.ready_now.step_once`): a burst is relayed in a
    few chunks, a trickle chunk by chunk."""

    def __init__(self, stream: AsyncStream[object], timeout: float | None, model_name: str | None) -> None:
        self.stream = stream
        self.chunks = SseChunks(stream.response)
        self.timeout = timeout
        self.model_name = model_name
        self.received = 0
        self.join_limit = 1
        """How many chunks the next text chunk may take with it: the first text goes alone, then
        twice as many each time up to :data:`MAX_JOINED`, so the first few texts go out with little
        parsing between them (the first one's way out needs the loop a few times)."""
        self.ahead: Any = None
        """A chunk read while joining that did not join: the next one to return."""
        self.failure: BaseException | None = None
        """The stream's end or error met while joining: raised after the joined chunk."""
        self.pending: Suspended[object] | None = None
        """The read of the next chunk, begun while joining, that waits for the network."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            await pending.cancel()
        await self.stream.close()

    def __aiter__(self) -> PlainChunkStream:
        return self

    async def __anext__(self) -> Any:
        chunk = await self.next_chunk()
        if not text_of(chunk):
            return chunk
        joining = self.join_limit
        self.join_limit = min(2 * self.join_limit, MAX_JOINED)
        for _ in range(joining - 1):
            if self.ahead is not None or self.failure is not None or self.pending is not None:
                break
            try:
                step = step_once(self.chunks.__anext__())
            except Exception as error:  # the end of the stream too: after this chunk
                self.failure = error
                break
            if isinstance(step, Suspended):
                self.pending = step
                break
            follower = self.received_chunk(step.value)
            if not join_into(chunk, follower):
                self.ahead = follower
        return chunk

    async def next_chunk(self) -> Any:
        """The next chunk: one read ahead while joining, or from the stream (within the chunk timeout)."""
        if self.ahead is not None:
            chunk, self.ahead = self.ahead, None
            return chunk
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        pending, self.pending = self.pending, None
        read: Awaitable[object] = pending if pending is not None else self.chunks.__anext__()
        if not self.timeout:
            return self.received_chunk(await read)
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                chunk = await read
        except TimeoutError as error:
            if not deadline.expired():
                raise
            logger.warning(
                "no chunk from the model in %g s (stream_chunk_timeout, %d chunks received)",
                self.timeout,
                self.received,
            )
            raise StreamChunkTimeoutError(
                self.timeout, model_name=self.model_name, chunks_received=self.received
            ) from error
        return self.received_chunk(chunk)

    def received_chunk(self, chunk: Any) -> Any:
        """A chunk as read, counted, with each choice sent without a delta given ``delta: None``."""
        self.received += 1
        if isinstance(chunk, dict):
            for choice in chunk.get("choices") or ():
                # the SDK's model reads a choice sent without a delta as ``delta: None``, which
                # LangChain skips; anything not a JSON object fails in LangChain as it would there
                if isinstance(choice, dict) and "delta" not in choice:
                    choice["delta"] = None
        return chunk


REQUEST_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")
# the order ``AsyncCompletions.create`` lays the body out in: these first, then its signature's
LEADING_FIELDS = ("model", "stream", "service_tier", "messages")


def transforming(annotation: object, seen: dict[int, object]) -> bool:
    """Whether the SDK's transform would rename or reformat anything typed ``annotation`` (``seen``
    holds what was looked at already, by id, and keeps it alive so no id is reused meanwhile)."""
    if id(annotation) in seen:
        return False
    seen[id(annotation)] = annotation
    if is_typeddict(annotation):
        hints = get_type_hints(annotation, include_extras=True)
        return any(transforming(hint, seen) for hint in hints.values())
    metadata = getattr(annotation, "__metadata__", ())
    if any(isinstance(info, PropertyInfo) and (info.alias or info.format) for info in metadata):
        return True
    return any(transforming(arg, seen) for arg in get_args(annotation))


@cache
def transform_free_fields() -> tuple[str, ...]:
    """The body fields of a streamed ``chat.completions.create`` whose types the SDK's transform
    leaves alone (with this SDK, all), in the order ``create`` sends them."""
    hints = get_type_hints(CompletionCreateParamsStreaming, include_extras=True)
    parameters = [name for name in inspect.signature(AsyncCompletions.create).parameters if name in hints]
    ordered = [*LEADING_FIELDS, *(name for name in parameters if name not in LEADING_FIELDS)]
    return tuple(name for name in ordered if not transforming(hints[name], {}))


def is_plain_json(value: object) -> bool:
    """Whether ``value`` is made only of dicts (string keys), lists, strings, numbers, bools and None:
    what the SDK's transform returns as it found it when the types carry no alias or format."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(cast(float, value))  # the SDK refuses NaN and infinities (allow_nan=False)
    if kind is dict:
        return all(
            type(key) is str and is_plain_json(item) for key, item in cast(dict[Any, Any], value).items()
        )
    if kind is list:
        return all(is_plain_json(item) for item in cast(list[Any], value))
    return False


def plain_body(params: dict[str, Any]) -> dict[str, Any] | None:
    """The body ``create(**params)`` would send, if the SDK's transform would send it as it is; else None."""
    fields = transform_free_fields()
    body_keys = params.keys() - REQUEST_OPTIONS
    if not {"model", "messages"} <= body_keys or not body_keys <= set(fields):
        return None
    body = {name: params[name] for name in fields if name in params}
    return body if is_plain_json(body) else None


class PlainChunkCompletions:
    """``AsyncOpenAI().chat.completions`` whose streamed ``create`` returns a :class:`PlainChunkStream`;
    everything else is the SDK's resource itself."""

    def __init__(self, completions: Any, timeout: float | None, model_name: str | None) -> None:
        self.completions = completions
        self.timeout = timeout
        self.model_name = model_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.completions, name)

    async def create(self, **params: Any) -> Any:
        if not params.get("stream"):
            return await self.completions.create(**params)
        body = plain_body(params)
        if body is None:
            response = await self.completions.with_raw_response.create(**params)
            stream = response.parse(to=AsyncStream[object])
        else:
            timeout: Any = params.get("timeout", not_given)
            stream = await self.completions._post(
                "/chat/completions",
                # the same JSON as the SDK's encoder writes (compact, UTF-8), by orjson: ~0.4 ms less
                # for a 50-turn session's 240 KB; extra_body is merged into a dict by the SDK
                **(
                    {"body": body}
                    if params.get("extra_body") is not None
                    else {"content": orjson.dumps(body)}
                ),
                options=make_request_options(
                    extra_headers=params.get("extra_headers"),
                    extra_query=params.get("extra_query"),
                    extra_body=params.get("extra_body"),
                    timeout=timeout,
                    security={"bearer_auth": True},
                ),
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=AsyncStream[object],
            )
        return PlainChunkStream(stream, self.timeout, self.model_name)


def relay_plain_chunks(model: BaseChatOpenAI, timeout: float | None = None) -> None:
    """Stream ``model``'s chat completions as plain chunks, moving its ``stream_chunk_timeout`` (or
    ``timeout`` if it has none left) into the stream so LangChain does not wrap every chunk too;
    its HTTP client runs a turn's work for while the model thinks (:mod:`clawlet.llm.request_sent`)."""
    if isinstance(model.async_client, PlainChunkCompletions) or model.async_client is None:
        return
    request_sent.install_on(model)  # a turn's pending work runs once a request is out
    chunk_timeout = model.stream_chunk_timeout or timeout
    model.async_client = PlainChunkCompletions(model.async_client, chunk_timeout, model.model_name)
    model.stream_chunk_timeout = None


class PlainChunkModel(BaseChatOpenAI):
    """What clawlet's OpenAI-compatible models add to LangChain's: streamed chunks relayed as plain
    dicts (see the module docstring), the request built without reading earlier answers character
    by character (:mod:`clawlet.llm.assistant_text`), each tool's schema converted once
    (:mod:`clawlet.llm.tool_schemas`). Listed first among a model's bases."""

    @model_validator(mode="after")
    def _relay_plain_chunks(self) -> Self:
        relay_plain_chunks(self)
        return self

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        messages = self._convert_input(input_).to_messages()
        return build_payload(super()._get_request_payload, messages, stop=stop, **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return bind_converted_tools(self, super().bind_tools, tools, **kwargs)


class PlainChunkChatOpenAI(PlainChunkModel, ChatOpenAI):
    """``ChatOpenAI`` with :class:`PlainChunkModel`'s additions."""


class PlainChunkChatDeepSeek(PlainChunkModel, ChatDeepSeek):
    """``ChatDeepSeek`` with :class:`PlainChunkModel`'s additions."""

    def _with_beta_api_base(self) -> Self:
        beta = super()._with_beta_api_base()  # a copy with fresh SDK clients
        current = self.async_client
        relay_plain_chunks(beta, current.timeout if isinstance(current, PlainChunkCompletions) else None)
        return beta

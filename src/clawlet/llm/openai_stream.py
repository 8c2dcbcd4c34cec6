"""LangChain's OpenAI-compatible chat models, relaying a streamed answer without per-chunk objects.

Streaming through ``ChatOpenAI``, the openai SDK builds a pydantic ``ChatCompletionChunk`` for
every chunk (``construct_type``, with runtime ``Protocol`` checks on each nested object), only for
LangChain to ``model_dump`` it straight back into a dict; and LangChain bounds the wait for each
chunk with ``asyncio.wait_for`` (a task per chunk). Together most of the CPU a relayed chunk costs.

Here the SDK streams the same response as ``AsyncStream[object]`` (the SDK's own request, retries,
HTTP errors, SSE parsing and in-stream ``error`` handling, unchanged), which yields each chunk as the
dict it arrived as; LangChain's own dict-based conversion turns it into the very message chunks it
builds from the ``model_dump``. The per-chunk timeout (``stream_chunk_timeout``: same default, same
``LANGCHAIN_OPENAI_STREAM_CHUNK_TIMEOUT_S``, same :class:`~langchain_openai.StreamChunkTimeoutError`)
is kept, enforced here with ``asyncio.timeout``. Everything else (non-streamed calls, the Responses
API, structured output through the SDK's parsing stream) is LangChain's and the SDK's, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any, Self

from langchain_deepseek import ChatDeepSeek
from langchain_openai import ChatOpenAI, StreamChunkTimeoutError
from langchain_openai.chat_models.base import BaseChatOpenAI
from openai import AsyncStream
from pydantic import model_validator

logger = logging.getLogger(__name__)


class PlainChunkStream:
    """One streamed chat completion whose chunks come as the dicts they were sent as."""

    def __init__(self, stream: AsyncStream[object], timeout: float | None, model_name: str | None) -> None:
        self.stream = stream
        self.timeout = timeout
        self.model_name = model_name
        self.received = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stream.close()

    def __aiter__(self) -> PlainChunkStream:
        return self

    async def __anext__(self) -> Any:
        if not self.timeout:
            chunk = await self.stream.__anext__()
        else:
            deadline = asyncio.timeout(self.timeout)
            try:
                async with deadline:
                    chunk = await self.stream.__anext__()
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
        self.received += 1
        if isinstance(chunk, dict):
            for choice in chunk.get("choices") or ():
                # the SDK's model reads a choice sent without a delta as ``delta: None``, which
                # LangChain skips; anything not a JSON object fails in LangChain as it would there
                if isinstance(choice, dict) and "delta" not in choice:
                    choice["delta"] = None
        return chunk


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
        response = await self.completions.with_raw_response.create(**params)
        return PlainChunkStream(response.parse(to=AsyncStream[object]), self.timeout, self.model_name)


def relay_plain_chunks(model: BaseChatOpenAI, timeout: float | None = None) -> None:
    """Stream ``model``'s chat completions as plain chunks, moving its ``stream_chunk_timeout`` (or
    ``timeout`` if it has none left) into the stream so LangChain does not wrap every chunk too."""
    if isinstance(model.async_client, PlainChunkCompletions) or model.async_client is None:
        return
    chunk_timeout = model.stream_chunk_timeout or timeout
    model.async_client = PlainChunkCompletions(model.async_client, chunk_timeout, model.model_name)
    model.stream_chunk_timeout = None


class PlainChunkChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` relaying streamed chunks as plain dicts (see the module docstring)."""

    @model_validator(mode="after")
    def _relay_plain_chunks(self) -> Self:
        relay_plain_chunks(self)
        return self


class PlainChunkChatDeepSeek(ChatDeepSeek):
    """``ChatDeepSeek`` relaying streamed chunks as plain dicts (see the module docstring)."""

    @model_validator(mode="after")
    def _relay_plain_chunks(self) -> Self:
        relay_plain_chunks(self)
        return self

    def _with_beta_api_base(self) -> Self:
        beta = super()._with_beta_api_base()  # a copy with fresh SDK clients
        current = self.async_client
        relay_plain_chunks(beta, current.timeout if isinstance(current, PlainChunkCompletions) else None)
        return beta

"""``ReplyingChatModel``: a chat model that decides its whole reply at once and streams it as a
provider would.

The base of the offline demo model (:mod:`clawlet.llm.demo`) and of the test model
:class:`clawlet.testing.function_model.FunctionModel`: a subclass says what it answers
(:meth:`ReplyingChatModel.reply`); this class gives it as one message (``invoke``) or as chunks
(``stream``/``astream``: :func:`chunks_of`), tool calls included, ``token_delay`` seconds apart.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

_CJK = "\u3000-\u9fff\uff00-\uffef"
_TOKEN = re.compile(rf"[{_CJK}]|[ \t]*[^\s{_CJK}]+|\s+")


def split_tokens(text: str) -> list[str]:
    """Split text into stream pieces: words with their leading spaces, each CJK character alone."""
    return _TOKEN.findall(text)


def chunks_of(message: AIMessage) -> Iterator[AIMessageChunk]:
    """``message`` as a provider streams it: its ``additional_kwargs`` (e.g. reasoning), its text in
    pieces, one chunk per tool call, and a last chunk with its usage and response metadata."""
    if message.additional_kwargs:
        yield AIMessageChunk(content="", additional_kwargs=message.additional_kwargs)
    for piece in split_tokens(message.text):
        yield AIMessageChunk(content=piece)
    for index, call in enumerate(message.tool_calls):
        args = json.dumps(call["args"], ensure_ascii=False)
        chunk = tool_call_chunk(name=call["name"], args=args, id=call["id"], index=index)
        yield AIMessageChunk(content="", tool_call_chunks=[chunk])
    yield AIMessageChunk(
        content="",
        usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata,
        chunk_position="last",
    )


class ReplyingChatModel(BaseChatModel):
    """A chat model answering with :meth:`reply` (see the module docstring)."""

    token_delay: float = 0.0
    """Seconds before each streamed chunk (``astream``), to look like a model that takes its time."""

    def reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        """The answer to ``messages`` (``kwargs``: the call's options, e.g. ``response_format``)."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages, **kwargs))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in chunks_of(self.reply(messages, **kwargs)):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=generation)
            yield generation

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in chunks_of(self.reply(messages, **kwargs)):
            await asyncio.sleep(self.token_delay)
            generation = ChatGenerationChunk(message=chunk)
            if run_manager and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=generation)
            yield generation

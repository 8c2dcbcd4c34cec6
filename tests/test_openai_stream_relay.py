"""The OpenAI-compatible and DeepSeek models clawlet builds (:mod:`clawlet.llm.openai_stream`) stream
exactly what LangChain's stock ``ChatOpenAI`` / ``ChatDeepSeek`` stream, from the same real HTTP
answers of a scripted upstream: every chunk (text, reasoning, tool-call chunks, usage, finish
reasons, response metadata, logprobs), the joined message, the errors and the chunk timeout; but
without building the SDK's pydantic chunk objects or a task per chunk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, BaseMessageChunk
from langchain_deepseek import ChatDeepSeek
from langchain_openai import ChatOpenAI, StreamChunkTimeoutError
from openai.types.chat import ChatCompletionChunk

from clawlet.config import Settings
from clawlet.llm.openai_stream import PlainChunkChatDeepSeek, PlainChunkChatOpenAI, PlainChunkCompletions
from clawlet.llm.providers import build_chat_model
from clawlet.testing.scripted_openai import (
    JSONDict,
    ScriptedOpenAIServer,
    ToolCall,
    Turn,
    text_turn,
    tool_turn,
)

ODD_FRAMES: list[JSONDict] = [
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "odd-model",
        "system_fingerprint": "fp_1",
        "service_tier": "flex",
        "unknown_field": {"kept": True},
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": "Hi", "reasoning": "think"},
                "logprobs": {
                    "content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]
                },
                "finish_reason": None,
            }
        ],
    },
    {"choices": [{"index": 0, "delta": {"content": " there", "reasoning_content": "more"}}]},
    {"choices": [{"index": 0, "delta": {"function_call": {"name": "legacy", "arguments": "{}"}}}]},
    {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_x", "function": {"name": "f"}}]}}
        ]
    },
    {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}}
        ]
    },
    {"choices": [{"index": 0, "finish_reason": "stop"}]},  # no delta: skipped by both
    {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "model": "odd-model",
        "service_tier": "flex",
    },
    {
        "choices": [],
        "service_tier": "flex",
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0},
            "prompt_cache_hit_tokens": 4,
        },
    },
]

CASES: dict[str, Turn] = {
    "text": text_turn("Hello there, 世界! How are you today?", chunks=6),
    "reasoning": Turn(text="It is 4.", reasoning="Two plus two makes four."),
    "tools": tool_turn(
        ToolCall("get_weather", {"city": "Paris"}, id="call_w", argument_chunks=4),
        ToolCall("get_time", {"zone": "CET"}, id="call_t"),
        text="Let me check.",
    ),
    "length": Turn(text="cut off right", finish="length"),
    "empty": text_turn(""),
    "odd": Turn(frames=ODD_FRAMES),
    "in-stream error": Turn(
        frames=[
            {"choices": [{"index": 0, "delta": {"content": "par"}}]},
            {"error": {"message": "the upstream broke", "type": "server_error"}},
        ]
    ),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


Streamed = tuple[list[JSONDict], JSONDict | None, str]


def answer(body: JSONDict) -> Turn:
    return CASES[str(body["messages"][-1]["content"])]


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(answer) as server:
        yield server


def models(
    upstream: ScriptedOpenAIServer, family: str, **options: Any
) -> tuple[BaseChatModel, BaseChatModel]:
    """(stock, clawlet's) for ``family``, built alike."""
    common: dict[str, Any] = {"model_name": "scripted-model", "max_retries": 0, "streaming": True, **options}
    if family == "deepseek":
        deepseek = {"api_base": upstream.base_url, "api_key": "k", **common}
        return ChatDeepSeek(**deepseek), PlainChunkChatDeepSeek(**deepseek)
    openai_options = {"base_url": upstream.base_url, "api_key": "k", **common}
    return ChatOpenAI(**openai_options), PlainChunkChatOpenAI(**openai_options)


def comparable(message: BaseMessage) -> JSONDict:
    """A message without its per-run ids; logprobs without the fields the sender left out (the
    SDK's model fills them in as ``None``; the plain relay passes the logprobs on as they came)."""
    dumped = message.model_dump(exclude={"id"})
    metadata = dumped["response_metadata"]
    metadata.pop("id", None)
    if isinstance(metadata.get("logprobs"), dict):
        metadata["logprobs"] = {
            key: value for key, value in metadata["logprobs"].items() if value is not None
        }
    return dumped


def both(stock: BaseChatModel, plain: BaseChatModel, case: str) -> tuple[Streamed, Streamed]:
    """What each streams, in one event loop (LangChain shares one HTTP client per base URL)."""

    async def run() -> tuple[Streamed, Streamed]:
        return await stream(stock, case), await stream(plain, case)

    return asyncio.run(run())


async def stream(model: BaseChatModel, case: str) -> Streamed:
    """Every streamed chunk, the joined message, and the error that ended the stream (type: text)."""
    chunks: list[JSONDict] = []
    joined: BaseMessageChunk | None = None
    error = ""
    try:
        async for chunk in model.astream(case):
            chunks.append(comparable(chunk))
            joined = chunk if joined is None else joined + chunk
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return chunks, (comparable(joined) if joined is not None else None), error


@pytest.mark.parametrize("family", ["openai", "deepseek"])
@pytest.mark.parametrize("stream_usage", [True, False])
@pytest.mark.parametrize("case", list(CASES))
def test_streams_exactly_what_the_stock_model_streams(
    upstream: ScriptedOpenAIServer, family: str, stream_usage: bool, case: str
) -> None:
    stock, plain = models(upstream, family, stream_usage=stream_usage)
    stock, plain = stock.bind_tools([WEATHER_TOOL]), plain.bind_tools([WEATHER_TOOL])  # type: ignore[assignment]
    expected, got = both(stock, plain, case)
    assert got == expected
    chunks, joined, error = got
    if case == "in-stream error":
        assert error == "APIError: the upstream broke" and len(chunks) == 1
    else:
        assert error == "" and joined is not None
    if case == "tools":
        assert joined is not None and [call["name"] for call in joined["tool_calls"]] == [
            "get_weather",
            "get_time",
        ]
        assert joined["response_metadata"]["finish_reason"] == "tool_calls"
    if case == "odd":
        assert (
            joined is not None and chunks[0]["response_metadata"]["logprobs"]["content"][0]["token"] == "Hi"
        )
        assert (
            joined["usage_metadata"]["input_token_details"]["flex_cache_read"] == 4 if stream_usage else True
        )
    if case == "reasoning" and family == "deepseek":
        assert (
            joined is not None
            and joined["additional_kwargs"]["reasoning_content"] == "Two plus two makes four."
        )


@pytest.mark.parametrize("family", ["openai", "deepseek"])
def test_an_http_error_raises_what_the_stock_model_raises(family: str) -> None:
    def refuse(body: JSONDict) -> Turn:
        raise ValueError("no answer today")

    with ScriptedOpenAIServer(refuse) as failing:  # a 500 with an OpenAI-style error body
        expected, got = both(*models(failing, family), "hi")
    assert got == expected == ([], None, got[2])
    assert "Error code: 500" in got[2] and "no answer today" in got[2]


@pytest.mark.parametrize("model_class", [ChatOpenAI, PlainChunkChatOpenAI])
def test_a_silent_upstream_ends_the_stream_with_the_chunk_timeout(
    model_class: Callable[..., BaseChatModel],
) -> None:
    stalled = text_turn("one two three", chunks=3, delay=600)  # the second chunk never comes in time
    with ScriptedOpenAIServer([stalled]) as upstream:
        model = model_class(
            model_name="m", base_url=upstream.base_url, api_key="k", max_retries=0, stream_chunk_timeout=0.5
        )

        async def run() -> BaseException:
            with pytest.raises(StreamChunkTimeoutError) as raised:
                async for _chunk in model.astream("hi"):
                    pass
            return raised.value

        error = asyncio.run(run())
    assert isinstance(error, StreamChunkTimeoutError) and error.timeout_s == 0.5


def test_the_built_model_relays_plain_chunks_without_a_task_per_chunk(
    monkeypatch: pytest.MonkeyPatch, upstream: ScriptedOpenAIServer
) -> None:
    """What makes a relayed chunk cheap: no ``ChatCompletionChunk`` object built and dumped back into
    a dict, no ``asyncio.wait_for`` (a task) around each chunk. The stock model does both."""
    counts = {"model_dump": 0, "wait_for": 0}
    model_dump, wait_for = ChatCompletionChunk.model_dump, asyncio.wait_for

    def counting_dump(self: ChatCompletionChunk, **kwargs: Any) -> dict[str, Any]:
        counts["model_dump"] += 1
        return model_dump(self, **kwargs)

    def counting_wait_for(awaitable: Any, timeout: float | None) -> Any:
        counts["wait_for"] += 1
        return wait_for(awaitable, timeout)

    monkeypatch.setattr(ChatCompletionChunk, "model_dump", counting_dump)
    monkeypatch.setattr(asyncio, "wait_for", counting_wait_for)
    settings = Settings(
        provider="openai", llm_base_url=upstream.base_url, llm_model="scripted-model", llm_api_key="k"
    )
    built = build_chat_model(settings)
    assert isinstance(built, PlainChunkChatOpenAI)
    stock = ChatOpenAI(
        model_name="scripted-model",
        base_url=upstream.base_url,
        api_key="k",
        streaming=True,
        stream_usage=True,
    )

    async def run() -> tuple[Streamed, dict[str, int], Streamed]:
        plain = await stream(built, "text")
        seen = dict(counts)
        return plain, seen, await stream(stock, "text")

    (chunks, joined, error), plain_counts, stocks = asyncio.run(run())
    assert error == "" and joined is not None and joined["content"] == "Hello there, 世界! How are you today?"
    assert plain_counts == {"model_dump": 0, "wait_for": 0}
    assert stocks[0] == chunks
    assert counts["model_dump"] > 0 and counts["wait_for"] > 0  # the probes do see the stock model


def test_a_non_streamed_call_is_the_stock_one(upstream: ScriptedOpenAIServer) -> None:
    stock, plain = models(upstream, "openai", streaming=False)

    async def run() -> tuple[BaseMessage, BaseMessage]:
        return await stock.ainvoke("tools"), await plain.ainvoke("tools")

    expected, got = asyncio.run(run())
    assert isinstance(got, AIMessage)
    assert comparable(got) == comparable(expected)
    assert [call["name"] for call in got.tool_calls] == ["get_weather", "get_time"]


def test_deepseeks_beta_endpoint_copy_relays_plain_chunks_with_the_same_timeout() -> None:
    """DeepSeek's strict structured output streams from a copy of the model on its beta endpoint."""
    model = PlainChunkChatDeepSeek(model_name="deepseek-chat", api_key="k", stream_chunk_timeout=7)
    beta = model._with_beta_api_base()
    assert isinstance(beta.async_client, PlainChunkCompletions) and beta.stream_chunk_timeout is None
    assert beta.async_client.timeout == 7 and beta.async_client is not model.async_client
    assert "beta" in str(beta.root_async_client.base_url)

"""The OpenAI-compatible and DeepSeek models clawlet builds (:mod:`clawlet.llm.openai_stream`) stream
exactly what LangChain's stock ``ChatOpenAI`` / ``ChatDeepSeek`` stream, from the same real HTTP
answers of a scripted upstream: every chunk (text, reasoning, tool-call chunks, usage, finish
reasons, response metadata, logprobs), the joined message, the errors and the chunk timeout; but
without building the SDK's pydantic chunk objects or a task per chunk. And they send the very request
body the stock models send, without the SDK's request transform walking it."""

from __future__ import annotations

import asyncio
import gc
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool as langchain_tool
from langchain_deepseek import ChatDeepSeek
from langchain_openai import ChatOpenAI, StreamChunkTimeoutError
from langchain_openai.chat_models import base as openai_base
from openai._base_client import BaseClient
from openai._utils import async_maybe_transform
from openai.resources.chat.completions import completions as sdk_completions
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel as PydanticModel

from clawlet.config import Settings
from clawlet.llm import tool_schemas
from clawlet.llm.openai_stream import (
    PlainChunkChatDeepSeek,
    PlainChunkChatOpenAI,
    PlainChunkCompletions,
    plain_body,
    transform_free_fields,
)
from clawlet.llm.providers import build_chat_model
from clawlet.ready_now import Suspended
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
    """Every streamed chunk (each run of chunks that differ only in their text added up: clawlet
    relays the text chunks that arrive together as one), the joined message, and the error that
    ended the stream (type: text)."""
    chunks: list[BaseMessageChunk] = []
    joined: BaseMessageChunk | None = None
    error = ""
    try:
        async for chunk in model.astream(case):
            if chunks and only_text(chunks[-1]) and only_text(chunk) and same_but_text(chunks[-1], chunk):
                chunks[-1] = chunks[-1] + chunk
            else:
                chunks.append(chunk)
            joined = chunk if joined is None else joined + chunk
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    whole = comparable(joined) if joined is not None else None
    return [comparable(chunk) for chunk in chunks], whole, error


TEXT_KWARGS = frozenset({"reasoning_content", "reasoning"})


def only_text(chunk: BaseMessageChunk) -> bool:
    """Whether a streamed chunk carries text (the answer's, or reasoning) and nothing else."""
    kwargs = chunk.additional_kwargs
    return (
        isinstance(chunk, AIMessageChunk)
        and isinstance(chunk.content, str)
        and not chunk.tool_call_chunks
        and chunk.usage_metadata is None
        and kwargs.keys() <= TEXT_KWARGS
        and all(isinstance(value, str) for value in kwargs.values())
    )


def same_but_text(before: BaseMessageChunk, chunk: BaseMessageChunk) -> bool:
    return (
        before.response_metadata == chunk.response_metadata
        and before.additional_kwargs.keys() == chunk.additional_kwargs.keys()
    )


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


def test_a_stream_left_while_its_next_read_waits_cancels_that_read_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the first text, a text chunk looks for buffered chunks to join; when none has come the
    read it began is kept for later. Leaving the stream then cancels that read where it waits (the
    response closed, nothing left running or reported to the loop's exception handler)."""
    cancelled: list[Suspended[object]] = []
    cancel = Suspended.cancel

    async def counting_cancel(self: Suspended[object]) -> None:
        cancelled.append(self)
        await cancel(self)

    monkeypatch.setattr(Suspended, "cancel", counting_cancel)
    trickle = text_turn("one two three four five six", chunks=6, delay=0.5)
    with ScriptedOpenAIServer([trickle]) as slow:
        model = PlainChunkChatOpenAI(model_name="m", base_url=slow.base_url, api_key="k", max_retries=0)

        async def run() -> tuple[list[str], list[dict[str, Any]]]:
            gc.collect()  # what earlier tests left (HTTP clients of closed loops) is finalized first
            for _ in range(10):
                await asyncio.sleep(0)
            problems: list[dict[str, Any]] = []
            asyncio.get_running_loop().set_exception_handler(lambda _loop, context: problems.append(context))
            texts: list[str] = []
            stream = model.astream("hi")
            async for chunk in stream:
                if chunk.content:
                    texts.append(str(chunk.content))
                if len(texts) == 2:
                    break
            await stream.aclose()
            gc.collect()
            for _ in range(10):  # let any finalizer the collection scheduled run
                await asyncio.sleep(0)
            return texts, problems

        texts, problems = asyncio.run(run())
    assert texts == ["one t", "wo th"]  # the scripted upstream cuts the text in even pieces
    assert len(cancelled) == 1 and cancelled[0].awaited
    assert problems == []


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


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEATHER_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "weather",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def history(turns: int) -> list[BaseMessage]:
    """A session of ``turns`` earlier turns, each a question, a tool call, its result and an answer."""
    messages: list[BaseMessage] = [SystemMessage("You are brief. Ünïcödé ok.")]
    for turn in range(turns):
        call = {"name": "get_weather", "args": {"city": f"City {turn}"}, "id": f"call_{turn}"}
        messages += [
            HumanMessage(f"Weather in City {turn}?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f'{{"sky": "clear", "n": {turn}}}', tool_call_id=f"call_{turn}"),
            AIMessage(f"Clear in City {turn}."),
        ]
    return messages


REQUESTS: dict[str, list[BaseMessage]] = {
    "text": [SystemMessage("Be brief."), HumanMessage("Hello there, 世界!")],
    "tool results": [*history(3), HumanMessage("And tomorrow?")],
    "images": [
        HumanMessage(
            content=[
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{PIXEL}", "detail": "low"},
                },
                {"type": "image", "base64": PIXEL, "mime_type": "image/png"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ]
        )
    ],
    "50 turns": [*history(50), HumanMessage("Summarise.")],
    "answers": [
        SystemMessage("Be brief."),
        HumanMessage("写一首诗"),
        AIMessage("床前明月光，疑是地上霜。" * 40, name="poet"),
        HumanMessage("And the weather?"),
        AIMessage(
            "Let me look.",
            tool_calls=[{"name": "get_weather", "args": {"city": "北京"}, "id": "call_a"}],
        ),
        ToolMessage('{"sky": "clear"}', tool_call_id="call_a"),
        AIMessage([{"type": "text", "text": "Clear "}, {"type": "text", "text": "skies."}]),
        AIMessage("Spoken.", additional_kwargs={"audio": {"id": "audio_1", "data": "…"}}),
        AIMessage(" "),
        AIMessage(""),
        AIMessage("Done.", response_metadata={"finish_reason": "stop"}),
        HumanMessage("Thanks.", name="ann"),
        HumanMessage("Bye."),
    ],
}
BINDINGS: dict[str, dict[str, Any]] = {
    "plain": {},
    "tools": {"tools": [WEATHER_TOOL], "tool_choice": "auto", "parallel_tool_calls": False},
    "forced tool": {"tools": [WEATHER_TOOL], "tool_choice": "get_weather"},
    "json_schema": {"response_format": WEATHER_SCHEMA},
}
OPTIONS: dict[str, Any] = {
    "temperature": 0.2,
    "top_p": 0.9,
    "max_tokens": 64,
    "seed": 7,
    "stop": ["END"],
    "presence_penalty": 0.1,
    "logit_bias": {"50256": -100},
    "extra_body": {"reasoning": {"effort": "low"}},
    "model_kwargs": {"user": "someone"},
}


def bound(model: BaseChatModel, binding: str) -> Any:
    kwargs = dict(BINDINGS[binding])
    if "tools" in kwargs:
        return model.bind_tools(kwargs.pop("tools"), **kwargs)
    return model.bind(**kwargs)


def sent_bodies(family: str, stream_usage: bool, request: str, binding: str) -> tuple[list[str], list[str]]:
    """The request bodies (JSON, keys in the order sent) the stock and clawlet's models send."""
    with ScriptedOpenAIServer(lambda body: text_turn('{"city": "Paris"}', chunks=3)) as upstream:
        stock, plain = models(upstream, family, stream_usage=stream_usage, **OPTIONS)

        async def run() -> list[str]:  # one event loop (LangChain shares one HTTP client per base URL)
            for model in (stock, plain):
                async for _chunk in bound(model, binding).astream(REQUESTS[request]):
                    pass
            return [json.dumps(body, ensure_ascii=False) for body in upstream.requests]

        bodies = asyncio.run(run())
    return bodies[:-1], bodies[-1:]


@pytest.mark.parametrize("family", ["openai", "deepseek"])
@pytest.mark.parametrize("stream_usage", [True, False])
@pytest.mark.parametrize(
    ("request_name", "binding"),
    [(name, binding) for name in REQUESTS if name not in ("50 turns", "answers") for binding in BINDINGS]
    + [("50 turns", "tools"), ("answers", "plain"), ("answers", "tools")],
)
def test_sends_the_request_body_the_stock_model_sends(
    family: str, stream_usage: bool, request_name: str, binding: str
) -> None:
    expected, got = sent_bodies(family, stream_usage, request_name, binding)
    assert len(got) == 1 and got == expected
    sent = json.loads(got[0])
    assert sent["stream"] is True and sent["temperature"] == 0.2 and sent["reasoning"] == {"effort": "low"}
    assert ("stream_options" in sent) == stream_usage
    if binding == "json_schema":
        assert sent["response_format"] == WEATHER_SCHEMA
    if request_name == "images":
        parts = sent["messages"][0]["content"]
        assert [part["type"] for part in parts] == ["text", "image_url", "image_url", "image_url"]


@pytest.mark.parametrize("family", ["openai", "deepseek"])
def test_an_earlier_answers_text_is_not_read_character_by_character(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangChain's message conversion walks an assistant message's content block by block, which on
    text is character by character (every turn, for every earlier answer). clawlet's models write
    a plain text message's entry themselves (LangChain never sees it) and hand LangChain every other
    answer without its text, putting the text back: the body is the stock one
    (test_sends_the_request_body_the_stock_model_sends) and LangChain never walks a long answer."""
    convert = openai_base._convert_message_to_dict
    walked: list[list[tuple[str, int]]] = []  # per request: (role, length of text content) converted

    def recording(message: BaseMessage, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(message.content, str):
            walked[-1].append((message.type, len(message.content)))
        return convert(message, *args, **kwargs)

    monkeypatch.setattr(openai_base, "_convert_message_to_dict", recording)
    with ScriptedOpenAIServer(lambda body: text_turn("Ok.", chunks=2)) as upstream:
        stock, plain = models(upstream, family)

        async def run() -> None:
            for model in (stock, plain):
                walked.append([])
                async for _chunk in model.astream(REQUESTS["answers"]):
                    pass

        asyncio.run(run())
        stock_walked, plain_walked = walked
        assert ("ai", len("床前明月光，疑是地上霜。" * 40)) in stock_walked
        # the named answer, the ones with tool calls, audio or metadata, each without its text
        assert [length for role, length in plain_walked if role == "ai"] == [0, 0, 0, 0]
        # the plain questions and answers (" ", "") are written by clawlet: only the named question
        # is converted
        assert ("human", len("写一首诗")) in stock_walked and ("ai", 1) in stock_walked
        assert [entry for entry in plain_walked if entry[0] == "human"] == [("human", len("Thanks."))]
        assert upstream.requests[0] == upstream.requests[1]


def test_a_responses_api_body_is_the_stock_one() -> None:
    """The Responses API's body is no list of chat messages: it is LangChain's, built from the
    messages as they were."""
    stock = ChatOpenAI(model="m", api_key="k", use_responses_api=True)
    plain = PlainChunkChatOpenAI(model="m", api_key="k", use_responses_api=True)
    messages = REQUESTS["answers"][:3]
    assert plain._get_request_payload(messages) == stock._get_request_payload(messages)
    assert "床前明月光" in json.dumps(plain._get_request_payload(messages), ensure_ascii=False)


@pytest.fixture
def transforms(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every body the SDK's chat completions ``create`` hands to its request transform."""
    seen: list[object] = []
    transform = async_maybe_transform  # the one the SDK's completions module imported

    async def counting(data: object, expected_type: object) -> Any:
        seen.append(data)
        return await transform(data, expected_type)

    monkeypatch.setattr(sdk_completions, "async_maybe_transform", counting)
    return seen


@pytest.mark.parametrize("family", ["openai", "deepseek"])
def test_a_streamed_request_skips_the_sdks_transform(family: str, transforms: list[object]) -> None:
    """What made the time to the first token grow with the session: the SDK's transform walking
    every message of the history against its TypedDicts. The stock model still runs it."""
    with ScriptedOpenAIServer(lambda body: text_turn("Clear.", chunks=2)) as upstream:
        stock, plain = models(upstream, family, stream_usage=True)
        plain, stock = bound(plain, "tools"), bound(stock, "tools")

        async def run(model: Any) -> str:
            return "".join([str(chunk.content) async for chunk in model.astream(REQUESTS["50 turns"])])

        async def both() -> tuple[str, int, str]:
            answer = await run(plain)
            return answer, len(transforms), await run(stock)

        assert asyncio.run(both()) == ("Clear.", 0, "Clear.")
        assert len(transforms) == 1  # the stock model's
        assert upstream.requests[0] == upstream.requests[1]


def test_a_body_the_transform_would_change_takes_the_sdks_path(transforms: list[object]) -> None:
    """A value the SDK's transform converts (here a tuple: a list on the wire) or an unknown
    parameter goes through the SDK's ``create``, exactly as before."""
    with ScriptedOpenAIServer(lambda body: text_turn("ok")) as upstream:
        stock, plain = models(upstream, "openai")

        async def run(model: BaseChatModel, **kwargs: Any) -> str:
            return "".join([str(chunk.content) async for chunk in model.astream("hi", **kwargs)])

        async def all_three() -> tuple[str, int, str, str]:
            answer = await run(plain, stop=("END", "STOP"))
            seen = len(transforms)
            try:
                await run(plain, no_such_parameter=1)
            except TypeError as error:
                return answer, seen, await run(stock, stop=("END", "STOP")), str(error)
            raise AssertionError("an unknown parameter was sent")

        answer, seen, stock_answer, error = asyncio.run(all_three())
        assert (answer, seen, stock_answer) == ("ok", 1, "ok") and "no_such_parameter" in error
        assert upstream.requests[0]["stop"] == ["END", "STOP"]
        assert upstream.requests[0] == upstream.requests[1]


def test_every_chat_completion_field_is_sent_as_it_is() -> None:
    """The SDK's transform renames or reformats nothing in a streamed chat completion's body: no
    field's type, however deep, carries an alias or a format."""
    fields = transform_free_fields()
    assert fields[:4] == ("model", "stream", "service_tier", "messages")
    assert {"messages", "tools", "tool_choice", "response_format", "stream_options", "temperature"} <= set(
        fields
    )
    assert len(fields) == len(set(fields)) == 37


def test_sends_the_http_request_the_stock_model_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same headers (the SDK's own, the client's defaults), body bytes, URL and timeout."""
    built: list[tuple[dict[str, str], bytes, str, object]] = []
    build_request = BaseClient._build_request

    def recording(self: BaseClient[Any, Any], options: Any, *, retries_taken: int = 0) -> Any:
        request = build_request(self, options, retries_taken=retries_taken)
        built.append(
            (dict(request.headers), request.content, str(request.url), request.extensions["timeout"])
        )
        return request

    monkeypatch.setattr(BaseClient, "_build_request", recording)
    with ScriptedOpenAIServer(lambda body: text_turn("ok")) as upstream:
        stock, plain = models(
            upstream, "openai", stream_usage=True, timeout=33, default_headers={"X-Team": "a"}
        )
        expected, got = both(stock, plain, "hi")
    assert got == expected and got[2] == ""
    assert len(built) == 2 and built[0] == built[1]
    headers, _body, _url, timeout = built[1]
    assert headers["x-team"] == "a" and timeout == {
        "connect": 33.0,
        "read": 33.0,
        "write": 33.0,
        "pool": 33.0,
    }


@pytest.mark.slow
@pytest.mark.parametrize("family", ["openai", "deepseek"])
def test_a_failed_request_is_retried_as_the_stock_model_retries_it(family: str) -> None:
    attempts: list[int] = []

    def fail_every_other(body: JSONDict) -> Turn:
        attempts.append(len(attempts))
        if len(attempts) % 2:
            raise ValueError("try again")  # a 500: the SDK retries it
        return text_turn("second time lucky", chunks=3)

    with ScriptedOpenAIServer(fail_every_other) as upstream:
        stock, plain = models(upstream, family, max_retries=1)
        expected, got = both(stock, plain, "hi")
    assert got == expected and got[1] is not None and got[1]["content"] == "second time lucky"
    assert len(attempts) == 4


def test_a_body_with_a_float_json_cannot_hold_takes_the_sdks_path() -> None:
    """The body is encoded by orjson only when it is plain JSON: a NaN or an infinity (which orjson
    would write as null) goes the SDK's way, whose encoder refuses it (allow_nan=False)."""
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert plain_body({**plain, "temperature": 0.5}) is not None
    for odd in (math.nan, math.inf, -math.inf):
        assert plain_body({**plain, "temperature": odd}) is None


class Forecast(PydanticModel):
    """A forecast."""

    city: str


@langchain_tool
def get_forecast(city: str, days: int = 3) -> str:
    """The weather forecast for a city (天气预报)."""
    return f"{city}: sunny for {days} days"


@pytest.mark.parametrize("family", ["openai", "deepseek"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"tool_choice": "get_forecast"},
        {"tool_choice": "any", "parallel_tool_calls": False},
        {"strict": True},
        {"strict": False, "response_format": Forecast},
        {"response_format": Forecast},
    ],
    ids=["plain", "forced", "any", "strict", "not strict", "response format"],
)
def test_tools_are_bound_as_the_stock_model_binds_them_converted_once(
    family: str, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """clawlet's models bind exactly what the stock models bind (the same schemas, strict as they
    set it), converting each tool's schema once, not on every model call; what a binding is given
    is its own (changing it changes no later binding)."""
    conversions: list[str] = []
    convert = tool_schemas.convert_to_openai_tool

    def counted(tool: Any, *, strict: bool | None = None) -> dict[str, Any]:
        conversions.append(tool.name)
        return convert(tool, strict=strict)

    monkeypatch.setattr(tool_schemas, "convert_to_openai_tool", counted)
    monkeypatch.setattr(tool_schemas, "_converted", {})  # what earlier tests converted
    with ScriptedOpenAIServer(lambda body: text_turn("ok")) as upstream:
        stock, plain = models(upstream, family)
        tools = [get_forecast, WEATHER_TOOL]
        for _ in range(3):
            got = plain.bind_tools(tools, **options)
            assert got.kwargs == stock.bind_tools(tools, **options).kwargs  # type: ignore[attr-defined]
            got.kwargs["tools"][0]["function"]["name"] = "changed"  # type: ignore[attr-defined]
        assert conversions == ["get_forecast"]

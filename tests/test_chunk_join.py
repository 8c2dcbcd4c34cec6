"""Buffered text chunks joined (clawlet.llm.chunk_join) and awaitables stepped once
(clawlet.ready_now): what joins and what does not, and a suspended read resumed or cancelled."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from clawlet.llm.chunk_join import join_into, text_of
from clawlet.ready_now import Ready, Suspended, step_once


def chunk(delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}],
    }


def test_text_chunks_join_into_the_first() -> None:
    first = chunk({"content": "你好"})
    assert join_into(first, chunk({"content": ", 世界"}))
    assert join_into(first, chunk({"content": "!"}))
    assert first == chunk({"content": "你好, 世界!"})


def test_reasoning_joins_and_the_fields_that_stay_equal_stay() -> None:
    first = chunk({"role": "assistant", "content": None, "reasoning_content": "two "})
    assert join_into(first, chunk({"role": "assistant", "content": None, "reasoning_content": "and two"}))
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "two and two",
    }


def test_obfuscation_padding_differs_and_still_joins() -> None:
    first = {**chunk({"content": "a"}), "obfuscation": "xyz"}
    assert join_into(first, {**chunk({"content": "b"}), "obfuscation": "q"})
    assert first["choices"][0]["delta"]["content"] == "ab" and first["obfuscation"] == "xyz"


@pytest.mark.parametrize(
    "follower",
    [
        chunk({"content": "b"}, finish_reason="stop"),
        chunk({"content": "b"}, logprobs={"content": []}),
        chunk({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0}]}),
        chunk({"content": "b", "role": "assistant"}),
        chunk({"reasoning_content": "b"}),
        {**chunk({"content": "b"}), "usage": {"total_tokens": 3}},
        {**chunk({"content": "b"}), "model": "other"},
        {
            **chunk({"content": "b"}),
            "choices": [{"index": 1, "delta": {"content": "b"}, "finish_reason": None}],
        },
        {**chunk({"content": "b"}), "choices": []},
        {"error": {"message": "broken"}},
        "not an object",
    ],
)
def test_anything_but_text_ends_the_run(follower: Any) -> None:
    first = chunk({"content": "a"})
    unchanged = copy.deepcopy(first)
    assert not join_into(first, follower)
    assert first == unchanged


def test_what_counts_as_text() -> None:
    assert text_of(chunk({"content": "a"})) and text_of(chunk({"content": None, "reasoning_content": "r"}))
    assert not text_of(chunk({"role": "assistant", "content": ""}))
    assert not text_of(chunk({"tool_calls": []})) and not text_of({"choices": []}) and not text_of("x")


async def test_a_ready_awaitable_gives_its_result_in_one_step() -> None:
    async def ready() -> str:
        return "now"

    assert step_once(ready()) == Ready("now")

    async def failing() -> str:
        raise StopAsyncIteration

    with pytest.raises(StopAsyncIteration):
        step_once(failing())


async def test_a_waiting_awaitable_resumes_where_it_stopped_in_the_task() -> None:
    arrived: asyncio.Queue[str] = asyncio.Queue()

    async def read() -> str:
        first = await arrived.get()
        return first + await arrived.get()

    step = step_once(read())
    assert isinstance(step, Suspended)
    arrived.put_nowait("a")
    arrived.put_nowait("b")
    async with asyncio.timeout(60):
        assert await step == "ab"
    with pytest.raises(RuntimeError):
        await step  # once


async def test_a_timeout_around_the_resumed_read_cancels_it_where_it_waits() -> None:
    cleaned: list[str] = []

    async def read() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("closed")
        return "never"

    step = step_once(read())
    assert isinstance(step, Suspended)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await step
    assert cleaned == ["closed"]


async def test_a_suspended_read_no_longer_wanted_is_cancelled_and_cleans_up() -> None:
    steps: list[str] = []
    go_on = asyncio.Event()

    async def read() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            steps.append("cancelled")
            await go_on.wait()  # a clean-up that itself waits
            steps.append("cleaned")
            raise
        return "never"

    step = step_once(read())
    assert isinstance(step, Suspended)
    asyncio.get_running_loop().call_soon(go_on.set)
    async with asyncio.timeout(60):
        await step.cancel()
    assert steps == ["cancelled", "cleaned"]
    await step.cancel()  # a second time: nothing left

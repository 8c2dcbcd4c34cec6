"""A run's event log as its watchers read it: every event once, in order; with ``merge_text`` the
text chunks that piled up while a watcher was busy arrive as one event (fewer frames to relay)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from clawlet.events import (
    Event,
    RunFinished,
    RunStarted,
    TextDelta,
    Thinking,
    ToolStart,
    merge_text_deltas,
)
from clawlet.runtime.manager import Run


def test_merge_joins_adjacent_text_and_keeps_everything_else_in_order() -> None:
    events: list[Event] = [
        RunStarted("s", "r"),
        Thinking("a"),
        Thinking("b"),
        TextDelta("你"),
        TextDelta("好"),
        ToolStart("read_file", "x", "c1"),
        TextDelta("!"),
        RunFinished("你好!", "s"),
    ]
    assert merge_text_deltas(events) == [
        RunStarted("s", "r"),
        Thinking("ab"),
        TextDelta("你好"),
        ToolStart("read_file", "x", "c1"),
        TextDelta("!"),
        RunFinished("你好!", "s"),
    ]
    assert merge_text_deltas([]) == []


async def _follow(run: Run, *, merge_text: bool) -> list[Event]:
    return [event async for event in run.events(merge_text=merge_text) if event is not None]


def test_a_watcher_that_fell_behind_gets_the_piled_up_text_as_one_event() -> None:
    async def scenario() -> tuple[list[Event], list[Event], list[Event]]:
        run = Run("s")
        await run.publish(RunStarted("s", "r"))
        live = asyncio.create_task(_follow(run, merge_text=True))
        await asyncio.sleep(0)  # the live watcher is waiting for the next event
        for chunk in ("one ", "two ", "three"):
            await run.publish(TextDelta(chunk))
        await run.publish(RunFinished("one two three", "s"))
        await run.close()
        late_merged = await _follow(run, merge_text=True)
        late_plain = await _follow(run, merge_text=False)
        return await live, late_merged, late_plain

    live, late_merged, late_plain = asyncio.run(scenario())
    text = [TextDelta("one "), TextDelta("two "), TextDelta("three")]
    assert late_plain == [RunStarted("s", "r"), *text, RunFinished("one two three", "s")]
    assert late_merged == [
        RunStarted("s", "r"),
        TextDelta("one two three"),
        RunFinished("one two three", "s"),
    ]
    # the live watcher may see the chunks merged or one by one: the text is the same either way
    assert "".join(event.text for event in live if isinstance(event, TextDelta)) == "one two three"
    assert live[0] == RunStarted("s", "r") and live[-1] == RunFinished("one two three", "s")


def test_a_watcher_waits_for_each_event_without_a_task_per_wait() -> None:
    """A watcher's every wait for the next event is a plain wait in its own task (``asyncio.timeout``,
    not ``asyncio.wait_for``, which starts a task per wait: per relayed chunk, on Python 3.11)."""

    async def scenario() -> tuple[list[Event], int]:
        created = 0
        loop = asyncio.get_running_loop()

        def count_tasks(
            loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
        ) -> asyncio.Task[Any]:
            nonlocal created
            created += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(count_tasks)  # type: ignore[arg-type]
        run = Run("s")

        async def follow() -> list[Event]:
            return [event async for event in run.events(keepalive=600) if event is not None]

        watcher = asyncio.ensure_future(follow())
        for index in range(20):
            await asyncio.sleep(0)  # the watcher is waiting for the next event
            await run.publish(TextDelta(str(index)))
        await run.close()
        return await watcher, created

    seen, created = asyncio.run(scenario())
    assert seen == [TextDelta(str(index)) for index in range(20)]
    assert created == 1  # the watcher itself


def test_a_silent_run_gives_its_watcher_a_keepalive_then_the_next_event() -> None:
    async def scenario() -> list[Event | None]:
        run = Run("s")
        seen: list[Event | None] = []
        async for event in run.events(keepalive=0.01):
            seen.append(event)
            if event is None and not run.log:
                await run.publish(TextDelta("late"))
                await run.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] is None and seen[-1] == TextDelta("late") and set(seen[:-1]) == {None}

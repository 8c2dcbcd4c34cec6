"""The session manager's turns over a ``FunctionRuntime`` (the runtime is not what is tested here):
what is stored, the history the runtime gets, a failing turn, a cancelled one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from clawlet.config import Settings
from clawlet.events import (
    Event,
    NewSegment,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from clawlet.runtime.base import UserMessage
from clawlet.runtime.manager import Run, SessionManager
from clawlet.sessions.store import TranscriptStore
from clawlet.testing.function_runtime import FunctionRuntime, TurnFunction

DEADLINE = 60.0


def manager_with(settings: Settings, function: TurnFunction) -> tuple[SessionManager, FunctionRuntime]:
    runtime = FunctionRuntime(function)
    store = TranscriptStore(settings.paths.sessions, settings.paths.root)
    return SessionManager(settings, store, {"engine": lambda: runtime}), runtime


async def finished(run: Run) -> list[Event]:
    await asyncio.wait_for(run.wait(), DEADLINE)
    return list(run.log)


def read_and_answer(message: UserMessage) -> list[Event]:
    return [
        TextDelta("Let me "),
        TextDelta("look."),
        ToolStart(tool="read_file", input="notes.md", call_id="c1"),
        ToolEnd(tool="read_file", output="milk, eggs", call_id="c1"),
        NewSegment(),
        TextDelta(f"You asked: {message.text}"),
    ]


async def test_a_turn_is_stored_in_segments_and_is_the_next_turns_history(settings: Settings) -> None:
    manager, runtime = manager_with(settings, read_and_answer)

    events = await finished(await manager.start_turn("s1", "what is on the list?", title=False))

    assert isinstance(events[0], RunStarted)
    assert events[-1] == RunFinished("Let me look.\n\nYou asked: what is on the list?", "s1")
    stored = manager.store.load("s1")["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "what is on the list?"),
        ("assistant", "Let me look."),
        ("assistant", "You asked: what is on the list?"),
    ]
    assert stored[1]["tool_calls"][0]["output"] == "milk, eggs"

    await finished(await manager.start_turn("s1", "thanks", title=False))
    first, second = runtime.messages
    assert first.history == []
    assert second.history == [
        {"role": "user", "content": "what is on the list?"},
        {"role": "assistant", "content": "Let me look.\n\nYou asked: what is on the list?"},
    ]


async def test_a_runtime_that_raises_fails_the_run_and_keeps_what_it_said(settings: Settings) -> None:
    async def breaks(message: UserMessage) -> AsyncIterator[Event]:
        yield TextDelta("Half an answer")
        raise ConnectionError("the runtime went away")

    manager, _ = manager_with(settings, breaks)

    events = await finished(await manager.start_turn("s1", "hello", title=False))

    assert events[-1] == RunFailed("ConnectionError: the runtime went away", "s1")
    stored = manager.store.load("s1")["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [("user", "hello"), ("assistant", "Half an answer")]


async def test_cancelling_a_waiting_turn_cancels_its_runtime_and_keeps_the_text(
    settings: Settings,
) -> None:
    said = asyncio.Event()

    async def never_ends(message: UserMessage) -> AsyncIterator[Event]:
        yield TextDelta("Working on it")
        said.set()
        await asyncio.Event().wait()  # until cancelled
        yield TextDelta("never")

    manager, runtime = manager_with(settings, never_ends)
    run = await manager.start_turn("s1", "do it", title=False)
    await asyncio.wait_for(said.wait(), DEADLINE)

    assert await manager.cancel("s1") is True

    events = await finished(run)
    assert events[-1] == RunCancelled("s1", "Working on it")
    assert runtime.cancels == 1
    assert manager.store.load("s1")["messages"][-1]["content"] == "Working on it"


async def test_the_first_event_goes_out_before_what_piled_up_while_the_message_was_written(
    settings: Settings,
) -> None:
    """The answer waits for the user's message to be on disk; what the runtime sent meanwhile comes
    at once after it, and the watchers get the first event before the turn publishes the rest."""
    manager, _ = manager_with(settings, lambda message: [TextDelta(f"w{n} ") for n in range(50)])
    run = await manager.start_turn("s1", "hello", title=False)
    published_at_first = None
    async for event in run.events():
        if isinstance(event, TextDelta):
            published_at_first = sum(isinstance(each, TextDelta) for each in run.log)
            break
    events = await finished(run)
    assert published_at_first == 1
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "".join(f"w{n} " for n in range(50))


@pytest.mark.parametrize("on_this_loop", [True, False])
async def test_the_user_message_is_on_disk_before_an_in_process_turn_starts_and_before_any_answer(
    settings: Settings, on_this_loop: bool
) -> None:
    """A runtime on this event loop starts once the turn's user message is on disk (a write beside
    it waits for the loop at every system call); another starts while it is written. Either way
    nothing of the answer goes out before it is on disk."""
    on_disk_at: dict[str, bool] = {}

    def stored() -> bool:
        return any(m["content"] == "hello" for m in manager.store.kept_for_agent("s1") or [])

    async def answer(message: UserMessage) -> AsyncIterator[Event]:
        on_disk_at["start"] = stored()
        yield TextDelta("ok")

    manager, runtime = manager_with(settings, answer)
    runtime.turns_on_this_loop = on_this_loop
    run = await manager.start_turn("s1", "hello", title=False)
    async for event in run.events():
        if isinstance(event, TextDelta):
            on_disk_at["first text"] = stored()
    await finished(run)
    if on_this_loop:
        assert on_disk_at["start"]
    assert on_disk_at["first text"]
    assert manager.store.load("s1")["messages"][0]["content"] == "hello"


async def test_a_failed_write_of_the_user_message_fails_an_in_process_turn_before_it_starts(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []

    def answer(message: UserMessage) -> list[Event]:
        started.append(message.text)
        return [TextDelta("ok")]

    manager, runtime = manager_with(settings, answer)
    runtime.turns_on_this_loop = True

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manager.store, "append", full)
    events = await finished(await manager.start_turn("s1", "hello", title=False))
    assert started == []  # the model was never asked
    assert isinstance(events[-1], RunFailed) and "No space left" in events[-1].error


async def test_a_new_session_loads_no_history_through_a_worker_thread(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, runtime = manager_with(settings, read_and_answer)
    loads: list[str] = []
    load_for_agent = TranscriptStore.load_for_agent

    def counted(store: TranscriptStore, session_id: str) -> list[dict[str, str]]:
        loads.append(session_id)
        return load_for_agent(store, session_id)

    monkeypatch.setattr(TranscriptStore, "load_for_agent", counted)
    await finished(await manager.start_turn("fresh", "first?", title=False))
    assert loads == []  # no transcript yet: one stat says the history is empty
    assert runtime.messages[-1].history == []
    await finished(await manager.start_turn("fresh", "second?", title=False))
    assert loads == []  # a session this store wrote is kept: no read either
    assert [item["role"] for item in runtime.messages[-1].history] == ["user", "assistant"]

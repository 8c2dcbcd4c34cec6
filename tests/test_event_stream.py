"""The translator base protocol edges share (clawlet.event_stream), its SSE form
(clawlet.api.event_stream) and the one rule for joining a run's text (clawlet.events.RunText)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

import pytest

from clawlet.api.event_stream import HOLE, KEEPALIVE, FrameTemplate, SseEventStream, sse_data, sse_frame
from clawlet.api.native import NativeStream, event_type
from clawlet.api.openai.stream import ChatCompletionStream
from clawlet.api.workbench.stream import WorkbenchStream
from clawlet.event_stream import EventStream
from clawlet.events import (
    EVENT_TYPES,
    ApprovalRequested,
    Event,
    NewSegment,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunText,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.inbox.backends import Outcome, RunWatch

T = TypeVar("T")

APPROVAL = ApprovalRequested("a1", "shell", {"command": "ls"}, "c1", "ls")
QUESTION = QuestionAsked("q1", "which one?", "c2")

ONE_OF_EACH: list[Event] = [
    RunStarted("s", "r"),
    Retrieval("q", [{"text": "hit"}]),
    Thinking("hmm"),
    TextDelta("Hello"),
    TextDelta(" world"),
    ToolStart("shell", "ls", "c1"),
    ToolEnd("shell", "a.txt", "c1", is_error=True),
    NewSegment(),
    TextDelta("Done."),
    Usage(3, 4),
    APPROVAL,
    QUESTION,
    RunWaiting("s", "Hello world\n\nDone.", [APPROVAL, QUESTION]),
    RunFinished("late", "s"),
    RunCancelled("s", "late"),
    RunFailed("late", "s"),
    Title("s", "A title"),
]


class Recorder(EventStream[str]):
    """Names the handler each event reached."""

    def before_stream(self) -> Iterable[str]:
        return ("before",)

    def after_stream(self) -> Iterable[str]:
        return ("after",)

    def on_run_started(self, event: RunStarted) -> Iterable[str]:
        return ("run_started",)

    def on_retrieval(self, event: Retrieval) -> Iterable[str]:
        return ("retrieval",)

    def on_text(self, event: TextDelta) -> Iterable[str]:
        return ("text:" + event.text,)

    def on_thinking(self, event: Thinking) -> Iterable[str]:
        return ("thinking",)

    def on_tool_start(self, event: ToolStart) -> Iterable[str]:
        return ("tool_start",)

    def on_tool_end(self, event: ToolEnd) -> Iterable[str]:
        return ("tool_end",)

    def on_new_segment(self, event: NewSegment) -> Iterable[str]:
        return ("new_segment",)

    def on_usage(self, event: Usage) -> Iterable[str]:
        return ("usage",)

    def on_approval(self, event: ApprovalRequested) -> Iterable[str]:
        return ("approval",)

    def on_question(self, event: QuestionAsked) -> Iterable[str]:
        return ("question",)

    def on_title(self, event: Title) -> Iterable[str]:
        return ("title",)

    def on_finished(self, event: RunFinished) -> Iterable[str]:
        return ("finished",)

    def on_cancelled(self, event: RunCancelled) -> Iterable[str]:
        return ("cancelled",)

    def on_failed(self, event: RunFailed) -> Iterable[str]:
        return ("failed:" + event.error,)

    def on_waiting(self, event: RunWaiting) -> Iterable[str]:
        return ("waiting",)


class StopAtEnd(Recorder):
    stop_at_end = True


class SseRecorder(SseEventStream, Recorder):
    pass


async def source(events: list[Event | None], error: Exception | None = None) -> AsyncIterator[Event | None]:
    for event in events:
        yield event
    if error is not None:
        raise error


def run(stream: EventStream[T], events: list[Event | None], error: Exception | None = None) -> list[T]:
    async def collect() -> list[T]:
        return [item async for item in stream.transform(source(events, error))]

    return asyncio.run(collect())


def test_every_event_kind_has_its_own_abstract_handler() -> None:
    handlers = {name for name in EventStream.__abstractmethods__ if name.startswith("on_")}
    assert len(handlers) == len(EVENT_TYPES)


def test_every_event_kind_reaches_its_handler_and_the_run_state_is_kept() -> None:
    stream = Recorder()
    items = run(stream, list(ONE_OF_EACH))
    assert items == [
        "before",
        "run_started",
        "retrieval",
        "thinking",
        "text:Hello",
        "text: world",
        "tool_start",
        "tool_end",
        "new_segment",
        "text:Done.",
        "usage",
        "approval",
        "question",
        "waiting",
        "finished",
        "cancelled",
        "failed:late",
        "title",
        "after",
    ]
    assert stream.answer.segments == ["Hello world", "Done."]
    assert stream.answer.text == "Hello world\n\nDone."
    assert stream.usage == Usage(3, 4)
    assert isinstance(stream.end, RunWaiting)  # the first terminal event is how the run ended


def test_stop_at_end_stops_after_the_terminal_event() -> None:
    events: list[Event | None] = [TextDelta("hi"), RunFinished("hi", "s"), Title("s", "T")]
    assert run(StopAtEnd(), events) == ["before", "text:hi", "finished", "after"]
    assert run(Recorder(), events) == ["before", "text:hi", "finished", "title", "after"]


def test_batches_are_the_items_ready_together() -> None:
    """One list per moment: the opening, each event's items, and the run's end with the closing
    (with ``stop_at_end``) — what an SSE response sends as one body message each."""

    class TwoPerText(StopAtEnd):
        def on_text(self, event: TextDelta) -> Iterable[str]:
            return ("text:" + event.text, "more")

    async def collect(stream: EventStream[str], events: list[Event | None]) -> list[list[str]]:
        return [batch async for batch in stream.batches(source(events))]

    events: list[Event | None] = [TextDelta("a"), Usage(1, 2), None, RunFinished("a", "s"), Title("s", "T")]
    assert asyncio.run(collect(TwoPerText(), events)) == [
        ["before"],
        ["text:a", "more"],
        ["usage"],
        ["finished", "after"],
    ]
    assert asyncio.run(collect(SseRecorder(), events)) == [
        ["before"],
        ["text:a"],
        ["usage"],
        [KEEPALIVE],
        ["finished"],
        ["title"],
        ["after"],
    ]


def test_keepalive_moments() -> None:
    events: list[Event | None] = [None, TextDelta("x"), None, RunFinished("x", "s")]
    assert run(Recorder(), events) == ["before", "text:x", "finished", "after"]
    assert run(SseRecorder(), events) == ["before", KEEPALIVE, "text:x", KEEPALIVE, "finished", "after"]


def test_a_broken_source_is_the_runs_failure_and_the_wire_still_closes() -> None:
    stream = Recorder()
    items = run(stream, [TextDelta("partial")], OSError("connection lost"))
    assert items == ["before", "text:partial", "failed:OSError: connection lost", "after"]
    assert isinstance(stream.end, RunFailed)
    # after the run's own end, a broken source adds nothing
    assert run(Recorder(), [RunFinished("", "s")], OSError("late")) == ["before", "finished", "after"]


def test_run_text_joins_non_empty_segments_with_a_blank_line() -> None:
    text = RunText()
    events: list[Event] = [
        NewSegment(),
        TextDelta(""),
        NewSegment(),
        TextDelta("a"),
        TextDelta("b"),
        NewSegment(),
    ]
    for event in events:
        text.observe(event)
    assert text.segments == ["ab"]
    text.observe(TextDelta("c"))
    assert text.text == "ab\n\nc"
    assert RunText().text == ""


def test_sse_encoding() -> None:
    assert sse_frame("token", {"content": "é"}) == 'event: token\ndata: {"type": "token", "content": "é"}\n\n'
    assert json.loads(sse_data({"a": 1}).removeprefix("data: ")) == {"a": 1}


#: text chunks that JSON must escape or keep as they are
AWKWARD_TEXT = [
    "",
    "plain ",
    'quote " and \\ back',
    "new\nline\ttab",
    "é 中文 🦀",
    "\x00\x1f",
    "\ud800 lone",
    HOLE,
]


def test_a_frame_template_is_the_frame_it_was_made_from() -> None:
    token = FrameTemplate(sse_frame("token", {"content": HOLE}))
    data = FrameTemplate(sse_data({"a": [1, {"b": HOLE}], "z": None}))
    for text in AWKWARD_TEXT:
        assert token.fill(text) == sse_frame("token", {"content": text})
        assert data.fill(text) == sse_data({"a": [1, {"b": text}], "z": None})
    with pytest.raises(ValueError):
        FrameTemplate(sse_data({"a": 1}))


def test_text_frames_are_those_of_the_general_encoding() -> None:
    """Each edge's text chunk frame (filled in from a template) is what encoding the payload gives."""
    chat = ChatCompletionStream(
        thinking=None, session_id="s", note="", completion_id="chatcmpl-1", created=7, model="m", prompt="p"
    )
    for text in AWKWARD_TEXT[1:]:  # an empty chunk sends nothing
        event = TextDelta(text)
        assert list(WorkbenchStream().on_text(event)) == [sse_frame("token", {"content": text})]
        assert list(WorkbenchStream().on_thinking(Thinking(text))) == [
            sse_frame("thinking", {"content": text})
        ]
        native = list(NativeStream("s", {}).on_text(event))
        assert native == [sse_data({"type": event_type(event), **dataclasses.asdict(event)})]
        assert list(chat.on_text(event)) == [chat.chunk({"content": text})]


def test_workbench_wire() -> None:
    stream = WorkbenchStream()
    frames = run(stream, [None, *ONE_OF_EACH])
    types = [frame.split("\n", 1)[0].removeprefix("event: ") for frame in frames]
    assert types == [
        KEEPALIVE.split("\n", 1)[0],
        "retrieval",
        "thinking",
        "token",
        "token",
        "tool_start",
        "tool_end",
        "new_response",
        "token",
        "approval_required",
        "question",
        "waiting",
        "done",
        "done",
        "error",
        "title",
    ]
    assert stream.title == "A title"
    data = json.loads(frames[6].split("data: ", 1)[1])
    assert data == {"type": "tool_end", "tool": "shell", "output": "a.txt", "is_error": True, "call_id": "c1"}
    assert json.loads(frames[5].split("data: ", 1)[1])["call_id"] == "c1"


def test_the_inbox_watch_reports_progress_and_the_outcome() -> None:
    seen: list[str] = []
    watch = RunWatch(seen.append)
    events: list[Event | None] = [TextDelta("a"), NewSegment(), TextDelta("b"), RunFailed("boom", "s")]
    assert run(watch, events) == []  # a watch sends nothing
    assert seen == ["a", "a\n\nb"]
    assert watch.outcome() == Outcome("error", "a\n\nb", "boom")
    waiting = RunWatch(seen.append)
    run(waiting, [RunWaiting("s", "t", [APPROVAL]), Title("s", "T")])
    assert waiting.outcome() == Outcome("waiting", "t", pending=(APPROVAL,))
    assert RunWatch(seen.append).outcome().state == "error"  # no end: the run ended without a result


def test_a_broken_handler_is_a_bug_not_a_run_failure() -> None:
    class Broken(Recorder):
        def on_text(self, event: TextDelta) -> Iterable[str]:
            raise KeyError("bug")

    with pytest.raises(KeyError):
        run(Broken(), [TextDelta("x"), RunFinished("x", "s")])


class FakeSubscription:
    """A session subscription (async iterator, async context manager) over given frames; it waits
    for ``resume`` before frame ``pause_at``, so a keep-alive moment happens there."""

    def __init__(self, frames: list[dict[str, object]], pause_at: int) -> None:
        self.frames = frames
        self.pause_at = pause_at
        self.resume = asyncio.Event()
        self.closed = False

    async def __aenter__(self) -> FakeSubscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.closed = True

    def __aiter__(self) -> FakeSubscription:
        return self

    async def __anext__(self) -> dict[str, object]:  # cancel-safe, as the real one
        if not self.frames:
            raise StopAsyncIteration
        if self.pause_at == 0:
            await self.resume.wait()
        self.pause_at -= 1
        return self.frames.pop(0)


def test_the_cluster_edge_is_a_translator_with_seed_names_ids_and_keepalives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clawlet.controlplane import seed_events
    from clawlet.controlplane.seed_events import SeedEventStream, to_seed_event
    from clawlet.events import event_to_json

    monkeypatch.setattr(seed_events, "KEEPALIVE_SECONDS", 0.01)
    events: list[Event] = [
        TextDelta("hi"),
        Usage(1, 2),
        ToolStart("shell", "ls", "c1"),
        RunFinished("hi", "s"),
    ]
    frames: list[dict[str, object]] = [
        {"id": 10 + n, "seq": n, "data": event_to_json(event)} for n, event in enumerate(events)
    ]
    frames.insert(1, {"id": 99, "seq": 99, "data": {"kind": "NotAnEvent"}})
    subscription = FakeSubscription(frames, pause_at=2)
    stream = SeedEventStream()
    assert isinstance(stream, EventStream) and isinstance(stream, SseEventStream)

    async def collect() -> list[str]:
        items: list[str] = []
        async for item in stream.transform(stream.follow(subscription)):  # type: ignore[arg-type]
            items.append(item)
            if item == KEEPALIVE:
                subscription.resume.set()
        return items

    items = asyncio.run(collect())
    assert items[1] == KEEPALIVE
    sent = [item for item in items if item != KEEPALIVE]
    assert [item.split("\n", 1)[0] for item in sent] == ["id: 10", "id: 12", "id: 13"]
    data = [json.loads(item.split("data: ", 1)[1]) for item in sent]
    assert data == [
        {"seq": 0, "type": "text_chunk", "content": "hi"},
        {"seq": 2, **(to_seed_event(events[2]) or {})},
        {"seq": 3, "type": "execution_complete", "content": "hi"},
    ]
    assert data[1]["type"] == "tool_call_start" and data[1]["call_id"] == "c1"
    assert subscription.closed
    assert isinstance(stream.end, RunFinished)

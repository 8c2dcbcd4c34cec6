"""One path from a run's events to every wire format: the translator base.

A protocol edge (the workbench SSE, chat completions, the native endpoint, the inbox, ...)
subclasses :class:`EventStream` and says what each kind of event becomes on its wire, one method
per kind (``on_text``, ``on_tool_start``, ...; each returns the protocol's items, e.g. SSE strings).
The base does the rest once, in the spirit of pydantic-ai's ``UIEventStream``:

* it follows the run's events, ``None`` (a keep-alive moment: nothing happened for a while)
  included (:meth:`EventStream.on_keepalive`);
* it dispatches every kind with :func:`typing.assert_never` over :data:`~clawlet.events.Event`, and
  every handler is abstract: a new event kind fails mypy until every protocol says what it becomes;
* it keeps what every protocol needs to know about the run: its text so far
  (:attr:`EventStream.answer`, a :class:`~clawlet.events.RunText`), its last
  :class:`~clawlet.events.Usage` and how it ended (:attr:`EventStream.end`, the first terminal
  event), and stops after the end when the protocol has no use for later events
  (:attr:`EventStream.stop_at_end`);
* an exception from the event source is the run's failure (:meth:`EventStream.on_failed`);
* :meth:`EventStream.before_stream` / :meth:`EventStream.after_stream` open and close the wire;
* :meth:`EventStream.batches` gives the items that are ready together as one list (a wire sends
  each at once), :meth:`EventStream.transform` one by one.

The SSE encoding and the SSE base are :mod:`clawlet.api.event_stream`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Generic, TypeVar, assert_never

from clawlet.events import (
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

Terminal = RunFinished | RunCancelled | RunFailed | RunWaiting
"""How a run ends (:data:`clawlet.events.TERMINAL_EVENTS`)."""

T = TypeVar("T")


class EventStream(ABC, Generic[T]):
    """A run's events translated into one protocol's items (see the module docstring)."""

    stop_at_end = False
    """Stop following the run at its terminal event (a ``Title`` may still follow it)."""

    def __init__(self, answer: RunText | None = None) -> None:
        """``answer``: the text to go on from (a run that continues an earlier one), else new."""
        self.answer = answer if answer is not None else RunText()
        self.usage: Usage | None = None
        self.end: Terminal | None = None

    async def batches(self, events: AsyncIterator[Event | None]) -> AsyncIterator[list[T]]:
        """The protocol's items for ``events`` (a run's, keep-alive moments included), in one list
        per moment they are ready together: the opening, each event's, and the run's end with the
        closing (a wire sends each list at once; none waits for a later event)."""
        batch = list(self.before_stream())
        source = aiter(events)
        try:
            while True:
                if batch:
                    yield batch
                    batch = []
                try:
                    event = await anext(source)
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the source broke: that is the run's failure
                    if self.end is None:
                        batch.extend(self.handle(RunFailed(f"{type(exc).__name__}: {exc}", "")))
                    break
                if event is None:
                    batch.extend(self.on_keepalive())
                    continue
                batch.extend(self.handle(event))
                if self.end is not None and self.stop_at_end:
                    break
        finally:  # the wire stopped early (or the run ended): let the source clean up now, not at GC
            if isinstance(source, AsyncGenerator):
                await source.aclose()
        batch.extend(self.after_stream())
        if batch:
            yield batch

    async def transform(self, events: AsyncIterator[Event | None]) -> AsyncIterator[T]:
        """The protocol's items for ``events``, one by one (:meth:`batches`, flattened)."""
        async for batch in self.batches(events):
            for item in batch:
                yield item

    async def consume(self, events: AsyncIterator[Event | None]) -> None:
        """Follow ``events`` to their end for the state they leave (a non-streamed answer)."""
        async for _ in self.batches(events):
            pass

    def handle(self, event: Event) -> Iterable[T]:
        """Note what the run did and dispatch ``event`` to its kind's handler."""
        match event:
            case TextDelta():
                self.answer.observe(event)
                return self.on_text(event)
            case Thinking():
                return self.on_thinking(event)
            case ToolStart():
                return self.on_tool_start(event)
            case ToolEnd():
                return self.on_tool_end(event)
            case NewSegment():
                self.answer.observe(event)
                return self.on_new_segment(event)
            case Usage():
                self.usage = event
                return self.on_usage(event)
            case RunStarted():
                return self.on_run_started(event)
            case Retrieval():
                return self.on_retrieval(event)
            case ApprovalRequested():
                return self.on_approval(event)
            case QuestionAsked():
                return self.on_question(event)
            case Title():
                return self.on_title(event)
            case RunFinished():
                self.end = self.end or event
                return self.on_finished(event)
            case RunCancelled():
                self.end = self.end or event
                return self.on_cancelled(event)
            case RunFailed():
                self.end = self.end or event
                return self.on_failed(event)
            case RunWaiting():
                self.end = self.end or event
                return self.on_waiting(event)
            case _:
                assert_never(event)

    def before_stream(self) -> Iterable[T]:
        """What the wire starts with."""
        return ()

    def after_stream(self) -> Iterable[T]:
        """What the wire ends with (after the terminal event, or when the source ended)."""
        return ()

    def on_keepalive(self) -> Iterable[T]:
        """What a silent moment sends (nothing by default; :data:`KEEPALIVE` over SSE)."""
        return ()

    @abstractmethod
    def on_run_started(self, event: RunStarted) -> Iterable[T]: ...

    @abstractmethod
    def on_retrieval(self, event: Retrieval) -> Iterable[T]: ...

    @abstractmethod
    def on_text(self, event: TextDelta) -> Iterable[T]: ...

    @abstractmethod
    def on_thinking(self, event: Thinking) -> Iterable[T]: ...

    @abstractmethod
    def on_tool_start(self, event: ToolStart) -> Iterable[T]: ...

    @abstractmethod
    def on_tool_end(self, event: ToolEnd) -> Iterable[T]: ...

    @abstractmethod
    def on_new_segment(self, event: NewSegment) -> Iterable[T]: ...

    @abstractmethod
    def on_usage(self, event: Usage) -> Iterable[T]: ...

    @abstractmethod
    def on_approval(self, event: ApprovalRequested) -> Iterable[T]: ...

    @abstractmethod
    def on_question(self, event: QuestionAsked) -> Iterable[T]: ...

    @abstractmethod
    def on_title(self, event: Title) -> Iterable[T]: ...

    @abstractmethod
    def on_finished(self, event: RunFinished) -> Iterable[T]: ...

    @abstractmethod
    def on_cancelled(self, event: RunCancelled) -> Iterable[T]: ...

    @abstractmethod
    def on_failed(self, event: RunFailed) -> Iterable[T]: ...

    @abstractmethod
    def on_waiting(self, event: RunWaiting) -> Iterable[T]: ...

"""The typed event model: one vocabulary for everything an agent run produces.

Runtimes yield these events; each protocol edge (workbench SSE, OpenAI chunks, gateway frames,
the seed-001 events of ``/api/cluster/sessions/{id}/events``) translates them into its own wire
format and nothing else (the HTTP edges, the inbox and the gateway through
:mod:`clawlet.event_stream`). Between clawlet's own processes (a session process and its exec
plane, the exec plane and the control plane over ``/ws/vm``) events travel as they are, in their
one JSON encoding: :func:`event_to_json` / :func:`event_from_json`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast


def render_tool_input(args: Any) -> str:
    """A tool's input as people read it (``ToolStart.input``): the single argument's value, else
    compact JSON."""
    if isinstance(args, dict) and len(args) == 1:
        value = next(iter(args.values()))
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return json.dumps(args, ensure_ascii=False)


@dataclass(frozen=True)
class RunStarted:
    session_id: str
    run_id: str


@dataclass(frozen=True)
class Retrieval:
    query: str
    results: list[dict[str, Any]]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning the model streams apart from its answer (e.g. DeepSeek's ``reasoning_content``)."""

    text: str


@dataclass(frozen=True)
class ToolStart:
    tool: str
    input: str
    call_id: str


@dataclass(frozen=True)
class ToolEnd:
    tool: str
    output: str
    call_id: str
    is_error: bool = False


@dataclass(frozen=True)
class NewSegment:
    """The model starts a new text segment after tools ran (a new assistant bubble)."""


@dataclass(frozen=True)
class Usage:
    """The tokens a run's model calls used; ``truncated`` when the last call stopped at its token
    cap (OpenAI's ``finish_reason: "length"``), so the answer is cut short."""

    input_tokens: int
    output_tokens: int
    truncated: bool = False


@dataclass(frozen=True)
class RunFinished:
    content: str
    session_id: str


@dataclass(frozen=True)
class RunCancelled:
    session_id: str
    content: str = ""


@dataclass(frozen=True)
class RunFailed:
    error: str
    session_id: str


@dataclass(frozen=True)
class ApprovalRequested:
    """A tool call waits for the user's decision before it runs (its tool's policy is ``ask``).

    ``approval_id`` is what the decision is sent for (``POST /api/sessions/{id}/approvals/{approval_id}``);
    ``args`` are the call's arguments as the model wrote them and ``input`` the same rendered like
    :class:`ToolStart`'s; ``call_id`` pairs it with the ``ToolStart`` already sent and the
    ``ToolEnd`` that follows the decision. ``allowed_decisions`` is a subset of ``approve``,
    ``edit`` (run with other arguments) and ``reject`` (with an optional message for the model)."""

    approval_id: str
    tool: str
    args: dict[str, Any]
    call_id: str
    input: str
    allowed_decisions: list[str] = field(default_factory=lambda: ["approve", "edit", "reject"])
    description: str = ""


@dataclass(frozen=True)
class QuestionAsked:
    """The agent asked the user a question (the ``ask_user`` tool); the run waits for the answer,
    sent like an approval with the decision ``answer`` and the answer as its ``message`` (or
    ``reject``, optionally with a message: the user declines to answer)."""

    approval_id: str
    question: str
    call_id: str
    allowed_decisions: list[str] = field(default_factory=lambda: ["answer", "reject"])


Pending = ApprovalRequested | QuestionAsked
"""What a waiting run waits for."""


@dataclass(frozen=True)
class RunWaiting:
    """The run paused before a tool ran, waiting for the user: neither finished nor failed.

    A terminal event like :class:`RunFinished`: the run is over and the session is not busy, but
    its state is kept on disk (it survives a restart) until every item of ``pending`` is decided;
    each decision continues it as a new run of the same session. ``content`` is the text so far.
    Runtimes yield it (with empty ``session_id`` and ``content``) as their last event when the turn
    paused; :class:`~clawlet.runtime.manager.SessionManager` publishes it completed."""

    session_id: str
    content: str
    pending: list[Pending]


@dataclass(frozen=True)
class Title:
    """The session's new title; the tokens are those of the model call that wrote it (reported as
    usage in cluster mode, like a turn's :class:`Usage`)."""

    session_id: str
    title: str
    input_tokens: int = 0
    output_tokens: int = 0


Event = (
    RunStarted
    | Retrieval
    | TextDelta
    | Thinking
    | ToolStart
    | ToolEnd
    | NewSegment
    | Usage
    | RunFinished
    | RunCancelled
    | RunFailed
    | RunWaiting
    | ApprovalRequested
    | QuestionAsked
    | Title
)

TERMINAL_EVENTS = (RunFinished, RunCancelled, RunFailed, RunWaiting)

EVENT_TYPES: Final[Mapping[str, type[Any]]] = {
    cls.__name__: cls
    for cls in (
        RunStarted,
        Retrieval,
        TextDelta,
        Thinking,
        ToolStart,
        ToolEnd,
        NewSegment,
        Usage,
        RunFinished,
        RunCancelled,
        RunFailed,
        RunWaiting,
        ApprovalRequested,
        QuestionAsked,
        Title,
    )
}
"""Every event class by its name (the ``kind`` of its JSON encoding)."""


class RunText:
    """A run's answer text as its events arrive, the one rule for joining it: the text of each
    segment (a :class:`NewSegment` starts the next), the non-empty ones joined by a blank line, as
    :class:`RunFinished`'s ``content`` is."""

    def __init__(self) -> None:
        self._segments: list[str] = []
        self._current: list[str] = []

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._current.append(event.text)
        elif isinstance(event, NewSegment) and self._current:
            text = "".join(self._current)
            if text:
                self._segments.append(text)
            self._current = []

    @property
    def segments(self) -> list[str]:
        """The run's non-empty text segments so far, the current one last."""
        current = "".join(self._current)
        return [*self._segments, current] if current else list(self._segments)

    @property
    def text(self) -> str:
        return "\n\n".join(self.segments)


def merge_text_deltas(events: list[Event]) -> list[Event]:
    """``events`` with each run of adjacent :class:`TextDelta` (and of adjacent :class:`Thinking`)
    joined into one event carrying their text: what a watcher that fell behind sends instead of
    one frame per chunk. Order and text are kept; nothing waits for more events."""
    merged: list[Event] = []
    for event in events:
        last = merged[-1] if merged else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            merged[-1] = TextDelta(last.text + event.text)
        elif isinstance(event, Thinking) and isinstance(last, Thinking):
            merged[-1] = Thinking(last.text + event.text)
        else:
            merged.append(event)
    return merged


_FIELD_NAMES: Final[Mapping[type[Any], tuple[str, ...]]] = {
    cls: tuple(item.name for item in dataclasses.fields(cls)) for cls in EVENT_TYPES.values()
}
"""Each event type's field names, looked up once (every relayed event is encoded and decoded)."""


def event_to_json(event: Event) -> dict[str, Any]:
    """``{kind: <class name>, …fields}``: ``event`` as JSON-safe data, losslessly (a
    :class:`RunWaiting`'s ``pending`` items are encoded the same way; lists and dicts are copies)."""
    cls = type(event)
    data: dict[str, Any] = {"kind": cls.__name__}
    for name in _FIELD_NAMES.get(cls) or [item.name for item in dataclasses.fields(event)]:
        value = getattr(event, name)
        data[name] = copy.deepcopy(value) if isinstance(value, dict | list) else value
    if isinstance(event, RunWaiting):
        data["pending"] = [event_to_json(item) for item in event.pending]
    return data


def event_from_json(data: Mapping[str, Any]) -> Event:
    """The event :func:`event_to_json` encoded; ``ValueError`` for anything else (an unknown
    ``kind``, a missing field). Unknown fields are ignored."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    names = _FIELD_NAMES[cls]
    values = {key: value for key, value in data.items() if key in names}
    if cls is RunWaiting:
        pending = values.get("pending")
        if not isinstance(pending, list):
            raise ValueError("bad RunWaiting event: pending is not a list")
        items = [event_from_json(item) if isinstance(item, Mapping) else None for item in pending]
        if not all(isinstance(item, ApprovalRequested | QuestionAsked) for item in items):
            raise ValueError("bad RunWaiting event: pending holds more than approvals and questions")
        values["pending"] = items
    try:
        return cast(Event, cls(**values))
    except TypeError as exc:
        raise ValueError(f"bad {kind} event: {exc}") from exc

"""How a session's events travel in cluster mode, and the seed-001 names of its one edge.

**Over ``/ws/vm``** the execution plane forwards every clawlet event of a session's run as it is:
the ``data`` of an ``sse_event`` frame is the event's JSON encoding
(:func:`clawlet.events.event_to_json`, ``{kind: "TextDelta", text}`` …), the same encoding a session
process uses on its pipe (:func:`clawlet.execplane.client.forward_event`). The control plane keeps
it in the session's event log and replays it unchanged (the workbench, the inbox, ``/v1`` and
``/api/agent`` do not need it: their requests run on the execution plane's own local-mode app,
:mod:`clawlet.execplane.tunnel`). ``Usage`` also goes out as a ``fire_and_forget usage_report``
(queued on disk while disconnected: the usage tables are filled from those, once each). The version
of this encoding is :data:`~clawlet.cluster.protocol.EVENT_ENCODING`, named in ``init``
(:data:`~clawlet.cluster.protocol.INIT_EVENT_ENCODING`): an execution plane refuses a control plane
that names another one.

**At ``GET /api/cluster/sessions/{id}/events``** — and only there — the events are given the seed's
names (seed 001 §4.6, §7.4, §9) by :class:`SeedEventStream`, the edge's subclass of the translator
base (:class:`clawlet.event_stream.EventStream`: keep-alives, dispatch over every event kind), one
``data:`` line per event with the event log's ``n`` as its SSE ``id``; :func:`to_seed_event` is the
same mapping for one event:

======================  =======================================================================
clawlet event           seed-001 SSE event
======================  =======================================================================
TextDelta               ``{type:"text_chunk", content}``
Thinking                ``{type:"thinking", content}``
ToolStart               ``{type:"tool_call_start", tool_name, tool_input, call_id}``
ToolEnd                 ``{type:"tool_call_complete", tool_name, result, call_id, is_error}``
RunFinished             ``{type:"execution_complete", content}``
RunCancelled            ``{type:"execution_complete", content, cancelled:true}``
RunFailed               ``{type:"execution_error", error}``
RunWaiting              ``{type:"execution_complete", content, waiting:true, pending:[approval_id…]}``
ApprovalRequested       ``{type:"approval_required", approval_id, tool_name, tool_input, args, call_id,
                        allowed_decisions}``
QuestionAsked           ``{type:"question", approval_id, question, call_id}``
RunStarted, Retrieval,  nothing (the seed's vocabulary has no such events; the seed reports usage
NewSegment, Usage,      as ``usage_report`` records, not as events)
Title
======================  =======================================================================

``call_id`` and ``is_error`` are additions to the seed's field names (a browser needs them to pair a
start with its completion and to show a failed tool); a consumer that only knows the seed's fields
ignores them. The approval events are clawlet's own (the seed has none); a run that waits for the
user ends like a completed one, with ``waiting: true``, so consumers that only know the seed's
events end the turn. Each event keeps the ``seq`` the execution plane gave it, so ``seq`` has gaps
where events without a seed name were.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final, TypeVar

from clawlet.api.event_stream import KEEPALIVE_SECONDS, SseEventStream
from clawlet.controlplane.server import RoutingError, SessionEvent, SessionSubscription
from clawlet.event_stream import EventStream
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
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
    event_from_json,
)

log = logging.getLogger(__name__)

TEXT_CHUNK: Final = "text_chunk"
THINKING: Final = "thinking"
TOOL_CALL_START: Final = "tool_call_start"
TOOL_CALL_COMPLETE: Final = "tool_call_complete"
EXECUTION_COMPLETE: Final = "execution_complete"
EXECUTION_ERROR: Final = "execution_error"
APPROVAL_REQUIRED: Final = "approval_required"
QUESTION: Final = "question"

T = TypeVar("T")


class SeedTranslator(EventStream[T]):
    """The seed-001 mapping (the module docstring's table): each handler makes the seed event's
    fields and hands them to :meth:`emit`, which says what they become (a dict, an SSE line)."""

    @abstractmethod
    def emit(self, seed: dict[str, Any]) -> Iterable[T]:
        """What the seed event with these fields becomes on the wire."""

    def on_text(self, event: TextDelta) -> Iterable[T]:
        return self.emit({"type": TEXT_CHUNK, "content": event.text})

    def on_thinking(self, event: Thinking) -> Iterable[T]:
        return self.emit({"type": THINKING, "content": event.text})

    def on_tool_start(self, event: ToolStart) -> Iterable[T]:
        return self.emit(
            {
                "type": TOOL_CALL_START,
                "tool_name": event.tool,
                "tool_input": event.input,
                "call_id": event.call_id,
            }
        )

    def on_tool_end(self, event: ToolEnd) -> Iterable[T]:
        return self.emit(
            {
                "type": TOOL_CALL_COMPLETE,
                "tool_name": event.tool,
                "result": event.output,
                "call_id": event.call_id,
                "is_error": event.is_error,
            }
        )

    def on_finished(self, event: RunFinished) -> Iterable[T]:
        return self.emit({"type": EXECUTION_COMPLETE, "content": event.content})

    def on_cancelled(self, event: RunCancelled) -> Iterable[T]:
        return self.emit({"type": EXECUTION_COMPLETE, "content": event.content, "cancelled": True})

    def on_failed(self, event: RunFailed) -> Iterable[T]:
        return self.emit({"type": EXECUTION_ERROR, "error": event.error})

    def on_waiting(self, event: RunWaiting) -> Iterable[T]:
        return self.emit(
            {
                "type": EXECUTION_COMPLETE,
                "content": event.content,
                "waiting": True,
                "pending": [item.approval_id for item in event.pending],
            }
        )

    def on_approval(self, event: ApprovalRequested) -> Iterable[T]:
        return self.emit(
            {
                "type": APPROVAL_REQUIRED,
                "approval_id": event.approval_id,
                "tool_name": event.tool,
                "tool_input": event.input,
                "args": event.args,
                "call_id": event.call_id,
                "allowed_decisions": list(event.allowed_decisions),
            }
        )

    def on_question(self, event: QuestionAsked) -> Iterable[T]:
        return self.emit(
            {
                "type": QUESTION,
                "approval_id": event.approval_id,
                "question": event.question,
                "call_id": event.call_id,
            }
        )

    # the seed's vocabulary has no such events (it reports usage as usage_report records)
    def on_run_started(self, event: RunStarted) -> Iterable[T]:
        return ()

    def on_retrieval(self, event: Retrieval) -> Iterable[T]:
        return ()

    def on_new_segment(self, event: NewSegment) -> Iterable[T]:
        return ()

    def on_usage(self, event: Usage) -> Iterable[T]:
        return ()

    def on_title(self, event: Title) -> Iterable[T]:
        return ()


class _SeedFields(SeedTranslator[dict[str, Any]]):
    """The seed event's fields as they are (:func:`to_seed_event`)."""

    def emit(self, seed: dict[str, Any]) -> Iterable[dict[str, Any]]:
        return (seed,)


class SeedEventStream(SeedTranslator[str], SseEventStream):
    """``GET /api/cluster/sessions/{id}/events``: a session's stored events (:meth:`follow`) as
    seed-001 SSE, ``id: <n>`` and ``data: {seq, type, …}`` per event, keep-alive comments while the
    session is silent; it goes on across the session's runs until the subscription ends."""

    def __init__(self) -> None:
        super().__init__()
        self._frame: SessionEvent | None = None

    def emit(self, seed: dict[str, Any]) -> Iterable[str]:
        frame = self._frame
        assert frame is not None  # set by follow() before each event
        data = {"seq": frame["seq"], **seed}
        return (f"id: {frame['id']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n",)

    async def follow(self, subscription: SessionSubscription) -> AsyncIterator[Event | None]:
        """The clawlet events of ``subscription``'s frames, ``None`` after
        :data:`~clawlet.api.event_stream.KEEPALIVE_SECONDS` of silence; frames that are not an event
        clawlet knows are left out (logged); ends with the subscription (or its routing failing),
        which it closes."""
        async with subscription:
            async for event in self._decoded(subscription):
                yield event

    async def _decoded(self, subscription: SessionSubscription) -> AsyncIterator[Event | None]:
        iterator = aiter(subscription)
        while True:
            try:
                frame = await asyncio.wait_for(anext(iterator), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield None
                continue
            except (StopAsyncIteration, RoutingError):
                return
            event = decode(frame["data"])
            if event is not None:
                self._frame = frame
                yield event


def decode(data: Any) -> Event | None:
    """The clawlet event ``data`` (one ``sse_event`` frame's) encodes, or ``None`` (logged)."""
    try:
        return event_from_json(data)
    except ValueError as exc:
        log.warning("an execution plane's event is not one clawlet knows (%s); not shown", exc)
        return None


def to_seed_event(event: Event) -> dict[str, Any] | None:
    """The seed-001 SSE event for ``event`` (see the module docstring), or ``None`` when it has none."""
    return next(iter(_SeedFields().handle(event)), None)


def seed_event(data: Any) -> dict[str, Any] | None:
    """The seed-001 SSE event for the ``data`` of one ``sse_event`` frame (an encoded clawlet
    event), or ``None`` when it has none or is not an event clawlet knows (logged)."""
    event = decode(data)
    return None if event is None else to_seed_event(event)

"""clawlet events → the execution plane's SSE events (seed 001 §4.6, §7.4, §9).

The exec plane forwards each event of a session's run to the control plane as the ``data`` of an
``sse_event`` frame (:meth:`ControlPlaneClient.send_sse_event`); the control plane pushes it on to the
browser unchanged. ``data`` is a JSON object with a ``type``:

======================  =======================================================================
clawlet event           exec-plane SSE event
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
Usage                   not an SSE event: ``fire_and_forget usage_report`` (:func:`forward_event`)
RunStarted, Retrieval,  nothing (the seed's vocabulary has no such events)
NewSegment, Title
======================  =======================================================================

``call_id`` and ``is_error`` are additions to the seed's field names (a browser needs them to pair a
start with its completion and to show a failed tool); a consumer that only knows the seed's fields
ignores them. The approval events are clawlet's own (the seed has none); a run that waits for the
user ends like a completed one, with ``waiting: true``, so consumers that only know the seed's
events end the turn. (Session processes run turns that never ask today, so none of them is sent.)
"""

from __future__ import annotations

from typing import Any, Final, Protocol, assert_never

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
)

TEXT_CHUNK: Final = "text_chunk"
THINKING: Final = "thinking"
TOOL_CALL_START: Final = "tool_call_start"
TOOL_CALL_COMPLETE: Final = "tool_call_complete"
EXECUTION_COMPLETE: Final = "execution_complete"
EXECUTION_ERROR: Final = "execution_error"
APPROVAL_REQUIRED: Final = "approval_required"
QUESTION: Final = "question"


class EventSink(Protocol):
    """What :func:`forward_event` needs of :class:`~clawlet.cluster.client.ControlPlaneClient`."""

    async def send_sse_event(self, session_id: str, data: Any) -> int: ...

    async def report_usage(
        self, session_id: str, model: str, tokens_in: int, tokens_out: int, **extra: Any
    ) -> None: ...


def to_exec_plane_event(event: Event) -> dict[str, Any] | None:
    """The SSE event for ``event`` (see the module docstring), or ``None`` when it has none."""
    match event:
        case TextDelta(text=text):
            return {"type": TEXT_CHUNK, "content": text}
        case Thinking(text=text):
            return {"type": THINKING, "content": text}
        case ToolStart(tool=tool, input=tool_input, call_id=call_id):
            return {"type": TOOL_CALL_START, "tool_name": tool, "tool_input": tool_input, "call_id": call_id}
        case ToolEnd(tool=tool, output=output, call_id=call_id, is_error=is_error):
            return {
                "type": TOOL_CALL_COMPLETE,
                "tool_name": tool,
                "result": output,
                "call_id": call_id,
                "is_error": is_error,
            }
        case RunFinished(content=content):
            return {"type": EXECUTION_COMPLETE, "content": content}
        case RunCancelled(content=content):
            return {"type": EXECUTION_COMPLETE, "content": content, "cancelled": True}
        case RunFailed(error=error):
            return execution_error(error)
        case RunWaiting(content=content, pending=pending):
            return {
                "type": EXECUTION_COMPLETE,
                "content": content,
                "waiting": True,
                "pending": [item.approval_id for item in pending],
            }
        case ApprovalRequested():
            return {
                "type": APPROVAL_REQUIRED,
                "approval_id": event.approval_id,
                "tool_name": event.tool,
                "tool_input": event.input,
                "args": event.args,
                "call_id": event.call_id,
                "allowed_decisions": list(event.allowed_decisions),
            }
        case QuestionAsked(approval_id=approval_id, question=question, call_id=call_id):
            return {"type": QUESTION, "approval_id": approval_id, "question": question, "call_id": call_id}
        case RunStarted() | Retrieval() | NewSegment() | Usage() | Title():
            return None
        case _:
            assert_never(event)


def execution_error(error: str) -> dict[str, Any]:
    """An ``execution_error`` SSE event (also used for errors that are not a run's, e.g. a refusal)."""
    return {"type": EXECUTION_ERROR, "error": error}


async def forward_event(sink: EventSink, session_id: str, event: Event, *, model: str) -> None:
    """Send ``event`` of ``session_id`` to the control plane: ``Usage`` as a usage report (queued on
    disk while disconnected), everything else as its SSE event (buffered while disconnected)."""
    if isinstance(event, Usage):
        if event.input_tokens or event.output_tokens:
            await sink.report_usage(session_id, model, event.input_tokens, event.output_tokens)
        return
    data = to_exec_plane_event(event)
    if data is not None:
        await sink.send_sse_event(session_id, data)

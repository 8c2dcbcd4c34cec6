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
names (seed 001 §4.6, §7.4, §9) by :func:`to_seed_event`:

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

import logging
from typing import Any, Final, assert_never

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


def to_seed_event(event: Event) -> dict[str, Any] | None:
    """The seed-001 SSE event for ``event`` (see the module docstring), or ``None`` when it has none."""
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
            return {"type": EXECUTION_ERROR, "error": error}
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


def seed_event(data: Any) -> dict[str, Any] | None:
    """The seed-001 SSE event for the ``data`` of one ``sse_event`` frame (an encoded clawlet
    event), or ``None`` when it has none or is not an event clawlet knows (logged)."""
    try:
        event = event_from_json(data)
    except ValueError as exc:
        log.warning("an execution plane's event is not one clawlet knows (%s); not shown", exc)
        return None
    return to_seed_event(event)

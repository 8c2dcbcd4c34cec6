"""Server-Sent Events framing and the workbench translation of clawlet events (seed 000)."""

from __future__ import annotations

import json
from typing import Any

from clawlet.engine.approvals import pending_to_json
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
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)

KEEPALIVE = ": keep-alive\n\n"


def sse_frame(event_type: str, data: dict[str, Any]) -> str:
    """One SSE frame; the JSON also carries ``type`` so either parsing style works."""
    payload = json.dumps({"type": event_type, **data}, ensure_ascii=False)
    return f"event: {event_type}\ndata: {payload}\n\n"


def workbench_event(event: Event) -> tuple[str, dict[str, Any]] | None:
    """Map a clawlet event to the seed's SSE event name and data; None for internal events."""
    match event:
        case Retrieval(query=query, results=results):
            return "retrieval", {"query": query, "results": results}
        case TextDelta(text=text):
            return "token", {"content": text}
        case ToolStart(tool=tool, input=tool_input):
            return "tool_start", {"tool": tool, "input": tool_input}
        case ToolEnd(tool=tool, output=output, is_error=is_error):
            return "tool_end", {"tool": tool, "output": output, "is_error": is_error}
        case NewSegment():
            return "new_response", {}
        case RunFinished(content=content, session_id=session_id):
            return "done", {"content": content, "session_id": session_id}
        case RunCancelled(content=content, session_id=session_id):
            return "done", {"content": content, "session_id": session_id, "cancelled": True}
        case RunFailed(error=error):
            return "error", {"error": error}
        case ApprovalRequested() | QuestionAsked():
            data = pending_to_json(event)
            return ("approval_required" if data.pop("kind") == "tool" else "question"), data
        case RunWaiting(content=content, session_id=session_id, pending=pending):
            return "waiting", {
                "content": content,
                "session_id": session_id,
                "pending": [pending_to_json(item) for item in pending],
            }
        case Title(session_id=session_id, title=title):
            return "title", {"session_id": session_id, "title": title}
        case RunStarted() | Usage():
            return None
    return None

"""The workbench's wire format (seed 000): a run's events as named SSE events.

``token`` (answer text), ``thinking`` (reasoning the model streams apart from its answer),
``retrieval``, ``tool_start``, ``tool_end`` (each with the call's ``call_id``, which pairs them and
an approval with its call), ``new_response`` (a new assistant bubble),
``approval_required`` / ``question`` (the run pauses for the user), ``title``, and the run's end:
``done`` (with ``cancelled`` when it was stopped), ``waiting`` (paused: what it waits for) or
``error``. Clients ignore event types they do not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clawlet.api.event_stream import HOLE, FrameTemplate, SseEventStream, sse_frame
from clawlet.engine.tool_approvals import pending_to_json
from clawlet.events import (
    ApprovalRequested,
    NewSegment,
    Pending,
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

_TOKEN = FrameTemplate(sse_frame("token", {"content": HOLE}))
_THINKING = FrameTemplate(sse_frame("thinking", {"content": HOLE}))


def _pending_frame(item: Pending) -> tuple[str]:
    data = pending_to_json(item)
    return (sse_frame("approval_required" if data.pop("kind") == "tool" else "question", data),)


class WorkbenchStream(SseEventStream):
    """A run's events as the workbench's SSE events; :attr:`title` is the run's new title, if any."""

    def __init__(self) -> None:
        super().__init__()
        self.title: str | None = None

    def on_text(self, event: TextDelta) -> Iterable[str]:
        return (_TOKEN.fill(event.text),)

    def on_thinking(self, event: Thinking) -> Iterable[str]:
        return (_THINKING.fill(event.text),)

    def on_retrieval(self, event: Retrieval) -> Iterable[str]:
        return (sse_frame("retrieval", {"query": event.query, "results": event.results}),)

    def on_tool_start(self, event: ToolStart) -> Iterable[str]:
        return (
            sse_frame("tool_start", {"tool": event.tool, "input": event.input, "call_id": event.call_id}),
        )

    def on_tool_end(self, event: ToolEnd) -> Iterable[str]:
        data = {
            "tool": event.tool,
            "output": event.output,
            "is_error": event.is_error,
            "call_id": event.call_id,
        }
        return (sse_frame("tool_end", data),)

    def on_new_segment(self, event: NewSegment) -> Iterable[str]:
        return (sse_frame("new_response", {}),)

    def on_approval(self, event: ApprovalRequested) -> Iterable[str]:
        return _pending_frame(event)

    def on_question(self, event: QuestionAsked) -> Iterable[str]:
        return _pending_frame(event)

    def on_title(self, event: Title) -> Iterable[str]:
        self.title = event.title
        return (sse_frame("title", {"session_id": event.session_id, "title": event.title}),)

    def on_finished(self, event: RunFinished) -> Iterable[str]:
        return (sse_frame("done", {"content": event.content, "session_id": event.session_id}),)

    def on_cancelled(self, event: RunCancelled) -> Iterable[str]:
        data = {"content": event.content, "session_id": event.session_id, "cancelled": True}
        return (sse_frame("done", data),)

    def on_failed(self, event: RunFailed) -> Iterable[str]:
        return (sse_frame("error", {"error": event.error}),)

    def on_waiting(self, event: RunWaiting) -> Iterable[str]:
        data: dict[str, Any] = {
            "content": event.content,
            "session_id": event.session_id,
            "pending": [pending_to_json(item) for item in event.pending],
        }
        return (sse_frame("waiting", data),)

    def on_run_started(self, event: RunStarted) -> Iterable[str]:
        return ()

    def on_usage(self, event: Usage) -> Iterable[str]:
        return ()

"""Chat completions' wire format: a run's events as the assistant text a chat client shows.

Streamed, that text goes out as ``chat.completion.chunk`` SSE lines (a role chunk first, then
content deltas, the finish chunk, an optional usage chunk and ``data: [DONE]``); not streamed, the
same text is the one message of a ``chat.completion`` (:attr:`ChatCompletionStream.content`). A run
that paused on client tool calls adds them (``delta.tool_calls`` chunks; finish reason
``tool_calls``; see :mod:`clawlet.api.openai.client_tools`).

With thinking on, tool activity (and the model's own reasoning) goes inside ``<think>…</think>``
(Open WebUI renders it collapsible) or a fenced ``thinking`` block, opened with the session id as
the seed does; otherwise tool activity is invisible (a keep-alive comment while tools run) and
segments are separated by a blank line. ``note`` (what the permission mode did to tools that need
approval) follows the session id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clawlet.api.event_stream import HOLE, KEEPALIVE, FrameTemplate, SseEventStream, sse_data
from clawlet.api.openai.client_tools import ClientCall, is_client_call
from clawlet.api.openai.errors import openai_error_body
from clawlet.events import (
    ApprovalRequested,
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
from clawlet.tokens import count_tokens

TOOL_OUTPUT_SHOWN = 800
"""Characters of a tool's output shown in the thinking block."""


def usage_body(usage: Usage | None, prompt: str, completion: str) -> dict[str, int]:
    if usage is not None:
        prompt_tokens, completion_tokens = usage.input_tokens, usage.output_tokens
    else:  # the demo model reports no usage: count the visible text instead
        prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(completion)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def finish_reason(usage: Usage | None, tool_calls: bool = False) -> str:
    """``tool_calls`` when the run paused on client tool calls, ``length`` when the model's token
    cap cut the answer, else ``stop``."""
    if tool_calls:
        return "tool_calls"
    return "length" if usage is not None and usage.truncated else "stop"


class ChatCompletionStream(SseEventStream):
    """A run's events as a chat completion (see the module docstring)."""

    stop_at_end = True

    def __init__(
        self,
        *,
        thinking: str | None,
        session_id: str,
        note: str,
        completion_id: str,
        created: int,
        model: str,
        prompt: str,
        include_usage: bool = False,
    ) -> None:
        super().__init__()
        self.thinking = thinking
        self.session_id = session_id
        self.note = note
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.prompt = prompt
        self.include_usage = include_usage
        self.in_block = False
        self._shown: list[str] = []
        self.tool_calls: list[ClientCall] = []
        """The client tool calls the run paused on (:mod:`clawlet.api.openai.client_tools`)."""
        self._content = FrameTemplate(self.chunk({"content": HOLE}))

    @property
    def content(self) -> str:
        """The assistant text sent so far."""
        return "".join(self._shown)

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse_data(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [choice],
            }
        )

    def _show(self, piece: str) -> tuple[str, ...]:
        """``piece`` as a content chunk (nothing when it is empty)."""
        if not piece:
            return ()
        self._shown.append(piece)
        return (self._content.fill(piece),)

    def _open(self) -> str:
        if self.in_block or not self.thinking:
            return ""
        self.in_block = True
        return "<think>\n" if self.thinking == "tags" else "```thinking\n"

    def _close(self) -> str:
        if not self.in_block:
            return ""
        self.in_block = False
        return "\n</think>\n\n" if self.thinking == "tags" else "\n```\n\n"

    def before_stream(self) -> Iterable[str]:
        opening = ""
        if self.thinking:
            note = f"{self.note}\n" if self.note else ""
            opening = self._open() + f"session-id={self.session_id}\n" + note
        return (self.chunk({"role": "assistant", "content": ""}), *self._show(opening))

    def after_stream(self) -> Iterable[str]:
        items = [*self._show(self._close()), self.chunk({}, finish_reason(self.usage, bool(self.tool_calls)))]
        if self.include_usage:
            body = {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_body(self.usage, self.prompt, self.content),
            }
            items.append(sse_data(body))
        items.append("data: [DONE]\n\n")
        return items

    def on_text(self, event: TextDelta) -> Iterable[str]:
        return self._show(self._close() + event.text)

    def on_thinking(self, event: Thinking) -> Iterable[str]:
        return self._show(self._open() + event.text) if self.thinking else ()

    def on_tool_start(self, event: ToolStart) -> Iterable[str]:
        if not self.thinking:
            return (KEEPALIVE,)
        return self._show(self._open() + f"🔧 {event.tool}: {event.input}\n")

    def on_tool_end(self, event: ToolEnd) -> Iterable[str]:
        if not self.thinking:
            return (KEEPALIVE,)
        output = event.output
        if len(output) > TOOL_OUTPUT_SHOWN:
            output = output[:TOOL_OUTPUT_SHOWN] + " …"
        return self._show(f"{'✗' if event.is_error else '→'} {output}\n")

    def on_new_segment(self, event: NewSegment) -> Iterable[str]:
        return self._show("\n\n") if self._shown and not self.in_block else ()

    def on_failed(self, event: RunFailed) -> Iterable[str]:
        """The error, then the stream ends as usual."""
        return (sse_data(openai_error_body(event.error, 500, code="agent_run_failed")),)

    def on_finished(self, event: RunFinished) -> Iterable[str]:
        return ()

    def on_cancelled(self, event: RunCancelled) -> Iterable[str]:
        return ()

    def on_waiting(self, event: RunWaiting) -> Iterable[str]:
        return ()

    def on_run_started(self, event: RunStarted) -> Iterable[str]:
        return ()

    def on_retrieval(self, event: Retrieval) -> Iterable[str]:
        return ()

    def on_usage(self, event: Usage) -> Iterable[str]:
        return ()

    def on_approval(self, event: ApprovalRequested) -> Iterable[str]:
        """A client tool call: its ``delta.tool_calls`` chunks, as OpenAI streams them."""
        if not is_client_call(event):
            return ()
        call = ClientCall.of(event)
        index = len(self.tool_calls)
        self.tool_calls.append(call)
        start = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        return (
            *self._show(self._close()),
            self.chunk({"tool_calls": [start]}),
            self.chunk({"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}),
        )

    def on_question(self, event: QuestionAsked) -> Iterable[str]:
        return ()

    def on_title(self, event: Title) -> Iterable[str]:
        return ()

"""The Responses API's wire format: a run's events as a ``response`` object and its typed SSE events.

Streamed, a response goes out as named SSE events, each carrying ``type`` and a
``sequence_number`` counting from 0: ``response.created``, ``response.in_progress``, then per
output item ``response.output_item.added``, ``response.content_part.added``, its deltas
(``response.output_text.delta`` for the answer, ``response.reasoning_text.delta`` for the model's
own reasoning, clawlet's :class:`~clawlet.events.Thinking`), ``response.output_text.done`` (or
``response.reasoning_text.done``), ``response.content_part.done``, ``response.output_item.done``,
and last ``response.completed``, ``response.incomplete`` (the token cap cut the answer, or the run
was cancelled) or ``response.failed`` (the run failed; ``response.error`` says why). Not streamed,
the same state is the one ``response`` object (:meth:`ResponseStream.response_object`).

The answer is one ``message`` item; its segments are joined by a blank line as every surface joins
them (:class:`~clawlet.events.RunText`); reasoning between segments closes it and a later segment
opens the next ``message`` item. Tools run inside the agent: their activity is never an output item
(a client would run them again), only ``: keep-alive`` comments while they run.

A run that paused on calls to the client's function tools (:mod:`clawlet.api.openai.client_tools`)
adds a ``function_call`` item per call (``call_id`` is the call's id, which its
``function_call_output`` names): ``response.output_item.added``, its arguments in one
``response.function_call_arguments.delta``, ``response.function_call_arguments.done``,
``response.output_item.done``; the response is ``completed``, as OpenAI's is.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Literal

from clawlet.api.event_stream import KEEPALIVE, SseEventStream, sse_frame
from clawlet.api.openai.client_tools import ClientCall, is_client_call
from clawlet.api.openai.stream import usage_body
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

ItemKind = Literal["message", "reasoning"]
Status = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def item_id(prefix: Literal["msg", "rs", "fc"], response_id: str, index: int) -> str:
    """The id of output item ``index`` of ``response_id``: it names its response, so an
    ``item_reference`` to it finds it (:meth:`~clawlet.api.openai.responses_store.ResponseStore.item`)."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{index}"


def usage_object(usage: Usage | None, prompt: str, output: str) -> dict[str, Any]:
    """The response's ``usage`` (the model's counts, or the visible text counted when it reports none)."""
    counted = usage_body(usage, prompt, output)
    return {
        "input_tokens": counted["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": counted["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": counted["total_tokens"],
    }


class ResponseStream(SseEventStream):
    """A run's events as a Responses API response (see the module docstring).

    ``echo`` holds the request fields a response object repeats (``instructions``,
    ``max_output_tokens``, ``temperature``, ``previous_response_id``, ``store``...);
    ``on_final`` is awaited with the final response before its terminal event goes out (so a
    client that read ``response.completed`` can retrieve it at once)."""

    stop_at_end = True

    def __init__(
        self,
        *,
        response_id: str,
        model: str,
        prompt: str,
        session_id: str,
        echo: dict[str, Any],
        created_at: int | None = None,
        on_final: Callable[[dict[str, Any]], Awaitable[object]] | None = None,
    ) -> None:
        super().__init__()
        self.response_id = response_id
        self.created_at = created_at if created_at is not None else int(time.time())
        self.model = model
        self.prompt = prompt
        self.session_id = session_id
        self.echo = echo
        self.on_final = on_final
        self.final: dict[str, Any] = {}
        """The final response object, once :attr:`closed`."""
        self.output: list[dict[str, Any]] = []
        self.closed = False
        """Whether the run ended and the final events are being sent (the response is final)."""
        self._sequence = 0
        self._open: dict[str, Any] | None = None
        self._open_text: list[str] = []
        self._shown = False
        self._separate = False

    # --- the response object ---------------------------------------------------------------

    @property
    def status(self) -> Status:
        """``in_progress`` until the run ended; then how it ended."""
        if not self.closed:
            return "in_progress"
        if isinstance(self.end, RunFailed):
            return "failed"
        if isinstance(self.end, RunCancelled):
            return "cancelled"
        if self.usage is not None and self.usage.truncated:
            return "incomplete"
        return "completed"

    def response_object(self) -> dict[str, Any]:
        """The ``response`` as it stands (final once :attr:`closed`)."""
        status = self.status
        final = status != "in_progress"
        response: dict[str, Any] = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": None,
            "model": self.model,
            "output": [dict(item) for item in self.output] if final else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": usage_object(self.usage, self.prompt, self.answer.text) if final else None,
            "session_id": self.session_id,
            **self.echo,
        }
        if isinstance(self.end, RunFailed) and final:
            response["error"] = {"code": "server_error", "message": self.end.error}
        elif status == "incomplete":
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        return response

    # --- the wire ----------------------------------------------------------------------------

    async def batches(self, events: AsyncIterator[Event | None]) -> AsyncIterator[list[str]]:
        told = False
        async for batch in super().batches(events):
            if self.closed and not told and self.on_final is not None:
                told = True
                await self.on_final(self.final)
            yield batch

    def _event(self, event_type: str, **data: Any) -> str:
        frame = sse_frame(event_type, {**data, "sequence_number": self._sequence})
        self._sequence += 1
        return frame

    def _part(self, text: str) -> dict[str, Any]:
        assert self._open is not None
        if self._open["type"] == "message":
            return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"type": "reasoning_text", "text": text}

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.output), "content_index": 0}

    def _start_item(self, kind: ItemKind) -> list[str]:
        """Open an item of ``kind`` (closing another kind's first); nothing when one is open."""
        if self._open is not None and self._open["type"] == kind:
            return []
        frames = self._finish_item("completed")
        if kind == "message":
            item: dict[str, Any] = {
                "id": item_id("msg", self.response_id, len(self.output)),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
        else:
            item_key = item_id("rs", self.response_id, len(self.output))
            item = {"id": item_key, "type": "reasoning", "summary": [], "content": []}
        self._open, self._open_text = item, []
        added = self._event("response.output_item.added", output_index=len(self.output), item=dict(item))
        frames.append(added)
        frames.append(self._event("response.content_part.added", **self._where(), part=self._part("")))
        return frames

    def _delta(self, text: str) -> str:
        assert self._open is not None
        self._open_text.append(text)
        if self._open["type"] == "message":
            return self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[])
        return self._event("response.reasoning_text.delta", **self._where(), delta=text)

    def _finish_item(self, status: Literal["completed", "incomplete"]) -> list[str]:
        """Close the open item (if any) with its whole text."""
        if self._open is None:
            return []
        text = "".join(self._open_text)
        where = self._where()
        if self._open["type"] == "message":
            done = self._event("response.output_text.done", **where, text=text, logprobs=[])
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
        part = self._part(text)
        frames = [done, self._event("response.content_part.done", **where, part=part)]
        item = {**self._open, "content": [part], "status": status}
        frames.append(self._event("response.output_item.done", output_index=len(self.output), item=item))
        self.output.append(item)
        self._open, self._open_text = None, []
        return frames

    def before_stream(self) -> Iterable[str]:
        snapshot = self.response_object()
        return (
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        )

    def after_stream(self) -> Iterable[str]:
        self.closed = True
        ended_well = self.status == "completed"
        frames = self._finish_item("completed" if ended_well else "incomplete")
        terminal = {"completed": "response.completed", "failed": "response.failed"}
        event_type = terminal.get(self.status, "response.incomplete")
        self.final = self.response_object()
        frames.append(self._event(event_type, response=self.final))
        return frames

    def on_text(self, event: TextDelta) -> Iterable[str]:
        if not event.text:
            return ()
        text = ("\n\n" if self._separate else "") + event.text
        self._shown, self._separate = True, False
        return [*self._start_item("message"), self._delta(text)]

    def on_thinking(self, event: Thinking) -> Iterable[str]:
        if not event.text:
            return ()
        return [*self._start_item("reasoning"), self._delta(event.text)]

    def on_new_segment(self, event: NewSegment) -> Iterable[str]:
        self._separate = self._shown
        return ()

    def on_tool_start(self, event: ToolStart) -> Iterable[str]:
        return (KEEPALIVE,)

    def on_tool_end(self, event: ToolEnd) -> Iterable[str]:
        return (KEEPALIVE,)

    def on_failed(self, event: RunFailed) -> Iterable[str]:
        return ()  # the terminal response.failed (after_stream) carries the error

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
        """A client tool call: a ``function_call`` item (see the module docstring)."""
        if not is_client_call(event):
            return ()
        frames = self._finish_item("completed")
        call, index = ClientCall.of(event), len(self.output)
        item: dict[str, Any] = {
            "id": item_id("fc", self.response_id, index),
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        where = {"item_id": item["id"], "output_index": index}
        frames.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        frames.append(self._event("response.function_call_arguments.delta", **where, delta=call.arguments))
        frames.append(self._event("response.function_call_arguments.done", **where, arguments=call.arguments))
        item.update(arguments=call.arguments, status="completed")
        frames.append(self._event("response.output_item.done", output_index=index, item=item))
        self.output.append(item)
        return frames

    def on_question(self, event: QuestionAsked) -> Iterable[str]:
        return ()

    def on_title(self, event: Title) -> Iterable[str]:
        return ()

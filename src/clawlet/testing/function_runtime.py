"""``FunctionRuntime``: a runtime adapter whose turns a test writes as a function of the message.

For tests of what sits above a runtime (the session manager, the transcripts, the edges) where the
runtime itself is not what is tested: ``function(message)`` gives the turn's events, a plain or an
async iterable (an async generator may wait, e.g. on an ``asyncio.Event``, to hold a turn open);
what it raises fails the turn. Every message is recorded in :attr:`FunctionRuntime.messages`.

Example::

    def answer(message: UserMessage) -> list[Event]:
        return [TextDelta(f"You said {message.text}")]

    manager = SessionManager(settings, store, {"engine": lambda: FunctionRuntime(answer)})
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from typing import Any

from clawlet.events import Event
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage

__all__ = ["FunctionRuntime", "TurnFunction"]

TurnFunction = Callable[[UserMessage], Iterable[Event] | AsyncIterable[Event]]
"""A test's runtime: the events of the turn ``message`` starts."""


class FunctionRuntime(RuntimeAdapter):
    """A runtime answering each turn with :attr:`function` (see the module docstring)."""

    def __init__(self, function: TurnFunction) -> None:
        self.function = function
        self.session_id = ""
        self.messages: list[UserMessage] = []
        self.cancels = 0
        self.stopped = False

    async def start(self, session_id: str, config: RunConfig) -> None:
        self.session_id = session_id

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        self.messages.append(data)
        events = self.function(data)
        if isinstance(events, AsyncIterable):
            async for event in events:
                yield event
        else:
            for event in events:
                yield event

    async def cancel(self) -> None:
        self.cancels += 1

    async def stop(self) -> None:
        self.stopped = True

    def get_snapshot(self) -> dict[str, Any]:
        return {"type": "function", "session_id": self.session_id, "turns": len(self.messages)}

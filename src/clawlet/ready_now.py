"""Take an awaitable's result now if it is ready without waiting, else keep it to await later.

Reading the next item of a stream whose bytes are already buffered does not suspend: the coroutine
runs to its result in one step. :func:`step_once` runs that one step synchronously, outside the
event loop's scheduling. If the awaitable finished, its result (or error) is there at once; if it
would have waited (on I/O, a lock, a sleep), it is returned as a :class:`Suspended`, which the same
task awaits later to go on exactly where it stopped, or cancels (:meth:`Suspended.cancel`) when it
is no longer wanted.

Why not a task that reads ahead: it would read the whole buffer while the reader is busy elsewhere,
holding the interpreter when the reader is deliberately idle (see
:mod:`clawlet.engine.token_release`). Stepping pulls only when the reader asks, and only what is
already there.

The awaitable must be stepped and resumed in the task that awaits it (asyncio and anyio bind
cancellation and timeouts to the current task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ready(Generic[T]):
    """The awaitable finished in its first step with this result."""

    value: T


class Suspended(Generic[T]):
    """An awaitable that would have waited when first stepped. Awaiting this (once) resumes it where
    it stopped, with the task passing each wait's outcome on to it as it would have."""

    def __init__(self, steps: Generator[Any, Any, T], waiting_on: object) -> None:
        self.steps = steps
        self.waiting_on: object = waiting_on
        self.awaited = False

    def __await__(self) -> Generator[Any, Any, T]:
        if self.awaited:
            raise RuntimeError("a suspended awaitable is resumed once")
        self.awaited = True
        waiting_on = self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                self.steps.close()
                raise
            except BaseException as error:  # the task's cancellation, thrown in where it waits
                try:
                    waiting_on = self.steps.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    waiting_on = self.steps.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]

    async def cancel(self) -> None:
        """Cancel it where it waits, the way cancelling the task would, and let its clean-up run
        (which may itself wait) to the end. Errors of the clean-up end with it."""
        if self.awaited:
            return
        self.awaited = True
        try:
            waiting_on = self.steps.throw(asyncio.CancelledError())
        except (Exception, asyncio.CancelledError):
            return
        rest = Suspended(self.steps, waiting_on)
        try:
            await rest
        except (Exception, asyncio.CancelledError):
            return


def step_once(awaitable: Awaitable[T]) -> Ready[T] | Suspended[T]:
    """Run ``awaitable`` up to its first wait (see the module docstring). Its error, if it fails
    before waiting, is raised here."""
    steps = awaitable.__await__()
    try:
        waiting_on = steps.send(None)
    except StopIteration as stop:
        return Ready(stop.value)
    return Suspended(steps, waiting_on)

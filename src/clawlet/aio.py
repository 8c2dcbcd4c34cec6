"""How clawlet's programs run their event loop: on uvloop when it is installed (a dependency on
Linux and macOS), else on asyncio's own loop; ``CLAWLET_EVENT_LOOP=asyncio`` chooses asyncio's
loop anyway (``uvloop`` insists on uvloop and fails when it is missing).

Every long-running program goes through :func:`run` (the exec plane, each session process, the
gateway port's shared loop) or passes :func:`uvicorn_loop` to uvicorn (``clawlet serve``, the
control plane; through :func:`clawlet.serving.uvicorn_options`), so one setting governs them all.
uvloop's loop costs less CPU per event than asyncio's: in cluster mode a turn crosses three event
loops (session process, exec plane, control plane), and bench/README.md ("uvloop") measures what
that saves.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, TypeVar

T = TypeVar("T")

ENV_EVENT_LOOP: Final = "CLAWLET_EVENT_LOOP"
LoopName = Literal["uvloop", "asyncio"]


def loop_name() -> LoopName:
    """The loop this process's programs run on (see the module docstring)."""
    wanted = os.environ.get(ENV_EVENT_LOOP, "").strip().lower()
    if wanted not in ("", "auto", "uvloop", "asyncio"):
        raise ValueError(f"{ENV_EVENT_LOOP} must be auto, uvloop or asyncio, not {wanted!r}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ValueError(f"{ENV_EVENT_LOOP}=uvloop but uvloop is not installed") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A factory of this process's loop for ``asyncio.Runner`` (``None``: asyncio's default)."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on this process's loop."""
    try:
        factory = loop_factory()
    except ValueError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def uvicorn_loop() -> LoopName:
    """uvicorn's ``loop`` setting for the same choice."""
    return loop_name()

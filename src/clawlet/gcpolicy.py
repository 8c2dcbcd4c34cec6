"""The garbage collector and the allocator of a serving process, steered by its running turns.

``clawlet serve`` moves everything loaded at start-up out of the collector's reach
(``gc.freeze()``), so full collections walk only what serving made. But the first turn imports
and builds a good part of what a turn uses (the model's client library, the compiled agent, their
pydantic models): about 70,000 objects that every full collection then walks again (a pause of
30-130 ms every few dozen turns, the p99 of a turn). So the first time the process has no turn
running after one ran, in a process that froze at start-up (one that did not, like a test run, is
left alone), what is alive then is frozen too, and young collections are made rarer
(:data:`THRESHOLDS`). Frozen only when no turn runs: an object of a turn in flight frozen then
would never be collected if it is part of a cycle.

**Memory after a burst.** CPython's small objects live in 1 MiB arenas that go back to the
system only once empty; a burst of simultaneous turns spreads its objects over many new arenas,
and the few objects that outlive it (and the interpreter's free lists) keep them mapped. So when
the process has been without a running turn for :data:`QUIET_SECONDS` (at most once every
:data:`MIN_RELEASE_INTERVAL`), :func:`release_memory` collects fully (which also empties the free
lists) and, on glibc, gives the allocator's free memory back (``malloc_trim``).

The manager and the engine workers report each turn: :func:`turn_started` and :func:`after_turn`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_done = False
_serving: bool | None = None
"""Whether this process froze at start-up: asked once (``gc.get_freeze_count()`` walks every
frozen object, several ms in a serving process)."""
_running = 0
_quiet_timer: asyncio.TimerHandle | None = None
_quiet_loop: asyncio.AbstractEventLoop | None = None
_last_release = float("-inf")

THRESHOLDS = (5000, 20, 10)
"""``gc.set_threshold`` once serving: a young collection per 5,000 allocations instead of 700.
Measured over 200 turns on a scripted model: 17 young collections instead of 184, 36 ms of
collecting instead of about 120 ms, the longest pause no longer (about 8 ms either way)."""

QUIET_SECONDS = 1.0
"""How long the process must have had no running turn before :func:`release_memory` runs."""

MIN_RELEASE_INTERVAL = 10.0
"""The least time between two :func:`release_memory` runs (each costs a few ms)."""

releases = 0
"""How many times :func:`release_memory` ran in this process: what tests count."""


def freeze_what_serving_loaded() -> None:
    """Collect once, then move every object alive now out of the collector's reach."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    if log.isEnabledFor(logging.DEBUG):  # the count walks every frozen object
        log.debug("gc: %d objects frozen after the first turn", gc.get_freeze_count())


def _glibc_function(name: str) -> Callable[..., int] | None:
    """``name`` from the C library if it is glibc's (``None`` elsewhere: musl, macOS, Windows)."""
    path = ctypes.util.find_library("c")
    if path is None or "libc.so" not in path:
        return None
    function: Callable[..., int] | None = getattr(ctypes.CDLL(path), name, None)
    return function


def malloc_trim() -> bool:
    """Give the C allocator's free memory back to the system (glibc); False where there is none."""
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


def release_memory() -> None:
    """Collect fully (emptying the interpreter's free lists, whose blocks pin arenas) and trim the
    C allocator."""
    global releases, _last_release
    releases += 1
    _last_release = time.monotonic()
    gc.collect()
    malloc_trim()


def turn_started() -> None:
    """Call when a turn starts (paired with :func:`after_turn`)."""
    global _running
    _running += 1


def after_turn() -> None:
    """Call when a turn ended. When no turn runs any more: the first time in a process that froze
    at start-up, freeze what the turns loaded (soon, on the running event loop, so the turn's last
    events go out first); and release memory once the process has stayed quiet."""
    global _running, _done, _serving
    _running = max(0, _running - 1)
    if _serving is None:
        _serving = gc.get_freeze_count() > 0
    if _running or not _serving:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop: now
        loop = None
    if not _done:
        _done = True
        if loop is None:
            freeze_what_serving_loaded()
        else:
            loop.call_soon(freeze_what_serving_loaded)
    if loop is not None:
        _when_quiet(loop)


def _when_quiet(loop: asyncio.AbstractEventLoop) -> None:
    """Check again once the process may have been quiet long enough (one timer at a time)."""
    global _quiet_timer, _quiet_loop
    if _quiet_timer is not None and _quiet_loop is loop:
        return
    delay = max(QUIET_SECONDS, _last_release + MIN_RELEASE_INTERVAL - time.monotonic())
    _quiet_timer, _quiet_loop = loop.call_later(delay, _quiet), loop


def release_scheduled() -> bool:
    """Whether :func:`release_memory` will run once the process has stayed quiet."""
    return _quiet_timer is not None


def _quiet() -> None:
    global _quiet_timer
    _quiet_timer = None
    if not _running:
        release_memory()

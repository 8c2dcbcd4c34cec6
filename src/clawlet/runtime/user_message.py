"""The write of a turn's user message: when it happens, and how a turn waits for it.

Nothing of a turn's answer goes out or is written before its user message is on disk, so a
client never sees an answer to a message a crash could lose. When the write happens:

* **a lone turn on this event loop** (no other turn runs in the process): on the loop. In a new
  session at once, before the turn starts and before the client hears back: the session exists
  from then on (a cancel, a deletion or a history read right after the answer's headers find
  it). In a stored session, with a model whose requests are traced
  (:attr:`clawlet.runtime.base.RuntimeAdapter.writes_while_model_thinks`), once the model's
  request is out (:func:`clawlet.llm.request_sent.while_the_model_thinks`), so its fsyncs (a
  long transcript's take longer) overlap the model's time instead of coming before the request;
  with another model (the demo model, one not built yet) at once too. On the loop, because a
  worker thread would start only once the loop is idle, after the response has started (~0.9 ms),
  and beside the engine's set-up each of its system calls waited for the busy loop to let the GIL
  go (bench/README.md, issue 17).
* **beside other turns**: on a worker thread at once, so no other stream waits for the disk; an
  in-process turn then starts once it is written (the GIL again).
* **a runtime in another process**: on a worker thread at once; the runtime starts meanwhile.

A write that fails fails the turn: nothing of the answer goes out or is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class UserMessageWrite:
    """One turn's user-message write: :meth:`start` it (on a worker thread, or on the loop: at once
    or, ``when_needed``, at the first :meth:`run_now`), :meth:`wait` for it."""

    def __init__(self, save: Callable[[], None], *, on_the_loop: bool, when_needed: bool = False) -> None:
        self.save = save
        self.on_the_loop = on_the_loop
        """Whether the write runs on the loop (else on a worker thread, at once)."""
        self.when_needed = when_needed
        """Whether a write on the loop waits for :meth:`run_now` (else :meth:`start` writes)."""
        self.written: asyncio.Future[None] | None = None
        self.loop = asyncio.get_running_loop()

    @property
    def waits_to_be_needed(self) -> bool:
        """Whether the write runs on the loop at the first :meth:`run_now` (not at :meth:`start`)."""
        return self.on_the_loop and self.when_needed

    @property
    def done(self) -> bool:
        """Whether the write has ended (written, or failed)."""
        return self.written is not None and self.written.done()

    def start(self) -> UserMessageWrite:
        """Start the write (one on the loop ``when_needed`` waits for :meth:`run_now`)."""
        if not self.on_the_loop:
            self.written = asyncio.ensure_future(asyncio.to_thread(self.save))
        elif not self.when_needed:
            self.run_now()
        return self

    def run_now(self) -> None:
        """Write on the loop if that is still to do (does nothing otherwise, or when called off
        the turn's loop: a worker thread's request); never raises: a failure is what :meth:`wait`
        raises."""
        if self.written is not None or not self._on_the_turns_loop():
            return
        self.written = self.loop.create_future()
        try:
            self.save()
        except Exception as exc:
            self.written.set_exception(exc)
        else:
            self.written.set_result(None)

    def _on_the_turns_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:  # a thread with no loop
            return False

    async def wait(self, *, raising: bool = True) -> bool:
        """Once the message is on disk (written now if still to do): True; if the write failed,
        raise its error, or with ``raising=False`` say so (False)."""
        self.run_now()
        assert self.written is not None
        try:
            await asyncio.shield(self.written)
        except Exception:
            if raising:
                raise
            return False
        return True

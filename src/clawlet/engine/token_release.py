"""Each streamed model chunk let out of the model step as it arrives, even when many arrive at once.

The model step and the turn's reader share one event loop: the model node (LangChain reading the
provider's stream) hands each chunk to LangGraph's ``messages`` stream, which a waiter task on the
loop passes to :meth:`clawlet.engine.agent.AgentEngine.stream`. Reading a chunk that is already
in the HTTP client's buffer does not suspend, so when a provider sends a burst (a fast model, a
cached answer, a slow network delivering in one read) the model node relays the whole burst
before the reader runs once: the first token reached the client only after the last chunk of the
burst was parsed (about 15 ms for a 200-chunk answer on this machine). :class:`TokenRelease`, a
LangChain callback handler run inline with each new token (one per turn), gives the loop a turn
after each chunk until a model call's first text has been passed on, so it goes out at once, and
then every millisecond of a burst (not after every chunk: each release runs the whole relay once,
about as much CPU as parsing a chunk). When chunks trickle in (a model generating them) the read
suspends anyway.

The turn's user message is on disk before an in-process turn starts
(:meth:`clawlet.runtime.manager.SessionManager.start_turn`): written beside the model step, each of
the write's system calls waited for the busy loop thread to let the GIL go, so the write of ~0.5 ms
took 5-8 ms and the first text waited for it (bench/README.md).
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk

RELEASE_INTERVAL = 0.001
"""Seconds the model step may go on parsing a burst after its first text before it lets the loop
run again: chunks parsed meanwhile go out together (watchers merge the text that piled up), so
the release costs one pass of the relay per millisecond of burst, not one per chunk."""


class TokenRelease(AsyncCallbackHandler):
    """One turn's release of streamed chunks (see the module docstring): from a model call's first
    text until the turn has passed that text on (:meth:`passed_on`), the loop gets a turn after
    every chunk (the text goes through several tasks on its way out: LangGraph's stream, the turn,
    each watcher; each needs a turn of the loop);
    after that at most every :data:`RELEASE_INTERVAL` while chunks keep coming without a pause.
    The text is passed on (published to the turn's watchers) while the model step waits in a
    release it started before; that release ends with the watchers still waiting for the loop, so
    one more release follows, started after the text was passed on, before the interval applies
    (without it the first token waited up to the interval: ~1 ms of parsing the burst).
    Every other callback event is ignored, so LangChain does not dispatch it here."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_chat_model = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(self) -> None:
        self.text_of: UUID | None = None
        """The model call whose first text was seen."""
        self.eager = False
        """Whether that text is still on its way out (every chunk is released)."""
        self.released = -RELEASE_INTERVAL
        self.passed = False
        """Whether the text was passed on: the next release is the last eager one."""

    def passed_on(self) -> None:
        """The turn has passed a text on: after one more release (which lets its watchers run),
        back to a release per :data:`RELEASE_INTERVAL`."""
        self.passed = self.eager

    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if token and run_id != self.text_of:  # a model call's first text
            self.text_of = run_id
            self.eager = True
            self.passed = False
        loop = asyncio.get_running_loop()
        if self.eager or loop.time() - self.released >= RELEASE_INTERVAL:
            last_eager = self.passed  # decided before the release: it starts after the pass
            await asyncio.sleep(0)
            self.released = loop.time()
            if last_eager:
                self.eager = self.passed = False

"""Each streamed model chunk let out of the model step as it arrives, even when many arrive at once.

The model step and the turn's reader share one event loop: the model node (LangChain reading the
provider's stream) hands each chunk to LangGraph's ``messages`` stream, which a waiter task on the
loop passes to :meth:`clawlet.engine.agent.AgentEngine.stream`. Reading a chunk that is already
in the HTTP client's buffer does not suspend, so when a provider sends a burst (a fast model, a
cached answer, a slow network delivering in one read) the model node relays the whole burst
before the reader runs once: the first token reached the client only after the last chunk of the
burst was parsed (about 15 ms for a 200-chunk answer on this machine). :class:`TokenRelease`, a
LangChain callback handler run inline with each new token (one per turn), gives the loop turns
until a model call's first text has been passed on, so it goes out at once, and then a turn every
millisecond of a burst (not after every chunk: each release runs the whole relay once, about as
much CPU as parsing a chunk). When chunks trickle in (a model generating them) the read
suspends anyway.

The turn's user message is written on the loop while the model thinks, or before an in-process
turn starts (:mod:`clawlet.runtime.user_message`): written on a worker thread beside the model
step, each of the write's system calls waited for the busy loop thread to let the GIL go, so the
write of ~0.5 ms took 5-8 ms and the first text waited for it (bench/README.md).
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

MAX_TURNS_FOR_FIRST_TEXT = 16
"""Turns of the loop the model step gives a first text to be passed on (it takes about four)."""

WATCHER_TURNS = 2
"""Turns of the loop after the first text was passed on: the watchers it woke send it."""


class TokenRelease(AsyncCallbackHandler):
    """One turn's release of streamed chunks (see the module docstring).

    A model call's first text is let all the way out before the model step parses on: at the
    callback of the chunk after it, the step gives the loop turns until the turn has passed the
    text on (:meth:`passed_on`: LangGraph's stream, the turn and the turn's publishing each took
    a turn of the loop), then :data:`WATCHER_TURNS` more so the watchers it woke send it (at most
    :data:`MAX_TURNS_FOR_FIRST_TEXT` while it is not passed on: a model call the turn does not
    relay, e.g. one inside a tool). Not at the first text's own callback: LangGraph hands a chunk
    to its stream in a handler that runs after this one, so a release there would find nothing
    to pass on. Before, the step released once per chunk: each chunk parsed between two hops of
    the first text (~0.15 ms each) delayed it, ~0.7 ms in a burst.
    After that, the loop gets a turn at most every :data:`RELEASE_INTERVAL` while chunks keep
    coming without a pause. Every other callback event is ignored, so LangChain does not dispatch
    it here."""

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
        self.first_text_pending = False
        """Whether that text is in LangGraph's stream, not yet let out."""
        self.released = -RELEASE_INTERVAL
        self.passed = False
        """Whether the turn passed a text on since the first text was seen."""

    def passed_on(self) -> None:
        """The turn has passed a text on (published it to its watchers)."""
        self.passed = True

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
        loop = asyncio.get_running_loop()
        if token and run_id != self.text_of:  # a model call's first text: let out at the next chunk
            self.text_of = run_id
            self.first_text_pending = True
            self.passed = False
            return
        if self.first_text_pending and run_id == self.text_of:
            self.first_text_pending = False
            for _ in range(MAX_TURNS_FOR_FIRST_TEXT):
                await asyncio.sleep(0)
                if self.passed:
                    for _ in range(WATCHER_TURNS):
                        await asyncio.sleep(0)
                    break
            self.released = loop.time()
        elif loop.time() - self.released >= RELEASE_INTERVAL:
            await asyncio.sleep(0)
            self.released = loop.time()

"""Each streamed model chunk let out of the model step as it arrives, even when many arrive at once.

The model step and the turn's reader share one event loop: the model node (LangChain reading the
provider's stream) hands each chunk to LangGraph's ``messages`` stream, which a waiter task on the
loop passes to :meth:`clawlet.engine.agent.AgentEngine.stream`. Reading a chunk that is already
in the HTTP client's buffer does not suspend, so when a provider sends a burst (a fast model, a
cached answer, a slow network delivering in one read) the model node relays the whole burst
before the reader runs once: the first token reached the client only after the last chunk of the
burst was parsed (about 15 ms for a 200-chunk answer on this machine). :class:`TokenRelease`, a
LangChain callback handler run inline with each new token (one per turn), gives the loop a turn
after a model call's first text, so the reader relays it at once, and then every millisecond of a
burst (not after every chunk: each release runs the whole relay once, about as much CPU as
parsing a chunk). When chunks trickle in (a model generating them) the read suspends anyway.
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
    """One turn's release of streamed chunks (see the module docstring): the loop gets a turn
    after the first chunk with text of each model call, then at most every
    :data:`RELEASE_INTERVAL` while chunks keep coming without a pause. Every other callback event
    is ignored, so LangChain does not dispatch it here."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_chat_model = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(self) -> None:
        self.text_of: UUID | None = None
        """The model call whose first text was released."""
        self.released = -RELEASE_INTERVAL

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
        first_text = bool(token) and run_id != self.text_of
        if first_text:
            self.text_of = run_id
        if first_text or loop.time() - self.released >= RELEASE_INTERVAL:
            await asyncio.sleep(0)
            self.released = loop.time()

"""Each streamed model chunk let out of the model step as it arrives, even when many arrive at once.

The model step and the turn's reader share one event loop: the model node (LangChain reading the
provider's stream) hands each chunk to LangGraph's ``messages`` stream, which a waiter task on the
loop passes to :meth:`clawlet.engine.agent.AgentEngine.stream`. Reading a chunk that is already
in the HTTP client's buffer does not suspend, so when a provider sends a burst (a fast model, a
cached answer, a slow network delivering in one read) the model node relays the whole burst
before the reader runs once: the first token reached the client only after the last chunk of the
burst was parsed (about 15 ms for a 200-chunk answer on this machine). :class:`TokenRelease`, a
LangChain callback handler run inline with each new token, gives the loop one turn after each
chunk, so the reader relays the chunk at once; when chunks trickle in (a model generating them)
the read suspends anyway and this costs one loop pass per chunk.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk


class TokenRelease(AsyncCallbackHandler):
    """Yield to the event loop after every streamed chunk of a model call (see the module
    docstring); every other callback event is ignored, so LangChain does not dispatch it here."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_chat_model = True
    ignore_retry = True
    ignore_custom_event = True

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
        await asyncio.sleep(0)


TOKEN_RELEASE = TokenRelease()
"""The one handler every turn passes (it holds no state)."""

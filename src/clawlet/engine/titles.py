"""Session titles: at most 10 characters, written by the model after the first exchange."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clawlet.config import Settings
from clawlet.llm.demo_names import TITLE_REQUEST_MARKER
from clawlet.llm.providers import build_chat_model

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)

MAX_TITLE_CHARS = 10
TITLE_PROMPT = (
    f"{TITLE_REQUEST_MARKER}: at most {MAX_TITLE_CHARS} characters, in the language the user "
    "wrote in (中文对话用中文标题). Reply with the title only: no quotes, no punctuation at the end."
)


def clean_title(raw: str) -> str:
    """First non-empty line, without quotes or trailing punctuation, cut to 10 characters."""
    line = next((part.strip() for part in raw.splitlines() if part.strip()), "")
    line = line.strip("\"'“”‘’「」《》`*# ").rstrip("。.!！?？,，:：;；")
    return line[:MAX_TITLE_CHARS].strip()


def fallback_title(user_message: str) -> str:
    return clean_title(user_message) or "New chat"


@dataclass(frozen=True)
class GeneratedTitle:
    """A session title and the tokens its model call used (0 for the fallback title)."""

    title: str
    input_tokens: int = 0
    output_tokens: int = 0


class TitleWriter:
    """Asks the model for session titles: one model, built at the first title and kept while the
    settings are the same object (models keep no state between calls; building one per title cost
    ~3 ms of CPU a workbench turn). Settings replaced (an exec plane's ``init`` gives the model and
    keys later) build the model anew."""

    def __init__(self) -> None:
        self._built: tuple[Settings, BaseChatModel] | None = None

    def model(self, settings: Settings) -> BaseChatModel:
        """The title model for ``settings``."""
        if self._built is None or self._built[0] is not settings:
            self._built = (settings, build_chat_model(settings, temperature=0.3))
        return self._built[1]

    async def title(self, settings: Settings, user_message: str, assistant_reply: str) -> GeneratedTitle:
        """Ask the model for a title; fall back to the start of the user's message on any failure."""
        from langchain_core.messages import (  # not at server start (see clawlet.cli)
            HumanMessage,
            SystemMessage,
        )

        conversation = f"user: {user_message[:1000]}\nassistant: {assistant_reply[:1000]}"
        input_tokens = output_tokens = 0
        try:
            model = self.model(settings)
            # not streamed: nobody watches a title come, and a streamed one cost a parse per chunk
            asked = [SystemMessage(TITLE_PROMPT), HumanMessage(conversation)]
            reply = await model.ainvoke(asked, stream=False)
            usage = getattr(reply, "usage_metadata", None) or {}
            input_tokens, output_tokens = (
                int(usage.get("input_tokens", 0)),
                int(usage.get("output_tokens", 0)),
            )
            title = clean_title(reply.text)
        except Exception as exc:  # a failed title must never fail the chat turn
            log.warning("title generation failed: %s", exc)
            title = ""
        return GeneratedTitle(title or fallback_title(user_message), input_tokens, output_tokens)

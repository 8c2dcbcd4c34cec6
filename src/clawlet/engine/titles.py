"""Session titles: at most 10 characters, written by the model after the first exchange."""

from __future__ import annotations

import logging

from langchain_core.messages import HumanMessage, SystemMessage

from clawlet.config import Settings
from clawlet.llm.demo import TITLE_REQUEST_MARKER
from clawlet.llm.providers import build_chat_model

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


async def generate_title(settings: Settings, user_message: str, assistant_reply: str) -> str:
    """Ask the model for a title; fall back to the start of the user's message on any failure."""
    conversation = f"user: {user_message[:1000]}\nassistant: {assistant_reply[:1000]}"
    try:
        model = build_chat_model(settings, temperature=0.3)
        reply = await model.ainvoke([SystemMessage(TITLE_PROMPT), HumanMessage(conversation)])
        title = clean_title(reply.text)
    except Exception as exc:  # a failed title must never fail the chat turn
        log.warning("title generation failed: %s", exc)
        title = ""
    return title or fallback_title(user_message)

"""Images in a user message: which providers take them, how they reach the model, what the
transcript keeps.

A client sends OpenAI's ``{"type": "image_url", "image_url": {"url": ...}}`` content parts with a
``data:image/...;base64,`` or ``http(s)://`` URL. The images of the turn's message reach the model
as LangChain content blocks beside its text (:func:`image_blocks`) when the provider accepts images
(:func:`accepts_images`, the one place that decides); the text that is stored in the session (and
sent with them) carries a short note per image (:func:`image_note`) instead of the image itself, so
later turns know an image was there without megabytes of base64 in the history.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import HumanMessage

IMAGE_PROVIDERS = frozenset({"openai", "anthropic"})
"""Providers whose models are sent images (OpenAI-compatible endpoints and Anthropic); the offline
demo model and DeepSeek's API take none."""

_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,([A-Za-z0-9+/=\s]+)$")
_WEB_URL = re.compile(r"^https?://\S+$")
_NOTE_URL_CHARS = 200


class ContentError(ValueError):
    """A content part clawlet cannot pass on (an unknown type or a malformed image)."""


def accepts_images(provider: str) -> bool:
    return provider in IMAGE_PROVIDERS


def image_url(part: dict[str, Any]) -> str:
    """The URL of an ``image_url`` part; raise :class:`ContentError` if it is malformed."""
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not (_DATA_URL.match(url) or _WEB_URL.match(url)):
        raise ContentError(
            "an image_url part needs image_url.url: a data:image/...;base64,... URL or an http(s) URL"
        )
    return url


def image_note(url: str) -> str:
    """What the transcript keeps of an image: its type and size, or its web address."""
    found = _DATA_URL.match(url)
    if found:
        size = len(re.sub(r"\s", "", found.group(2))) * 3 // 4
        return f"[image: {found.group(1)}, {max(1, round(size / 1024))} KB]"
    shown = url if len(url) <= _NOTE_URL_CHARS else url[:_NOTE_URL_CHARS] + "…"
    return f"[image: {shown}]"


def image_blocks(urls: tuple[str, ...]) -> list[dict[str, Any]]:
    """The images as LangChain (OpenAI-format) content blocks."""
    return [{"type": "image_url", "image_url": {"url": url}} for url in urls]


def user_message(text: str, images: tuple[str, ...]) -> HumanMessage:
    """The turn's user message: plain text, or text and image blocks."""
    if not images:
        return HumanMessage(text)
    return HumanMessage([{"type": "text", "text": text}, *image_blocks(images)])

"""Images in a user message: which providers take them, how they reach the model, what the
transcript keeps.

A client sends OpenAI's ``{"type": "image_url", "image_url": {"url": ...}}`` content parts with a
``data:image/...;base64,`` or ``http(s)://`` URL. The images of the turn's message reach the model
as LangChain content blocks beside its text (:func:`user_message`) when the provider accepts images
(:func:`accepts_images`, the one place that decides); the text that is stored in the session (and
sent with them) carries a short note per image (:func:`image_note`) instead of the image itself, so
later turns know an image was there without megabytes of base64 in the history.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import HumanMessage

IMAGE_PROVIDERS = frozenset({"openai", "anthropic"})
"""Providers whose models are sent images (OpenAI-compatible endpoints and Anthropic); the offline
demo model and DeepSeek's API take none."""

_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,([A-Za-z0-9+/]+=*)$")
_WEB_URL = re.compile(r"^https?://\S+$")
_NOTE_URL_CHARS = 200


class ContentError(ValueError):
    """A content part clawlet cannot pass on (an unknown type or a malformed image)."""


@dataclass(frozen=True)
class Image:
    """One image of a user message: its URL and OpenAI's ``detail`` (``auto``, ``low``, ``high``)."""

    url: str
    detail: str | None = None

    def block(self) -> dict[str, Any]:
        """The image as a LangChain (OpenAI-format) content block."""
        return {"type": "image_url", "image_url": self.to_json()}

    def to_json(self) -> dict[str, str]:
        """OpenAI's ``image_url`` object."""
        return {"url": self.url} if self.detail is None else {"url": self.url, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Any) -> Image | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("url"), str):
            return None
        detail = data.get("detail")
        return cls(data["url"], detail if isinstance(detail, str) else None)


def accepts_images(provider: str) -> bool:
    return provider in IMAGE_PROVIDERS


def image_of(part: dict[str, Any]) -> Image:
    """The image of an ``image_url`` part; raise :class:`ContentError` if it is malformed."""
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not (_DATA_URL.match(url) or _WEB_URL.match(url)):
        raise ContentError(
            "an image_url part needs image_url.url: a data:image/...;base64,... URL or an http(s) URL"
        )
    detail = spec.get("detail") if isinstance(spec, dict) else None
    if detail not in (None, "auto", "low", "high"):
        raise ContentError("image_url.detail must be 'auto', 'low' or 'high'")
    return Image(url, detail)


def image_note(url: str) -> str:
    """What the transcript keeps of an image: its type and size, or its web address."""
    found = _DATA_URL.match(url)
    if found:
        size = len(found.group(2)) * 3 // 4
        return f"[image: {found.group(1)}, {max(1, round(size / 1024))} KB]"
    shown = url if len(url) <= _NOTE_URL_CHARS else url[:_NOTE_URL_CHARS] + "…"
    return f"[image: {shown}]"


def user_message(text: str, images: tuple[Image, ...]) -> HumanMessage:
    """The turn's user message: plain text, or text and image blocks."""
    from langchain_core.messages import HumanMessage  # not when the server starts (see clawlet.cli)

    if not images:
        return HumanMessage(text)
    return HumanMessage([{"type": "text", "text": text}, *(image.block() for image in images)])

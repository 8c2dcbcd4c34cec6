"""The request body of an OpenAI-compatible chat model without LangChain reading earlier answers
character by character.

``langchain_openai``'s ``_convert_message_to_dict`` looks for an ``audio`` block in an assistant
message with ``for block in message.content``: on a plain-text answer that walks the string one
character at a time (``isinstance`` per character; ~110 µs for a 3,000-character answer), every
turn, for every earlier answer of the session. A session of 50 turns paid ~6 ms per request.

A character is never a dict, so on text that loop finds nothing: the message converts to the same
dict with its text put back afterwards. :func:`build_payload` hands LangChain each assistant
message of plain text with its text taken out (a shallow copy) and puts the text back into the
converted message; everything else of the conversion (tool calls, names, roles, a subclass's own
changes after it) is LangChain's. A body that is not a chat completion's message list (the
Responses API) is built again from the messages as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

PayloadBuilder = Callable[..., dict[str, Any]]


def build_payload(build: PayloadBuilder, messages: Sequence[BaseMessage], **kwargs: Any) -> dict[str, Any]:
    """``build(messages, **kwargs)`` (a model's ``_get_request_payload``) with every assistant
    message's plain text set aside while LangChain converts it, then put back."""
    texts: dict[int, str] = {}
    handed: list[BaseMessage] = []
    for index, message in enumerate(messages):
        content = message.content
        if isinstance(message, AIMessage) and type(content) is str and content:
            texts[index] = content
            message = message.model_copy(update={"content": ""})
        handed.append(message)
    if not texts:
        return build(list(messages), **kwargs)
    payload = build(handed, **kwargs)
    converted = payload.get("messages")
    if not isinstance(converted, list) or len(converted) != len(handed):
        return build(list(messages), **kwargs)  # not a chat completion's messages: as LangChain would
    for index, text in texts.items():
        entry = converted[index]
        if not isinstance(entry, dict) or entry.get("role") != "assistant":
            return build(list(messages), **kwargs)
        entry["content"] = text
    return payload

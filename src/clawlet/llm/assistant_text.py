"""The request body of an OpenAI-compatible chat model without LangChain converting the plain text
messages of the history one by one.

A session's history is mostly plain text: the user's questions and the earlier answers. Each turn,
LangChain's ``_convert_message_to_dict`` converted every one of them again (~3-5 µs each, plus
~110 µs for a 3,000-character answer: it looks for an ``audio`` block with ``for block in
message.content``, which on text walks the string one character at a time). :func:`build_payload`
writes those entries itself, exactly as that conversion writes them (``{"content": text, "role":
"user"}``, ``"assistant"`` likewise), and hands LangChain every other message (system prompts,
tool calls and results, names, content blocks, extra fields): what it converts and whatever a
model subclass changes afterwards (DeepSeek's list contents, the o-series' system role) is
LangChain's. An assistant message of text it converts (one with tool calls, say) is handed over
without its text, which is put back into the converted entry: a character is never a dict, so on
text that loop finds nothing. A body that is not a chat completion's message list (the Responses
API) is built again from the messages as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

PayloadBuilder = Callable[..., dict[str, Any]]


def plain_entry(message: BaseMessage) -> dict[str, Any] | None:
    """The chat completion entry LangChain writes for ``message`` if it is a plain text message of
    the user or the assistant (exactly that class, text content, no name, no tool calls, no extra
    fields or metadata), else None."""
    content = message.content
    if type(content) is not str or message.name is not None or message.additional_kwargs:
        return None
    kind = type(message)
    if kind is HumanMessage:
        return {"content": content, "role": "user"}
    if kind is AIMessage:
        answer: AIMessage = message  # type: ignore[assignment]
        if not (answer.tool_calls or answer.invalid_tool_calls or answer.response_metadata):
            return {"content": content, "role": "assistant"}
    return None


def build_payload(build: PayloadBuilder, messages: Sequence[BaseMessage], **kwargs: Any) -> dict[str, Any]:
    """``build(messages, **kwargs)`` (a model's ``_get_request_payload``) with the plain text
    messages' entries written here and every other assistant message's text set aside while
    LangChain converts it, then put back."""
    entries = [plain_entry(message) for message in messages]
    handed: list[BaseMessage] = []
    texts: dict[int, str] = {}  # by place in ``handed``
    for message, entry in zip(messages, entries, strict=True):
        if entry is not None:
            continue
        content = message.content
        if isinstance(message, AIMessage) and type(content) is str and content:
            texts[len(handed)] = content
            message = message.model_copy(update={"content": ""})
        handed.append(message)
    if len(handed) == len(messages) and not texts:
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
    others = iter(converted)
    payload["messages"] = [entry if entry is not None else next(others) for entry in entries]
    return payload

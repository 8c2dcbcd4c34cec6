"""What a Responses API request sends, in the terms chat completions already serve.

- **``input``** (:func:`read_input`): a string (the user's message) or a list of items. Message
  items (``input_text``/``output_text`` parts) become chat messages; an ``item_reference`` is
  replaced by the stored output item it names. Trailing ``function_call_output`` items (``call_id``,
  ``output``) are the client's results for the function calls a run paused on: they continue that
  run (:func:`clawlet.api.openai.chat.continue_turn`). ``function_call`` items (sent inline as the
  AI SDK and LangChain resend them, or by reference) and earlier results are history the paused
  session already holds, so they add nothing; neither does a reasoning item.
- **``tools``** (:func:`chat_tools`): function tools in the Responses shape (``name``,
  ``description``, ``parameters``, ``strict`` at the top level) become chat completions' function
  tools (:func:`clawlet.api.openai.client_tools.parse_tools` checks them); built-in tools
  (``web_search``, ``file_search``...) are refused: clawlet's agent runs its own.
- **``tool_choice``** (:func:`chat_tool_choice`): ``auto``, ``none``, ``required`` or
  ``{"type": "function", "name": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clawlet.api.openai.chat import ChatMessage
from clawlet.api.openai.client_tools import ToolsError

INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text"})
HISTORY_ITEMS = frozenset({"function_call", "function_call_output", "reasoning"})
"""Input items the session already holds: they add nothing to a turn."""


@dataclass
class RequestInput:
    """``input`` read: the chat messages, and the trailing function call results by call id."""

    messages: list[ChatMessage] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)


def item_text(where: str, content: Any) -> str:
    """The text of ``content`` (a string or text parts); ValueError names ``where`` it is wrong."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"{where} must be a string or a list of input_text parts")
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}: parts of type {kind!r} are not supported; send input_text parts")
        texts.append(part["text"])
    return "".join(texts)


def read_input(
    value: str | list[dict[str, Any]], find_item: Callable[[str], dict[str, Any] | None]
) -> RequestInput:
    """``input`` as chat messages and results (see the module docstring), an ``item_reference``
    replaced by the stored item it names (``find_item``); ValueError says which item clawlet
    cannot read."""
    if isinstance(value, str):
        return RequestInput(messages=[ChatMessage(role="user", content=value)])
    if not value:
        raise ValueError("input must not be empty")
    read = RequestInput()
    for index, item in enumerate(value):
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise ValueError(f"input[{index}].type must be a string")
        if kind == "item_reference":
            found = find_item(str(item.get("id")))
            if found is None:
                raise ValueError(f"input[{index}]: item with id {item.get('id')!r} not found")
            item, kind = found, found["type"]
        if kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ValueError(f"input[{index}].call_id must be the function call's call_id")
            read.results[call_id] = item_text(f"input[{index}].output", item.get("output"))
            continue
        if kind in HISTORY_ITEMS:
            continue
        if kind != "message":
            raise ValueError(
                f"input[{index}] has type {kind!r}: only message, function_call, function_call_output "
                "items (and item references) are supported"
            )
        role = item.get("role")
        if not isinstance(role, str) or role not in INPUT_ROLES:
            raise ValueError(f"input[{index}].role must be one of {', '.join(sorted(INPUT_ROLES))}")
        read.messages.append(
            ChatMessage(role=role, content=item_text(f"input[{index}].content", item.get("content")))
        )
        read.results.clear()  # results before a message are history; only trailing ones count
    return read


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The Responses API's function ``tools`` as chat completions' ``tools``; raises
    :class:`ToolsError` for a built-in tool."""
    converted: list[dict[str, Any]] = []
    for index, tool in enumerate(tools or ()):
        kind = tool.get("type")
        if kind != "function":
            raise ToolsError(
                f"tools[{index}] has type {kind!r}: only function tools are supported (clawlet's agent "
                "runs its own tools; built-in tools such as web_search or file_search are not served)",
                "tools",
            )
        function = {
            key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None
        }
        converted.append({"type": "function", "function": function})
    return converted


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """The Responses API's ``tool_choice`` as chat completions'; raises :class:`ToolsError` for a
    choice of a built-in tool (or ``allowed_tools``)."""
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and not isinstance(choice.get("name"), str):
        raise ToolsError("tool_choice must be {'type': 'function', 'name': ...}", "tool_choice")
    if choice.get("type") != "function":
        raise ToolsError(
            f"tool_choice of type {choice.get('type')!r} is not supported: use 'auto', 'none', "
            "'required' or {'type': 'function', 'name': ...}",
            "tool_choice",
        )
    return {"type": "function", "function": {"name": choice.get("name")}}

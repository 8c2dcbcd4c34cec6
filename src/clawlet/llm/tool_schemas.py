"""The OpenAI tool schemas of a model's tools, converted once per tool.

``create_agent`` binds the turn's tools to the model before every model call, and
``langchain_openai``'s ``bind_tools`` converts each ``BaseTool`` into its OpenAI schema anew
(``convert_to_openai_tool``: pydantic builds the JSON schema of the tool's arguments), ~30 µs a
tool, ~0.2 ms a model call for the seven core tools. A tool's schema does not change, so
:func:`openai_tools` converts each tool once (per ``strict``), with LangChain's own conversion,
and hands out a fresh copy of the result each time (the caller may change what it is given).
LangChain's ``bind_tools`` then takes each schema as it is (converting a converted schema gives
the same schema). A tool with ``extras`` (which ``bind_tools`` copies next to its schema), and
anything that is not a ``BaseTool`` (a client's tool given as a dict), goes to LangChain as it came.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

if TYPE_CHECKING:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import Runnable
    from langchain_openai.chat_models.base import BaseChatOpenAI

_converted: dict[tuple[int, bool | None], tuple[weakref.ref[BaseTool], bytes]] = {}
"""(tool id, strict) → (the tool, its schema as JSON); dropped with the tool."""


def bind_converted_tools(
    model: BaseChatOpenAI, bind: Callable[..., Any], tools: Sequence[Any], **options: Any
) -> Runnable[LanguageModelInput, AIMessage]:
    """``bind(tools, **options)`` (a model's ``bind_tools``) with each tool's OpenAI schema
    converted once, under the ``strict`` LangChain converts with: ``True`` with a
    ``response_format`` on Chat Completions unless ``strict=False`` is given."""
    strict = options.get("strict")
    if options.get("response_format") and strict is not False and not model.use_responses_api:
        strict = True
    return cast("Runnable[LanguageModelInput, AIMessage]", bind(openai_tools(tools, strict), **options))


def openai_tools(tools: Sequence[Any], strict: bool | None) -> list[Any]:
    """``tools`` with each plain ``BaseTool`` replaced by a copy of its OpenAI schema."""
    return [
        _schema(tool, strict) if isinstance(tool, BaseTool) and not tool.extras else tool for tool in tools
    ]


def _schema(tool: BaseTool, strict: bool | None) -> Any:
    key = (id(tool), strict)
    known = _converted.get(key)
    if known is None or known[0]() is not tool:
        try:
            schema = orjson.dumps(convert_to_openai_tool(tool, strict=strict))
        except orjson.JSONEncodeError:  # not plain JSON: LangChain converts it each time
            return tool

        def forget(_gone: weakref.ref[BaseTool]) -> None:
            _converted.pop(key, None)

        known = (weakref.ref(tool, forget), schema)
        _converted[key] = known
    return orjson.loads(known[1])

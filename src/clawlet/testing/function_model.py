"""``FunctionModel``: an in-process LangChain chat model whose replies a test writes as a function.

The idea of pydantic-ai's ``FunctionModel``: the test gives a plain function of the messages the
model is sent (and of :class:`CallInfo`: the tools bound, the call's options) that returns the
reply, text (a ``str``) or an ``AIMessage`` with tool calls (:func:`reply`, :func:`tool_call`).
The model streams that reply like a real provider (:mod:`clawlet.llm.replying`): the text in several
chunks, then every tool call as a ``tool_call_chunk`` (LangChain's ``GenericFakeChatModel`` drops
tool calls when streaming), then a last chunk with the reply's usage and response metadata. Every
call is recorded in :attr:`FunctionModel.calls` (shared by the copies ``bind_tools`` makes), so a
test can check what the model was sent. A function that raises makes the model call fail.

Example::

    def script(messages: list[BaseMessage], info: CallInfo) -> str | AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return f"It printed {messages[-1].text}"
        return reply("Running it.", tool_call("terminal", {"command": "echo hi"}))

    engine = build_services(settings, model=FunctionModel(function=script)).engine
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, UsageMetadata
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from clawlet.llm.replying import ReplyingChatModel

__all__ = ["CallInfo", "FunctionModel", "ModelFunction", "reply", "tool_call"]


@dataclass(frozen=True)
class CallInfo:
    """What a model call offered besides its messages."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    """The bound tools as OpenAI function tools (``{"type": "function", "function": {...}}``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The options bound (``tool_choice``, ``response_format``...) and given to the call."""

    @property
    def tool_names(self) -> list[str]:
        return [str(tool["function"]["name"]) for tool in self.tools]


ModelFunction = Callable[[list[BaseMessage], CallInfo], "str | AIMessage"]
"""A test's model: the reply to ``(messages, info)``."""


def tool_call(name: str, args: dict[str, Any] | None = None, *, call_id: str | None = None) -> ToolCall:
    """One tool call of a reply (a fresh id unless ``call_id`` is given)."""
    return ToolCall(
        name=name, args=args or {}, id=call_id or f"call_fn_{uuid.uuid4().hex[:12]}", type="tool_call"
    )


def reply(
    text: str = "",
    *calls: ToolCall,
    usage: UsageMetadata | None = None,
    response_metadata: dict[str, Any] | None = None,
) -> AIMessage:
    """A reply: ``text``, then ``calls``; ``usage`` and ``response_metadata`` (e.g.
    ``{"finish_reason": "length"}``) come with its last streamed chunk."""
    return AIMessage(
        content=text, tool_calls=list(calls), usage_metadata=usage, response_metadata=response_metadata or {}
    )


def as_openai_tool(tool: Any) -> dict[str, Any]:
    """A tool given to ``bind_tools`` (a ``BaseTool``, a function, an OpenAI tool dict) as an
    OpenAI function tool."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return tool
    return dict(convert_to_openai_tool(tool))


class FunctionModel(ReplyingChatModel):
    """A chat model answering with :attr:`function` (see the module docstring)."""

    function: ModelFunction
    bound_tools: list[dict[str, Any]] = Field(default_factory=list)
    bound_options: dict[str, Any] = Field(default_factory=dict)
    calls: list[tuple[list[BaseMessage], CallInfo]] = Field(default_factory=list)
    """Every call so far: its messages and :class:`CallInfo` (one list for this model and the
    copies ``bind_tools`` made of it)."""

    def __init__(self, function: ModelFunction, **kwargs: Any) -> None:
        super().__init__(function=function, **kwargs)

    @property
    def _llm_type(self) -> str:
        return "clawlet-function"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        options = {**kwargs, "tool_choice": tool_choice} if tool_choice is not None else dict(kwargs)
        update = {"bound_tools": [as_openai_tool(tool) for tool in tools], "bound_options": options}
        return self.model_copy(update=update)

    def reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        """Call the function (recording the call) and make its answer an ``AIMessage``."""
        info = CallInfo(tools=list(self.bound_tools), options={**self.bound_options, **kwargs})
        self.calls.append((list(messages), info))
        answer = self.function(list(messages), info)
        return AIMessage(content=answer) if isinstance(answer, str) else answer

"""The middleware of client-side tools (:mod:`clawlet.engine.client_tools`): it offers the turn's
client tools to the model and pauses the run on a call to one. Apart from the data, so that the server
imports LangChain only when it builds an agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ToolCallRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, interrupt

from clawlet.engine.client_tools import CLIENT_TOOL_INTERRUPT, provider_tool_choice


def first_model_call(messages: Sequence[Any]) -> bool:
    """Whether no model call answered the turn's user message yet (only then is a tool forced)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return False
        if isinstance(message, HumanMessage):
            return True
    return True


def _context(runtime: Any) -> Any:
    return getattr(runtime, "context", None)


class ClientToolMiddleware(AgentMiddleware[Any, Any, Any]):
    """Offers the turn's client tools to the model (:meth:`prepare_model_request`, run by the
    agent's :class:`~clawlet.engine.model_steps.ModelRequestSteps`) and pauses the run on a call to
    one."""

    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider = provider

    def prepare_model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """``request`` offering the turn's client tools too (a step of
        :class:`~clawlet.engine.model_steps.ModelRequestSteps`)."""
        context = _context(request.runtime)
        tools = getattr(context, "client_tools", ())
        choice = getattr(context, "tool_choice", "auto")
        if not tools or choice == "none":
            return request
        override: dict[str, Any] = {"tools": [*request.tools, *(tool.as_openai() for tool in tools)]}
        if choice != "auto" and first_model_call(request.messages):
            override["tool_choice"] = provider_tool_choice(choice, self.provider)
        return request.override(**override)

    def _pause(self, request: ToolCallRequest) -> ToolMessage | None:
        """The client's result for a client tool call (pausing the run until it comes), or None
        for any other call."""
        call = request.tool_call
        names = {tool.name for tool in getattr(_context(request.runtime), "client_tools", ())}
        if call["name"] not in names:
            return None
        answer = interrupt(
            {
                "type": CLIENT_TOOL_INTERRUPT,
                "tool_call_id": call.get("id") or "",
                "name": call["name"],
                "args": call["args"],
            }
        )
        content = answer.get("content", "") if isinstance(answer, Mapping) else answer
        return ToolMessage(content=str(content), tool_call_id=call.get("id") or "", name=call["name"])

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._pause(request) or handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return self._pause(request) or await handler(request)

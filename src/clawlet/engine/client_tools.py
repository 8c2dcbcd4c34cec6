"""Client-side tools: functions a client offers with its request, run by the client, not by clawlet.

An OpenAI client (``tools`` on ``POST /v1/chat/completions``) can extend the agent with its own
functions. Design:

- **Offered beside clawlet's tools.** A turn's :class:`~clawlet.engine.context.RunContext` carries
  them (:class:`ClientTool`: name, description, JSON schema) and :class:`ClientToolMiddleware` adds
  them to every model call as OpenAI function tools (a name clash with a clawlet tool is the
  caller's 400). ``tool_choice``: ``auto`` (the default) offers them; ``none`` offers none of them;
  ``required`` and a function's name force a tool call on the turn's first model call only (later
  calls are ``auto``, or the agent could never answer); the provider receives it in its own terms
  (:func:`provider_tool_choice`; the demo model ignores it).
- **A call pauses the run.** When the model calls a client tool, the tool node raises a LangGraph
  interrupt for that call (``type: "client_tool"``) instead of running anything, the same pause a
  tool needing approval uses (:mod:`clawlet.engine.approvals`, a checkpointer keeps the graph):
  several client calls in one model message pause together; clawlet tools called beside them run
  first as usual. The run ends with ``RunWaiting`` whose pending items are ``ApprovalRequested``
  with :data:`CLIENT_TOOL_DECISIONS` (``["result"]``): only the client's result answers them.
- **The result resumes the same run.** The decision ``result`` (its ``message`` the client's tool
  output) becomes the call's ``ToolMessage``, recorded in the transcript once, like a clawlet tool.

The OpenAI edge (ids, wire shapes, finding the paused run) is :mod:`clawlet.api.openai.client_tools`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, interrupt

CLIENT_TOOL_INTERRUPT = "client_tool"
"""The ``type`` of the interrupt value a client tool call raises."""

CLIENT_TOOL_DECISIONS = ["result"]
"""The one decision a client tool call takes: its result."""

CLIENT_TOOL_DESCRIPTION = "a tool of the client: the client runs it and sends its result"


@dataclass(frozen=True)
class ClientTool:
    """One function the client offers: ``parameters`` is its JSON schema as JSON text."""

    name: str
    description: str = ""
    parameters: str = '{"type": "object", "properties": {}}'

    def as_openai(self) -> dict[str, Any]:
        """The tool as an OpenAI function tool (what ``bind_tools`` passes to the provider)."""
        function: dict[str, Any] = {"name": self.name, "parameters": json.loads(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


def client_tools_to_json(tools: Sequence[ClientTool]) -> list[dict[str, str]]:
    return [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]


def client_tools_from_json(data: Any) -> tuple[ClientTool, ...]:
    """What :func:`client_tools_to_json` wrote; anything unreadable is left out."""
    if not isinstance(data, list):
        return ()
    return tuple(
        ClientTool(str(item["name"]), str(item.get("description") or ""), str(item.get("parameters") or "{}"))
        for item in data
        if isinstance(item, Mapping) and item.get("name")
    )


def is_client_call(value: Any) -> bool:
    """Whether an interrupt's value is a client tool call's pause."""
    return isinstance(value, Mapping) and value.get("type") == CLIENT_TOOL_INTERRUPT


def first_model_call(messages: Sequence[Any]) -> bool:
    """Whether no model call answered the turn's user message yet (only then is a tool forced)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return False
        if isinstance(message, HumanMessage):
            return True
    return True


def provider_tool_choice(choice: str, provider: str) -> str:
    """``choice`` (``required`` or a function's name) as ``provider``'s ``bind_tools`` takes it:
    Anthropic calls ``required`` ``any``."""
    return "any" if choice == "required" and provider == "anthropic" else choice


def _context(runtime: Any) -> Any:
    return getattr(runtime, "context", None)


class ClientToolMiddleware(AgentMiddleware[Any, Any, Any]):
    """Offers the turn's client tools to the model and pauses the run on a call to one."""

    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider = provider

    def _offered(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        context = _context(request.runtime)
        tools = getattr(context, "client_tools", ())
        choice = getattr(context, "tool_choice", "auto")
        if not tools or choice == "none":
            return request
        override: dict[str, Any] = {"tools": [*request.tools, *(tool.as_openai() for tool in tools)]}
        if choice != "auto" and first_model_call(request.messages):
            override["tool_choice"] = provider_tool_choice(choice, self.provider)
        return request.override(**override)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self._offered(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._offered(request))

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

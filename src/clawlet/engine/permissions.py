"""``ToolPermissionMiddleware``: the per-turn allowed/disallowed tool lists and denied tools.

A tool that is not allowed (not in the turn's allowed list, in its disallowed list, set to ``deny``
by the workspace's approval policy, or set to ``ask`` in a turn that cannot ask) is not offered to
the model at all, and a call to it (a model may still invent one) is refused with an error tool
message saying why, instead of running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from clawlet.engine.context import DEFAULT_CONTEXT, RunContext


def context_of(runtime: Any) -> RunContext:
    context = getattr(runtime, "context", None)
    return context if isinstance(context, RunContext) else DEFAULT_CONTEXT


def _tool_name(tool: BaseTool | dict[str, Any]) -> str:
    return tool.name if isinstance(tool, BaseTool) else str(tool.get("name", ""))


def refusal(request: ToolCallRequest) -> ToolMessage:
    name = request.tool_call["name"]
    return ToolMessage(
        content=context_of(request.runtime).refusal_reason(name),
        tool_call_id=request.tool_call["id"] or "",
        name=name,
        status="error",
    )


class ToolPermissionMiddleware(AgentMiddleware[Any, RunContext, Any]):
    """Refuses a call to a tool the turn may not use. The tools offered to the model are filtered
    by :meth:`prepare_model_request`, a step of :class:`~clawlet.engine.model_steps.ModelRequestSteps`
    (the agent runs it there, beside the other request steps, not as a layer of its own)."""

    def prepare_model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """``request`` offering only the tools the turn may use."""
        context = context_of(request.runtime)
        tools = [tool for tool in request.tools if context.tool_allowed(_tool_name(tool))]
        return request.override(tools=tools) if len(tools) != len(request.tools) else request

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        if not context_of(request.runtime).tool_allowed(request.tool_call["name"]):
            return refusal(request)
        return handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if not context_of(request.runtime).tool_allowed(request.tool_call["name"]):
            return refusal(request)
        return await handler(request)

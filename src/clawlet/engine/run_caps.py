"""``RunCaps``: a run makes at most so many model calls and tool calls, without graph nodes of its own.

LangChain's ``ModelCallLimitMiddleware`` and ``ToolCallLimitMiddleware`` keep these caps with
``before_model`` and ``after_model`` hooks: three more graph nodes, so three more LangGraph
supersteps around every model call (one of them before the first token; together about a
millisecond and a half of CPU per plain turn). ``RunCaps`` keeps both around the model call
itself (``wrap_model_call``), with the same rules and words:

- the run's model calls and tool calls are counted in the agent's state as LangChain counts them
  (private, not checkpointed: a run continued after a pause counts afresh, as before), raised by a
  state update returned with each answer;
- once the model calls reached their cap the model is not called: the call's answer is a notice
  to the user, which ends the run (it calls no tool);
- an answer's tool calls past the tool-call cap are answered at once with LangChain's error tool
  message (``Tool call limit exceeded. Do not make additional tool calls.``) and do not run; the
  others run, and the model is called again with all their results (LangChain's ``continue``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse, PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.types import Command

MODEL_CALLS = "clawlet_run_model_calls"
TOOL_CALLS = "clawlet_run_tool_calls"
NOTICE = "clawlet_notice"
"""The ``response_metadata`` key of an answer no model streamed (the engine relays its text)."""
TOOL_CAP_TEXT = "Tool call limit exceeded. Do not make additional tool calls."
"""What a tool call past the cap answers (LangChain's words, for the model)."""


class RunCapsState(AgentState[Any]):
    """The agent state with the run's model and tool calls so far (private, not checkpointed)."""

    clawlet_run_model_calls: NotRequired[Annotated[int, UntrackedValue, PrivateStateAttr]]
    clawlet_run_tool_calls: NotRequired[Annotated[int, UntrackedValue, PrivateStateAttr]]


def count_in(request: ModelRequest[Any], key: str) -> int:
    """A run's count kept in the agent's state (0 before the first)."""
    value = request.state.get(key)
    return value if isinstance(value, int) else 0


def cap_notice(limit: int) -> AIMessage:
    """What the user reads when a turn reached the model-call cap, and what to do about it."""
    return AIMessage(
        f"⚠️ Stopped: this turn reached its limit of {limit} model calls (CLAWLET_MAX_MODEL_CALLS). "
        "Ask me to continue, or raise the limit.",
        response_metadata={NOTICE: True},
    )


def is_notice(message: AIMessage) -> bool:
    """Whether ``message`` is a middleware's answer in the model's place (never streamed)."""
    return bool(message.response_metadata.get(NOTICE))


class RunCaps(AgentMiddleware[RunCapsState, Any, Any]):
    """At most ``model_calls`` model calls and ``tool_calls`` tool calls per run (see the module
    docstring)."""

    state_schema = RunCapsState

    def __init__(self, *, model_calls: int, tool_calls: int) -> None:
        super().__init__()
        if model_calls < 1 or tool_calls < 1:
            raise ValueError("the model-call and tool-call caps must be at least 1")
        self.model_calls = model_calls
        self.tool_calls = tool_calls

    def _made(self, request: ModelRequest[Any]) -> int | None:
        """The run's model calls so far, or None once the cap is reached."""
        made = count_in(request, MODEL_CALLS)
        return None if made >= self.model_calls else made

    def _counted(
        self, request: ModelRequest[Any], response: ModelResponse[Any], made: int
    ) -> ExtendedModelResponse[Any]:
        """The answer with the counts raised and its tool calls past the cap refused."""
        update: dict[str, Any] = {MODEL_CALLS: made + 1}
        answer = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
        if answer is not None and answer.tool_calls:
            ran = count_in(request, TOOL_CALLS)
            allowed = max(0, min(len(answer.tool_calls), self.tool_calls - ran))
            refused = answer.tool_calls[allowed:]
            update[TOOL_CALLS] = ran + len(answer.tool_calls)
            if refused:
                update["messages"] = [
                    ToolMessage(TOOL_CAP_TEXT, tool_call_id=call["id"], name=call.get("name"), status="error")
                    for call in refused
                ]
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        made = self._made(request)
        if made is None:
            return cap_notice(self.model_calls)
        return self._counted(request, handler(request), made)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        made = self._made(request)
        if made is None:
            return cap_notice(self.model_calls)
        return self._counted(request, await handler(request), made)

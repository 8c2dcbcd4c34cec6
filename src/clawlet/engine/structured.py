"""``ResponseFormatMiddleware``: a turn's final answer honours the client's ``response_format``
(:class:`~clawlet.llm.response_format.ResponseFormat`, from its
:class:`~clawlet.engine.context.RunContext`).

Tools may run first, so the format cannot be forced on a call that offers tools (constrained
decoding, as vLLM or Ollama do it, would leave the model no way to call one): such calls only
get the format in the system prompt. A call that offers no tools asks the provider for the format
natively. A final answer (no tool calls) that is not valid gets one corrective call (no tools,
the format asked for natively, the reason said to the model); if that one is not valid either the
run fails with :class:`StructuredOutputError`. A valid answer is returned as its bare JSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from clawlet.engine.context import RunContext
from clawlet.engine.permissions import context_of
from clawlet.llm.response_format import FORMATS_WITH_TOOLS, ResponseFormat


class StructuredOutputError(RuntimeError):
    """The model's final answer did not honour ``response_format``, even after a corrective call."""


def correction(reason: str, response_format: ResponseFormat) -> str:
    return (
        f"Your last answer cannot be used: {reason}. Reply again with only the final answer as JSON, "
        f"no other text. {response_format.instruction()}"
    )


class ResponseFormatMiddleware(AgentMiddleware[Any, RunContext, Any]):
    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider = provider

    def _prepared(self, request: ModelRequest[Any], wanted: ResponseFormat) -> ModelRequest[Any]:
        """The system prompt tells the model the format; a call without tools asks for it natively."""
        prompt = request.system_message.text if request.system_message is not None else ""
        request = request.override(
            system_message=SystemMessage(f"{prompt}\n\n{wanted.instruction()}".strip())
        )
        if request.tools and self.provider not in FORMATS_WITH_TOOLS:
            return request
        return request.override(
            model_settings={**request.model_settings, **wanted.for_provider(self.provider)}
        )

    def _correction(
        self, request: ModelRequest[Any], wanted: ResponseFormat, answer: AIMessage, reason: str
    ) -> ModelRequest[Any]:
        """The corrective call: the invalid answer, why it is not valid, no tools."""
        messages = [*request.messages, answer, HumanMessage(correction(reason, wanted))]
        return self._prepared(request.override(messages=messages, tools=[], tool_choice=None), wanted)

    def _final(
        self, response: ModelResponse[Any], wanted: ResponseFormat
    ) -> tuple[ModelResponse[Any], AIMessage | None, str]:
        """``(response, answer, reason)``: ``answer`` is the final answer when it is not valid
        (``None`` when the model calls tools or answered validly) and ``reason`` why not; a valid
        answer is replaced by its bare JSON."""
        answer = next((item for item in response.result if isinstance(item, AIMessage)), None)
        if answer is None:
            return response, AIMessage(""), "it gave no answer"
        if answer.tool_calls:
            return response, None, ""
        valid, reason = wanted.check(answer.text)
        if reason:
            return response, answer, reason
        result = [
            answer.model_copy(update={"content": valid}) if item is answer else item
            for item in response.result
        ]
        return ModelResponse(result=result, structured_response=response.structured_response), None, ""

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        wanted = context_of(request.runtime).response_format
        if wanted is None:
            return handler(request)
        response, answer, reason = self._final(handler(self._prepared(request, wanted)), wanted)
        if answer is None:
            return response
        return self._checked(handler(self._correction(request, wanted, answer, reason)), wanted)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        wanted = context_of(request.runtime).response_format
        if wanted is None:
            return await handler(request)
        response, answer, reason = self._final(await handler(self._prepared(request, wanted)), wanted)
        if answer is None:
            return response
        return self._checked(await handler(self._correction(request, wanted, answer, reason)), wanted)

    def _checked(self, response: ModelResponse[Any], wanted: ResponseFormat) -> ModelResponse[Any]:
        """The corrective call's response, or :class:`StructuredOutputError` if it is not valid."""
        checked, answer, reason = self._final(response, wanted)
        if answer is None and any(
            isinstance(item, AIMessage) and item.tool_calls for item in response.result
        ):
            answer, reason = AIMessage(""), "it called a tool instead of answering"
        if answer is not None:
            kind = wanted.kind if wanted.kind == "json_object" else f"json_schema {wanted.name!r}"
            raise StructuredOutputError(
                f"the model's final answer does not honour response_format {kind} "
                f"after a corrective retry: {reason}"
            )
        return checked

"""``ModelRequestSteps``: the steps that prepare a turn's model request, run in one middleware layer.

``create_agent`` nests every middleware's ``awrap_model_call`` around the model call, each behind
its own LangSmith ``traceable`` wrapper and LangChain handler closure, all held for as long as the
model streams. The steps that only change the request on its way in (the workspace's system
prompt, the tools a turn may use, its sampling options, the client's tools: nothing to do with
the answer) run here one after the other, in the order given, behind one layer instead of one
each: a turn in flight holds three fewer nested wraps (about 10 KB each turn with 200 turns at
once, bench/README.md "startup.py"), and each model call makes three fewer hops.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse


class ModelRequestStep(Protocol):
    def prepare_model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """``request`` as this step wants it sent (the same object when it changes nothing)."""
        ...


class ModelRequestSteps(AgentMiddleware[Any, Any, Any]):
    """Applies ``steps`` in order to every model request, then calls the model (or the next
    middleware)."""

    def __init__(self, *steps: ModelRequestStep) -> None:
        super().__init__()
        self.steps = steps

    def prepare(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        for step in self.steps:
            request = step.prepare_model_request(request)
        return request

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self.prepare(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self.prepare(request))

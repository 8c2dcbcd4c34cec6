"""``SamplingMiddleware``: a turn's sampling options (:class:`~clawlet.llm.sampling.Sampling`, from
its :class:`~clawlet.engine.context.RunContext`) applied to each of its model calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse

from clawlet.engine.context import RunContext
from clawlet.engine.permissions import context_of


class SamplingMiddleware(AgentMiddleware[Any, RunContext, Any]):
    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider = provider

    def _sampled(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        options = context_of(request.runtime).sampling.for_provider(self.provider)
        if not options:
            return request
        return request.override(model_settings={**request.model_settings, **options})

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self._sampled(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._sampled(request))

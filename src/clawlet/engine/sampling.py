"""``SamplingStep``: a turn's sampling options (:class:`~clawlet.llm.sampling.Sampling`, from its
:class:`~clawlet.engine.context.RunContext`) applied to each of its model calls (a step of
:class:`~clawlet.engine.model_steps.ModelRequestSteps`)."""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import ModelRequest

from clawlet.engine.permissions import context_of


class SamplingStep:
    def __init__(self, provider: str) -> None:
        self.provider = provider

    def prepare_model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        options = context_of(request.runtime).sampling.for_provider(self.provider)
        if not options:
            return request
        return request.override(model_settings={**request.model_settings, **options})

"""Build the chat model for the configured provider through ``init_chat_model``.

One OpenAI-compatible adapter serves every OpenAI-compatible vendor (OpenAI, vLLM, Ollama,
llama.cpp, LM Studio...); DeepSeek and Anthropic use their native LangChain integrations (the
OpenAI-compatible and DeepSeek ones relay streamed chunks as plain dicts:
:mod:`clawlet.llm.openai_stream`). With no provider configured the built-in offline ``demo``
model is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from clawlet.config import Settings, is_loopback
from clawlet.llm.demo_names import DEMO_MODEL_LABEL, DEMO_MODEL_NAME

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class ProviderConfigError(ValueError):
    """The provider settings are incomplete (e.g. an OpenAI-compatible endpoint without a model)."""


@dataclass(frozen=True)
class ModelInfo:
    provider: str
    name: str
    label: str

    @property
    def is_demo(self) -> bool:
        return self.provider == "demo"


def describe_model(settings: Settings) -> ModelInfo:
    provider = settings.resolved_provider
    if provider == "demo":
        return ModelInfo("demo", DEMO_MODEL_NAME, DEMO_MODEL_LABEL)
    if provider == "deepseek":
        name = settings.llm_model or settings.deepseek_model
    elif provider == "anthropic":
        name = settings.llm_model or settings.anthropic_model
    else:
        if not settings.llm_model:
            raise ProviderConfigError("provider 'openai' needs CLAWLET_LLM_MODEL")
        name = settings.llm_model
    return ModelInfo(provider, name, f"{name} ({provider})")


SDK_ENDPOINTS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
"""Where a provider's SDK sends requests when no base URL is configured."""


def configured_endpoint(settings: Settings, provider: str) -> str | None:
    """The base URL configured for ``provider`` (``None``: its SDK's default)."""
    if provider == "deepseek":
        return settings.llm_base_url or settings.deepseek_base_url
    if provider == "anthropic":
        return settings.llm_base_url
    return settings.llm_base_url or settings.openai_base_url


def check_endpoint(settings: Settings, provider: str) -> None:
    """With ``loopback_models_only`` (the test suite's switch), refuse an endpoint that is not on
    loopback: no test may send a request to a real provider."""
    if not settings.loopback_models_only:
        return
    url = configured_endpoint(settings, provider) or SDK_ENDPOINTS.get(provider, "")
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    if not is_loopback(host):
        raise ProviderConfigError(
            f"refusing to build the {provider!r} chat model for {url!r}: CLAWLET_LOOPBACK_MODELS_ONLY "
            "allows only loopback endpoints (in tests: an in-process model, "
            "clawlet.testing.function_model, or the scripted server, clawlet.testing.scripted_openai)"
        )


def build_chat_model(
    settings: Settings, *, temperature: float | None = None, demo_token_delay: float = 0.0
) -> BaseChatModel:
    """A fresh chat model for one run (or one title/summary request)."""
    from langchain.chat_models import init_chat_model  # not when the server starts (see clawlet.cli)
    from langchain_core.language_models import BaseChatModel

    from clawlet.llm.demo import DemoChatModel
    from clawlet.llm.openai_stream import PlainChunkChatDeepSeek, PlainChunkChatOpenAI

    info = describe_model(settings)
    temp = settings.temperature if temperature is None else temperature
    if info.provider == "demo":
        return DemoChatModel(token_delay=demo_token_delay)
    check_endpoint(settings, info.provider)
    endpoint = configured_endpoint(settings, info.provider)
    if info.provider == "deepseek":
        return PlainChunkChatDeepSeek(
            model_name=info.name,
            api_key=settings.llm_api_key or settings.deepseek_api_key,
            api_base=endpoint,
            temperature=temp,
            streaming=True,
            stream_usage=True,
            max_retries=1,
        )
    if info.provider == "anthropic":
        model = init_chat_model(
            info.name,
            model_provider="anthropic",
            api_key=settings.llm_api_key or settings.anthropic_api_key,
            base_url=endpoint,
            temperature=temp,
            streaming=True,
            max_retries=1,
        )
        assert isinstance(model, BaseChatModel)
        return model
    return PlainChunkChatOpenAI(
        model_name=info.name,
        base_url=endpoint,
        api_key=settings.llm_api_key or settings.openai_api_key or "not-needed",
        temperature=temp,
        streaming=True,
        stream_usage=True,
        max_retries=1,
    )

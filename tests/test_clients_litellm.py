"""LiteLLM (``litellm.completion`` with the ``openai/`` prefix) against clawlet's ``/v1`` on
loopback, with the offline demo model: client-side tools round trip (the call, then the result
continuing the run), ``response_format`` with a Pydantic model, and ``n > 1`` refused the OpenAI
way. README's LiteLLM snippet covers plain and streamed chat (tests/test_readme_clients.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import LiveServer

# LiteLLM fetches its model price list from the internet at import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")
# LiteLLM's own pydantic types warn about TypedDict ReadOnly items when first built
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"),
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class City(BaseModel):
    name: str
    country: str


def base(server: LiveServer) -> dict[str, Any]:
    return {"model": "openai/clawlet", "api_base": f"{server.url}/v1", "api_key": "unused", "num_retries": 0}


def test_litellm_client_tools_round_trip(server: LiveServer) -> None:
    ask = [{"role": "user", "content": 'call: get_weather {"city": "Paris"}'}]
    first = litellm.completion(messages=ask, tools=[WEATHER], **base(server))
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    result = {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21°C"}
    second = litellm.completion(
        messages=[*ask, choice.message.model_dump(), result], tools=[WEATHER], **base(server)
    )
    assert second.choices[0].finish_reason == "stop"
    assert "Sunny, 21°C" in second.choices[0].message.content


def test_litellm_response_format_and_refusals(server: LiveServer) -> None:
    answer = litellm.completion(
        messages=[{"role": "user", "content": "Name a city."}], response_format=City, **base(server)
    )
    city = City.model_validate_json(answer.choices[0].message.content)
    assert city.name and city.country
    with pytest.raises(litellm.BadRequestError, match="n > 1 is not supported"):
        litellm.completion(messages=[{"role": "user", "content": "hi"}], n=2, **base(server))

"""Client-side ``tools`` / ``tool_choice`` on ``/v1/chat/completions``, driven by real clients
(openai-python, LangChain's ``bind_tools``, the npm ``openai`` and the AI SDK) against a real
server whose model is the scripted upstream: a call to a client tool ends the answer with
``finish_reason: "tool_calls"``, and the client's ``role: "tool"`` results continue the same run
(:mod:`clawlet.api.openai.client_tools`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from tests.conftest import LiveServer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def scripted_server(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k"))


def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [message for message in request["messages"] if message["role"] == "tool"]


def test_openai_python_round_trip(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("get_weather", {"city": "Paris"}), text="Let me check."),
                text_turn("It is sunny in Paris."),
            ]
        )
        server = scripted_server(live_server, llm)
        client = sdk(server)
        first = client.chat.completions.create(model="clawlet", messages=ASK, tools=[WEATHER])  # type: ignore[arg-type,list-item]
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me check."
        [call] = choice.message.tool_calls or []
        assert call.type == "function" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        assert "get_weather" in offered(llm.requests[0]) and "read_file" in offered(llm.requests[0])

        second = client.chat.completions.create(
            model="clawlet",
            messages=[
                *ASK,
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24°C"},
            ],  # type: ignore[list-item]
            tools=[WEATHER],  # type: ignore[list-item]
        )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "It is sunny in Paris."
        assert len(llm.requests) == 2
        [result] = tool_messages(llm.requests[1])
        assert result["content"] == "sunny, 24°C"

"""Function tools and structured output on ``/v1/responses``, driven by real clients (openai-python,
the AI SDK's default provider, LangChain's ``use_responses_api``) against a real server whose model
is the scripted upstream: a call to a client tool ends the response (``completed``) with
``function_call`` items, and ``function_call_output`` items continue the same run, whether the
client sends ``previous_response_id``, resends the items or references them; ``text.format`` shapes
the final answer. Streamed events are strictly validated as the SDK's own types."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai.types.responses import Response
from pydantic import BaseModel

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from tests.conftest import LiveServer, free_port
from tests.support.node_clients import run_node_client
from tests.test_openai_client_tools import offered, stored_calls, tool_messages
from tests.test_openai_responses import raw_stream, scripted_server, sdk, squeeze

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
ASK = "What is the weather in Paris?"
FUNCTION_CALL_EVENTS = [
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
]


@pytest.mark.slow
def test_openai_python_round_trip_with_previous_response_id(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("get_weather", {"city": "Paris"}), text="Let me check."),
                text_turn("It is sunny in Paris."),
            ]
        )
        server = scripted_server(live_server, llm)
        client = sdk(server)
        first = client.responses.create(model="clawlet", input=ASK, tools=[WEATHER])  # type: ignore[list-item]
        assert first.status == "completed" and first.output_text == "Let me check."
        message, call = first.output
        assert message.type == "message" and call.type == "function_call"
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        assert call.status == "completed" and call.call_id.startswith("call_") and call.id
        assert first.tools[0].name == "get_weather" and first.tool_choice == "auto"
        assert "get_weather" in offered(llm.requests[0]) and "read_file" in offered(llm.requests[0])
        stored = httpx.get(f"{server.url}/v1/responses/{first.id}", timeout=60).json()
        assert Response.model_validate(stored, strict=True).output[1].type == "function_call"

        second = client.responses.create(
            model="clawlet",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24°C"}],
            tools=[WEATHER],  # type: ignore[list-item]
        )
        assert second.status == "completed" and second.output_text == "It is sunny in Paris."
        assert len(llm.requests) == 2
        [result] = tool_messages(llm.requests[1])
        assert result["content"] == "sunny, 24°C"
        session_id = (first.model_extra or {})["session_id"]
        assert (second.model_extra or {})["session_id"] == session_id  # the same run, continued
        [kept] = stored_calls(server.settings, session_id)  # the call and its result, once
        assert kept["tool"] == "get_weather" and kept["output"] == "sunny, 24°C"


@pytest.mark.slow
def test_streamed_calls_continue_from_resent_or_referenced_items(
    live_server: Callable[..., LiveServer],
) -> None:
    """Streamed, each call is a ``function_call`` item's events; the client then resends the
    output items (no ``previous_response_id``, no session header) or references them: the call
    ids find the paused run."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(
                    ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Oslo"})
                ),
                text_turn("Sunny and snowy."),
                tool_turn(ToolCall("get_weather", {"city": "Rome"})),
                text_turn("Warm."),
            ]
        )
        server = scripted_server(live_server, llm)
        body = {"model": "clawlet", "input": ASK, "tools": [WEATHER], "tool_choice": "required"}
        _, events = raw_stream(server, body)
        assert squeeze([event.type for event in events]) == [
            "response.created",
            "response.in_progress",
            *FUNCTION_CALL_EVENTS,
            *FUNCTION_CALL_EVENTS,
            "response.completed",
        ]
        final = events[-1].response
        assert final.status == "completed" and final.tool_choice == "required"
        calls = [item for item in final.output if item.type == "function_call"]
        assert [json.loads(call.arguments)["city"] for call in calls] == ["Paris", "Oslo"]
        done = [event for event in events if event.type == "response.function_call_arguments.done"]
        assert [event.arguments for event in done] == [call.arguments for call in calls]
        assert llm.requests[0]["tool_choice"] == "required"

        client = sdk(server)
        resent = [
            {"role": "user", "content": ASK},
            *(call.model_dump(exclude_none=True) for call in calls),
            *(
                {"type": "function_call_output", "call_id": c.call_id, "output": f"fine in {c.call_id}"}
                for c in calls
            ),
        ]
        with client.responses.stream(model="clawlet", input=resent) as stream:  # type: ignore[arg-type]
            assert stream.get_final_response().output_text == "Sunny and snowy."
        assert [m["content"] for m in tool_messages(llm.requests[1])] == [
            f"fine in {c.call_id}" for c in calls
        ]

        third = client.responses.create(model="clawlet", input="And Rome?", tools=[WEATHER])  # type: ignore[list-item]
        [call] = third.output
        assert call.type == "function_call"
        referenced = [
            {"type": "item_reference", "id": call.id},
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": [{"type": "input_text", "text": "hot"}],
            },
        ]
        fourth = client.responses.create(model="clawlet", input=referenced)  # type: ignore[arg-type]
        assert fourth.output_text == "Warm." and tool_messages(llm.requests[3])[-1]["content"] == "hot"

        again = httpx.post(
            f"{server.url}/v1/responses", json={"model": "clawlet", "input": referenced}, timeout=60
        )
        assert again.status_code == 400 and again.json()["error"]["param"] == "input"
        assert call.call_id in again.json()["error"]["message"]  # the run waits for it no more


def test_tool_choice_function_and_none_reach_the_model(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("get_weather", {"city": "Paris"})), text_turn("No tools.")])
        client = sdk(scripted_server(live_server, llm))
        forced = client.responses.create(
            model="clawlet",
            input=ASK,
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "function", "name": "get_weather"},
        )
        assert forced.output[0].type == "function_call"
        assert llm.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
        unforced = client.responses.create(model="clawlet", input="hi", tools=[WEATHER], tool_choice="none")  # type: ignore[list-item]
        assert unforced.output_text == "No tools." and "get_weather" not in offered(llm.requests[1])


def test_openai_python_parse_gives_structured_output(live_server: Callable[..., LiveServer]) -> None:
    class Weather(BaseModel):
        city: str
        sunny: bool

    with ScriptedOpenAIServer() as llm:
        llm.set_script([text_turn("Not JSON."), text_turn('{"city": "Paris", "sunny": true}')])
        client = sdk(scripted_server(live_server, llm))
        parsed = client.responses.parse(model="clawlet", input=ASK, text_format=Weather)
        assert parsed.output_parsed == Weather(city="Paris", sunny=True)
        assert parsed.text.format.type == "json_schema"  # type: ignore[union-attr]
        native = llm.requests[1]["response_format"]  # the corrective call asks for it natively
        assert native["type"] == "json_schema" and native["json_schema"]["name"] == "Weather"


@pytest.mark.slow
def test_the_ai_sdk_default_provider_runs_tools_and_output_object(
    live_server: Callable[..., LiveServer], server: LiveServer
) -> None:
    tools_script = """
import { generateText, streamText, tool, jsonSchema, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" })("clawlet");
const seen = [];
const tools = {
  get_weather: tool({
    description: "The weather in a city.",
    inputSchema: jsonSchema({
      type: "object", properties: { city: { type: "string" } }, required: ["city"],
    }),
    execute: async ({ city }) => { seen.push(city); return `sunny in ${city}`; },
  }),
};
const options = { model, prompt: "What is the weather?", maxRetries: 0, stopWhen: stepCountIs(3), tools };
const result = await generateText(options);
const stream = streamText(options);
let streamed = "";
for await (const part of stream.textStream) streamed += part;
console.log(JSON.stringify({
  text: result.text, steps: result.steps.length, seen, finish: result.finishReason,
  firstFinish: result.steps[0].finishReason, streamed, streamSteps: (await stream.steps).length,
}));
"""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("get_weather", {"city": "Paris"}), text="Checking."),
                text_turn("Sunny, says Node."),
                tool_turn(ToolCall("get_weather", {"city": "Oslo"})),
                text_turn("Streamed sun."),
            ]
        )
        scripted = scripted_server(live_server, llm)
        result = run_node_client(tools_script, env={"BASE_URL": f"{scripted.url}/v1"})
        assert result == {
            "text": "Sunny, says Node.",
            "steps": 2,
            "seen": ["Paris", "Oslo"],
            "finish": "stop",
            "firstFinish": "tool-calls",
            "streamed": "Streamed sun.",
            "streamSteps": 2,
        }
        assert tool_messages(llm.requests[1])[0]["content"] == "sunny in Paris"
        assert tool_messages(llm.requests[3])[-1]["content"] == "sunny in Oslo"

    output_script = """
import { generateText, Output, jsonSchema } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" })("clawlet");
const schema = jsonSchema({
  type: "object",
  properties: { city: { type: "string" }, rank: { type: "integer" } },
  required: ["city", "rank"],
  additionalProperties: false,
});
const output = Output.object({ schema });
const whole = await generateText({ model, prompt: "a city", output, maxRetries: 0 });
console.log(JSON.stringify({ output: whole.output }));
"""
    result = run_node_client(output_script, env={"BASE_URL": f"{server.url}/v1"})  # the demo model
    assert set(result["output"]) == {"city", "rank"} and isinstance(result["output"]["rank"], int), result


@pytest.mark.slow
def test_langchain_bind_tools_round_trip_on_the_responses_api(live_server: Callable[..., LiveServer]) -> None:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("get_weather", {"city": "Paris"})),
                text_turn("Paris is sunny."),
                tool_turn(ToolCall("get_weather", {"city": "Oslo"})),
                text_turn("Oslo is sunny too."),
            ]
        )
        server = scripted_server(live_server, llm)
        for use_previous_response_id in (False, True):
            model = ChatOpenAI(
                base_url=f"{server.url}/v1",
                api_key="x",  # type: ignore[arg-type]
                model="clawlet",
                use_responses_api=True,
                use_previous_response_id=use_previous_response_id,
                max_retries=0,
            )
            bound = model.bind_tools([get_weather])
            question = HumanMessage(ASK)
            reply = bound.invoke([question])
            [call] = reply.tool_calls
            assert call["name"] == "get_weather"
            result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
            final = bound.invoke([question, reply, result])
            assert final.text.startswith(call["args"]["city"]) and not final.tool_calls
            assert tool_messages(llm.requests[-1])[0]["content"] == f"sunny in {call['args']['city']}"


@pytest.mark.slow
def test_bad_function_call_output_is_a_clear_400(live_server: Callable[..., LiveServer]) -> None:
    """Results for only one of two calls, or for a call the run does not wait for: 400s naming them."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [tool_turn(ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Oslo"}))]
        )
        server = scripted_server(live_server, llm)
        first = sdk(server).responses.create(model="clawlet", input=ASK, tools=[WEATHER])  # type: ignore[list-item]
        one, two = (item.call_id for item in first.output if item.type == "function_call")

        def send(results: list[dict[str, Any]]) -> httpx.Response:
            body = {"model": "clawlet", "previous_response_id": first.id, "input": results}
            return httpx.post(f"{server.url}/v1/responses", json=body, timeout=60)

        partial = send([{"type": "function_call_output", "call_id": one, "output": "x"}])
        assert partial.status_code == 400 and two in partial.json()["error"]["message"]
        assert partial.json()["error"]["param"] == "input"
        stray = send([{"type": "function_call_output", "call_id": "call_nope", "output": "x"}])
        assert stray.status_code == 400 and "call_nope" in stray.json()["error"]["message"]
        bad = send([{"type": "function_call_output", "call_id": one, "output": {"x": 1}}])
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"


@pytest.mark.slow
def test_function_tools_in_cluster_mode(tmp_path: Path) -> None:
    """Through the control plane to the user's execution plane, with the offline demo model:
    streamed with the real SDK, then continued by ``previous_response_id``."""
    cluster = LocalCluster(tmp_path / "cluster", ["alice"], free_port())
    try:
        cluster.start()
        client = openai.OpenAI(
            base_url=f"{cluster.base_url}/v1", api_key=cluster.tokens["alice"], max_retries=0
        )
        ask = 'call: get_weather {"city": "Paris"}'
        with client.responses.stream(model="clawlet", input=ask, tools=[WEATHER]) as stream:  # type: ignore[list-item]
            first = stream.get_final_response()
        [call] = [item for item in first.output if item.type == "function_call"]
        assert first.status == "completed" and json.loads(call.arguments) == {"city": "Paris"}
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        final = client.responses.create(model="clawlet", previous_response_id=first.id, input=[result])  # type: ignore[list-item]
        assert final.status == "completed" and "sunny" in final.output_text
    finally:
        cluster.stop()

"""Client-side ``tools`` / ``tool_choice`` on ``/v1/chat/completions``, driven by real clients
(openai-python, LangChain's ``bind_tools``, the npm ``openai`` and the AI SDK) against a real
server whose model is the scripted upstream: a call to a client tool ends the answer with
``finish_reason: "tool_calls"``, and the client's ``role: "tool"`` results continue the same run
(:mod:`clawlet.api.openai.client_tools`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from clawlet.api.openai.client_tools import CALL_KEPT_SECONDS, ClientCallIndex
from clawlet.cluster.local_cluster import LocalCluster
from clawlet.config import Settings
from clawlet.engine.client_tools import provider_tool_choice
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from tests.conftest import LiveServer, free_port
from tests.support.node_clients import run_node_client

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


def stored_calls(settings: Settings, session_id: str) -> list[dict[str, Any]]:
    """Every tool call the session's transcript holds."""
    data = json.loads((settings.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8"))
    return [call for message in data["messages"] for call in message.get("tool_calls", [])]


def post(server: LiveServer, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=60)


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
        session_id = (first.model_extra or {})["session_id"]
        assert (second.model_extra or {})["session_id"] == session_id  # the same run, continued
        [stored] = stored_calls(server.settings, session_id)  # the call and its result, once
        assert stored["tool"] == "get_weather" and stored["output"] == "sunny, 24°C"


def test_openai_python_streams_several_calls_beside_a_clawlet_tool(
    live_server: Callable[..., LiveServer],
) -> None:
    """One model message calls a clawlet tool and two client tools: clawlet's runs, both client
    calls stream back as ``delta.tool_calls``; their results (streamed answer) continue the run."""
    clock = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(
                    ToolCall("read_file", {"path": "workspace/IDENTITY.md"}),
                    ToolCall("get_weather", {"city": "Paris"}),
                    ToolCall("get_time", {}),
                ),
                text_turn("Sunny at noon."),
            ]
        )
        server = scripted_server(live_server, llm)
        client = sdk(server)
        calls: dict[int, dict[str, str]] = {}
        finishes = []
        for chunk in client.chat.completions.create(
            model="clawlet",
            messages=ASK,
            tools=[WEATHER, clock],
            stream=True,  # type: ignore[arg-type,list-item]
        ):
            choice = chunk.choices[0]
            finishes += [choice.finish_reason] if choice.finish_reason else []
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
        assert finishes == ["tool_calls"]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
            ("get_weather", {"city": "Paris"}),
            ("get_time", {}),
        ]
        assert len({c["id"] for c in calls.values()}) == 2
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls.values()
            ],
        }
        results = [
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"},
            {"role": "tool", "tool_call_id": calls[1]["id"], "content": "12:00"},
        ]
        text = ""
        for chunk in client.chat.completions.create(
            model="clawlet",
            messages=[*ASK, assistant, *results],
            tools=[WEATHER, clock],
            stream=True,  # type: ignore[arg-type,list-item]
        ):
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        assert text == "Sunny at noon."
        contents = [message["content"] for message in tool_messages(llm.requests[1])]
        assert len(contents) == 3 and {"sunny", "12:00"} < set(contents)  # and read_file's output


def test_tool_choice_reaches_the_first_model_call(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("get_weather", {"city": "Oslo"})),
                text_turn("Rainy."),
                text_turn("No tools."),
                text_turn("Forced."),
            ]
        )
        server = scripted_server(live_server, llm)
        client = sdk(server)
        forced = {"type": "function", "function": {"name": "get_weather"}}
        first = client.chat.completions.create(
            model="clawlet",
            messages=ASK,
            tools=[WEATHER],
            tool_choice=forced,  # type: ignore[arg-type,list-item]
        )
        assert llm.requests[0]["tool_choice"] == forced
        [call] = first.choices[0].message.tool_calls or []
        result = {"role": "tool", "tool_call_id": call.id, "content": "rain"}
        client.chat.completions.create(
            model="clawlet",
            messages=[*ASK, first.choices[0].message.model_dump(exclude_none=True), result],  # type: ignore[list-item]
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice=forced,  # type: ignore[arg-type]
        )
        assert "tool_choice" not in llm.requests[1]  # forced on the first model call only
        client.chat.completions.create(
            model="clawlet",
            messages=ASK,
            tools=[WEATHER],
            tool_choice="none",  # type: ignore[arg-type,list-item]
        )
        assert "get_weather" not in offered(llm.requests[2])
        client.chat.completions.create(
            model="clawlet",
            messages=ASK,
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice="required",
        )
        assert llm.requests[3]["tool_choice"] == "required"
        assert provider_tool_choice("required", "anthropic") == "any"  # Anthropic's word for it
        assert provider_tool_choice("get_weather", "anthropic") == "get_weather"


def test_bad_tools_and_results_are_clear_400s(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [tool_turn(ToolCall("get_weather", {"city": "A"}), ToolCall("get_weather", {"city": "B"}))]
        )
        server = scripted_server(live_server, llm)
        base = {"model": "clawlet", "messages": ASK}
        clash = {"type": "function", "function": {"name": "read_file"}}
        refused = [
            ({"tools": [clash]}, "tools", "read_file"),
            ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools", "name"),
            ({"tools": [WEATHER, WEATHER]}, "tools", "twice"),
            ({"tools": ["x"]}, "tools", "tools[0]"),
            ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "tool_choice"),
            (
                {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
                "tool_choice",
                "'x'",
            ),
        ]
        for extra, param, words in refused:
            response = post(server, {**base, **extra})
            assert response.status_code == 400, (extra, response.text)
            error = response.json()["error"]
            assert error["param"] == param and words in error["message"], error
        assert not llm.requests

        first = post(server, {**base, "tools": [WEATHER]})
        assert first.status_code == 200
        message = first.json()["choices"][0]["message"]
        one, two = (call["id"] for call in message["tool_calls"])
        session_id = first.headers["x-session-id"]
        answer = [*ASK, message, {"role": "tool", "tool_call_id": one, "content": "sun"}]
        missing = post(server, {**base, "messages": answer})
        assert missing.status_code == 400 and two in missing.json()["error"]["message"]
        assert "missing" in missing.json()["error"]["message"]
        stray = [*answer, {"role": "tool", "tool_call_id": "call_nope", "content": "?"}]
        unknown = post(server, {**base, "messages": stray}, **{"X-Session-ID": session_id})
        assert unknown.status_code == 400 and "call_nope" in unknown.json()["error"]["message"]
        nowhere = post(
            server, {**base, "messages": [*ASK, {"role": "tool", "tool_call_id": "call_x", "content": ""}]}
        )
        assert nowhere.status_code == 400 and "call_x" in nowhere.json()["error"]["message"]
        no_id = post(server, {**base, "messages": [*ASK, {"role": "tool", "content": "x"}]})
        assert no_id.status_code == 400 and "tool_call_id" in no_id.json()["error"]["message"]
        assert len(llm.requests) == 1  # nothing of this reached the model
        assert [call["output"] for call in stored_calls(server.settings, session_id)] == ["", ""]

        llm.set_script([text_turn("Moved on.")])  # a new user message instead: a new turn
        moved = post(
            server,
            {**base, "messages": [{"role": "user", "content": "never mind"}]},
            **{"X-Session-ID": session_id},
        )
        assert moved.status_code == 200 and moved.json()["choices"][0]["message"]["content"] == "Moved on."
        assert all(
            call["output"].startswith("[not run") for call in stored_calls(server.settings, session_id)
        )
        late = post(server, {**base, "messages": answer}, **{"X-Session-ID": session_id})
        assert late.status_code == 400 and one in late.json()["error"]["message"]


def test_langchain_bind_tools_round_trip(live_server: Callable[..., LiveServer]) -> None:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("get_weather", {"city": "Paris"})), text_turn("Paris is sunny.")])
        server = scripted_server(live_server, llm)
        model = ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="clawlet", max_retries=0)
        bound = model.bind_tools([get_weather])
        question = HumanMessage("What is the weather in Paris?")
        reply = bound.invoke([question])
        [call] = reply.tool_calls
        assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}
        assert reply.response_metadata["finish_reason"] == "tool_calls"
        result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
        final = bound.invoke([question, reply, result])
        assert final.text == "Paris is sunny." and not final.tool_calls
        assert tool_messages(llm.requests[1])[0]["content"] == "sunny in Paris"


def test_langchain_structured_output_by_function_calling(live_server: Callable[..., LiveServer]) -> None:
    """``with_structured_output(method="function_calling")`` forces a call to a client tool and
    reads the answer from its arguments."""

    class Weather(BaseModel):
        city: str
        sunny: bool

    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("Weather", {"city": "Paris", "sunny": True}))])
        server = scripted_server(live_server, llm)
        model = ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="clawlet", max_retries=0)
        structured = model.with_structured_output(Weather, method="function_calling")
        assert structured.invoke("Weather in Paris?") == Weather(city="Paris", sunny=True)
        assert llm.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "Weather"}}


@pytest.mark.slow
def test_npm_openai_streams_a_round_trip(live_server: Callable[..., LiveServer]) -> None:
    script = """
import OpenAI from "openai";
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "x", maxRetries: 0 });
const tools = [JSON.parse(process.env.TOOL)];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const runner = client.chat.completions.stream({ model: "clawlet", messages, tools });
const first = await runner.finalChatCompletion();
const message = first.choices[0].message;
const call = message.tool_calls[0];
messages.push(message, { role: "tool", tool_call_id: call.id, content: "sunny" });
let text = "", finish = null;
const again = await client.chat.completions.create({ model: "clawlet", messages, tools, stream: true });
for await (const chunk of again) {
  text += chunk.choices[0]?.delta?.content ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
console.log(JSON.stringify({
  firstFinish: first.choices[0].finish_reason, name: call.function.name, args: call.function.arguments,
  text, finish,
}));
"""
    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("get_weather", {"city": "Paris"})), text_turn("Sunny.")])
        server = scripted_server(live_server, llm)
        result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1", "TOOL": json.dumps(WEATHER)})
        assert result["firstFinish"] == "tool_calls" and result["name"] == "get_weather", result
        assert json.loads(result["args"]) == {"city": "Paris"}
        assert result["text"] == "Sunny." and result["finish"] == "stop"
        assert tool_messages(llm.requests[1])[0]["content"] == "sunny"


@pytest.mark.slow
def test_ai_sdk_tools_execute_in_node(live_server: Callable[..., LiveServer]) -> None:
    script = """
import { generateText, tool, jsonSchema, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const provider = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" });
const seen = [];
const result = await generateText({
  model: provider.chat("clawlet"),
  prompt: "What is the weather in Paris?",
  maxRetries: 0,
  stopWhen: stepCountIs(3),
  tools: {
    get_weather: tool({
      description: "The weather in a city.",
      inputSchema: jsonSchema({
        type: "object", properties: { city: { type: "string" } }, required: ["city"],
      }),
      execute: async ({ city }) => { seen.push(city); return `sunny in ${city}`; },
    }),
  },
});
const steps = result.steps.length;
console.log(JSON.stringify({ text: result.text, steps, seen, finish: result.finishReason }));
"""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [tool_turn(ToolCall("get_weather", {"city": "Paris"})), text_turn("Sunny, says Node.")]
        )
        server = scripted_server(live_server, llm)
        result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
        assert result == {"text": "Sunny, says Node.", "steps": 2, "seen": ["Paris"], "finish": "stop"}
        assert "sunny in Paris" in json.dumps(tool_messages(llm.requests[1])[0]["content"])


def test_the_demo_model_calls_a_client_tool(server: LiveServer) -> None:
    """Offline: ``call: <tool> <JSON>`` makes the demo model call an offered client tool."""
    ask = [{"role": "user", "content": 'call: get_weather {"city": "Paris"}'}]
    first = post(server, {"model": "clawlet", "messages": ask, "tools": [WEATHER]}).json()
    message = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    result = {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}
    body = {"model": "clawlet", "messages": [*ask, message, result], "tools": [WEATHER]}
    settings = server.settings
    index = ClientCallIndex(settings.paths.sessions / "approvals" / "client-calls", settings.paths.root)
    session_id = index.session_of(call["id"])
    assert session_id == first["session_id"]
    index.prune(now=time.time() + CALL_KEPT_SECONDS + 60)  # long unanswered: forgotten
    assert post(server, body).status_code == 400 and index.session_of(call["id"]) is None
    second = post(server, body, **{"X-Session-ID": session_id}).json()  # the header still finds it
    assert second["choices"][0]["finish_reason"] == "stop"
    assert "sunny" in second["choices"][0]["message"]["content"]


@pytest.mark.slow
def test_client_tools_in_cluster_mode(tmp_path: Path) -> None:
    """Through the control plane to the user's execution plane (its session processes pause and
    continue the run), with the offline demo model, streamed with the real SDK."""
    cluster = LocalCluster(tmp_path / "cluster", ["alice"], free_port())
    try:
        cluster.start()
        client = openai.OpenAI(
            base_url=f"{cluster.base_url}/v1", api_key=cluster.tokens["alice"], max_retries=0
        )
        ask = [{"role": "user", "content": 'call: get_weather {"city": "Paris"}'}]
        chunks = list(
            client.chat.completions.create(model="clawlet", messages=ask, tools=[WEATHER], stream=True)
        )  # type: ignore[arg-type,list-item]
        deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
            "tool_calls"
        ]
        call_id = next(d.id for d in deltas if d.id)
        arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
        assert json.loads(arguments) == {"city": "Paris"}
        assistant = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        }
        result = {"role": "tool", "tool_call_id": call_id, "content": "sunny"}
        final = client.chat.completions.create(
            model="clawlet", messages=[*ask, assistant, result], tools=[WEATHER]
        )  # type: ignore[arg-type,list-item]
        assert final.choices[0].finish_reason == "stop" and "sunny" in (
            final.choices[0].message.content or ""
        )
    finally:
        cluster.stop()

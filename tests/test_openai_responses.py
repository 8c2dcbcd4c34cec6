"""``/v1/responses``: the Responses API on a real server, driven by the real ``openai`` SDK (and the
npm ``openai``, the AI SDK and LangChain's ``use_responses_api``), with every streamed event checked
against the SDK's own ``ResponseStreamEvent`` types (strictly validated, not just constructed):
create, stream, retrieve, ``previous_response_id`` continuing the session, ``store: false``,
``instructions``, sampling options on every model call, ``incomplete`` and ``failed`` responses,
reasoning items, and OpenAI-shaped refusals of what is not served yet."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.conftest import LiveServer, parse_sse
from tests.support.node_clients import run_node_client

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TEXT_ITEM_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
]
ITEM_END_EVENTS = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def scripted_server(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(
        Settings(
            provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k", temperature=0.7
        )
    )


def raw_stream(server: LiveServer, body: dict[str, Any]) -> tuple[httpx.Response, list[Any]]:
    """The streamed events of ``body``, each strictly validated as an SDK ``ResponseStreamEvent``,
    with their sequence numbers checked (0, 1, 2...) and their SSE names matching ``type``."""
    with httpx.stream(
        "POST", f"{server.url}/v1/responses", json={**body, "stream": True}, timeout=120
    ) as reply:
        text = reply.read().decode()
    assert reply.status_code == 200, text
    assert reply.headers["content-type"].startswith("text/event-stream")
    frames = parse_sse(text)
    events = [EVENTS.validate_python(data, strict=True) for _, data in frames]
    assert [name for name, _ in frames] == [event.type for event in events]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    return reply, events


def squeeze(types: list[str]) -> list[str]:
    """``types`` with each run of one delta type shown once."""
    return [kind for index, kind in enumerate(types) if index == 0 or kind != types[index - 1]]


def test_the_sdk_creates_streams_and_retrieves_responses(server: LiveServer) -> None:
    client = sdk(server)
    created = client.responses.create(model="clawlet", input="你好，clawlet")
    assert created.status == "completed" and created.object == "response" and created.output_text
    assert created.usage is not None and created.usage.input_tokens > 0 and created.usage.output_tokens > 0
    assert created.usage.total_tokens == created.usage.input_tokens + created.usage.output_tokens
    [message] = created.output
    assert message.type == "message" and message.status == "completed"
    stored = httpx.get(f"{server.url}/v1/responses/{created.id}", timeout=60).json()
    assert Response.model_validate(stored, strict=True).output_text == created.output_text
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.output_text == created.output_text and retrieved.status == "completed"

    reply, events = raw_stream(server, {"model": "clawlet", "input": "hello"})
    types = squeeze([event.type for event in events])
    assert types == [
        "response.created",
        "response.in_progress",
        *TEXT_ITEM_EVENTS,
        *ITEM_END_EVENTS,
        "response.completed",
    ]
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    done = next(event for event in events if event.type == "response.output_text.done")
    final = events[-1].response
    assert deltas and done.text == deltas == final.output_text
    assert final.id == events[0].response.id and final.usage.output_tokens > 0
    assert final.model_dump()["session_id"] == reply.headers["x-session-id"]
    assert client.responses.retrieve(final.id).output_text == deltas

    # a tool runs meanwhile (keep-alive comments go out; the SDK reads past them), never an item
    reply, events = raw_stream(server, {"model": "clawlet", "input": "read workspace/SOUL.md"})
    assert [item.type for item in events[-1].response.output] == ["message"]
    session = reply.headers["x-session-id"]
    history = httpx.get(f"{server.url}/api/sessions/{session}/history", timeout=60).json()
    assert any(m.get("tool_calls") for m in history["messages"])  # the tool did run
    typed = list(client.responses.create(model="clawlet", input="read workspace/SOUL.md", stream=True))
    assert [event.type for event in typed][-1] == "response.completed"
    assert typed[-1].response.output_text == events[-1].response.output_text != ""
    with client.responses.stream(model="clawlet", input="hello") as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        assert stream.get_final_response().output_text == text != ""


def test_previous_response_id_continues_the_session_with_instructions_and_sampling(
    live_server: Callable[..., LiveServer],
) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"}), text="Reading."),
                text_turn("Bonjour."),
                text_turn("Encore."),
            ]
        )
        client = sdk(scripted_server(live_server, llm))
        first = client.responses.create(
            model="clawlet",
            instructions="Answer in French.",
            input=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "input_text", "text": "read your identity"}]},
            ],
            max_output_tokens=50,
            temperature=0,
            top_p=0.5,
        )
        assert first.output_text == "Reading.\n\nBonjour."  # segments joined as on every surface
        assert first.instructions == "Answer in French." and first.max_output_tokens == 50
        assert len(llm.requests) == 2
        for sent in llm.requests:
            assert sent["temperature"] == 0 and sent["top_p"] == 0.5 and sent["max_completion_tokens"] == 50
            system = sent["messages"][0]
            assert system["role"] == "system" and "Answer in French." in system["content"]
            assert "Be brief." in system["content"]

        second = client.responses.create(model="clawlet", input="and again?", previous_response_id=first.id)
        assert second.output_text == "Encore." and second.previous_response_id == first.id
        assert second.model_dump()["session_id"] == first.model_dump()["session_id"]
        sent = llm.requests[2]
        said = [m.get("content") for m in sent["messages"]]
        assert "read your identity" in said and "and again?" in said
        assert any("Bonjour." in str(content) for content in said)  # the earlier answer, from the session
        assert "Answer in French." not in sent["messages"][0]["content"]  # not carried over
        assert sent["temperature"] == 0.7 and "max_completion_tokens" not in sent  # the defaults again


def test_store_false_keeps_nothing_delete_forgets_and_unknown_ids_are_404s(server: LiveServer) -> None:
    client = sdk(server)
    kept = client.responses.create(model="clawlet", input="hi", store=False)
    assert kept.status == "completed" and kept.store is False
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(kept.id)
    assert kept.id in missing.value.message
    with pytest.raises(openai.NotFoundError) as previous:
        client.responses.create(model="clawlet", input="hi", previous_response_id=kept.id)
    assert previous.value.code == "previous_response_not_found"
    assert previous.value.param == "previous_response_id"
    for unknown in ("resp_" + "0" * 32, "..%2F..%2Fconfig.json", "resp_x"):
        for method in ("GET", "DELETE"):
            response = httpx.request(method, f"{server.url}/v1/responses/{unknown}", timeout=60)
            assert response.status_code == 404, (method, unknown)
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}

    stored = client.responses.create(model="clawlet", input="hi")
    client.responses.delete(stored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(stored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(stored.id)


@pytest.mark.slow
def test_a_capped_answer_is_incomplete_and_a_failed_run_is_failed(
    live_server: Callable[..., LiveServer],
) -> None:
    with ScriptedOpenAIServer() as llm:
        cut = Turn(text="One two three", finish="length")
        llm.set_script([cut, cut])
        server = scripted_server(live_server, llm)
        client = sdk(server)
        capped = client.responses.create(model="clawlet", input="count", max_output_tokens=3)
        assert capped.status == "incomplete" and capped.incomplete_details is not None
        assert capped.incomplete_details.reason == "max_output_tokens"
        assert capped.output_text == "One two three" and capped.output[0].status == "incomplete"
        _, events = raw_stream(server, {"model": "clawlet", "input": "count", "max_output_tokens": 3})
        assert events[-1].type == "response.incomplete" and events[-1].response.output_text == "One two three"
        assert llm.requests[-1]["max_completion_tokens"] == 3

        # the model fails after a tool ran: the text so far, then response.failed with the error
        llm.set_script([tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"}), text="Reading.")])
        _, events = raw_stream(server, {"model": "clawlet", "input": "read your identity"})
        failed = events[-1]
        assert failed.type == "response.failed" and failed.response.status == "failed"
        assert (
            failed.response.error.code == "server_error"
            and "script exhausted" in failed.response.error.message
        )
        assert failed.response.output_text == "Reading."
        assert client.responses.retrieve(failed.response.id).status == "failed"

        llm.set_script([tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"}), text="Reading.")])
        with pytest.raises(openai.InternalServerError) as error:
            client.responses.create(model="clawlet", input="read your identity")
        assert error.value.code == "agent_run_failed"
        assert error.value.response.headers["x-should-retry"] == "false"


def test_model_reasoning_is_a_reasoning_item(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        turn = Turn(text="答案是 4。", reasoning="先算 2+2，等于 4。")
        llm.set_script([turn, turn])
        server = live_server(
            Settings(
                provider="deepseek", deepseek_api_key="k", deepseek_base_url=llm.base_url, deepseek_model="r1"
            )
        )
        _, events = raw_stream(server, {"model": "clawlet", "input": "2+2?"})
        assert squeeze([event.type for event in events]) == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            *TEXT_ITEM_EVENTS,
            *ITEM_END_EVENTS,
            "response.completed",
        ]
        reasoning, message = events[-1].response.output
        assert reasoning.type == "reasoning" and reasoning.content[0].text == "先算 2+2，等于 4。"
        assert message.type == "message" and events[-1].response.output_text == "答案是 4。"
        whole = sdk(server).responses.create(model="clawlet", input="2+2?")
        assert [item.type for item in whole.output] == ["reasoning", "message"]
        assert whole.output_text == "答案是 4。"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, 400, "tools"),
        ({"tools": [{"type": "function", "name": "read_file"}]}, 400, "tools"),
        ({"tool_choice": {"type": "file_search"}}, 400, "tool_choice"),
        ({"tool_choice": "required"}, 400, "tool_choice"),
        (
            {"text": {"format": {"type": "json_schema", "name": "bad name!", "schema": {}}}},
            400,
            "text.format",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 3}}}},
            400,
            "text.format",
        ),
        ({"text": {"format": {"type": "xml"}}}, 400, "text.format"),
        ({"background": True}, 400, "background"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400, "input"),
        ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "x"}]}, 400, "input"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, "input"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
            400,
            "input",
        ),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, 400, "input"),
        ({"input": [{"type": ["message"], "role": "user", "content": "hi"}]}, 400, "input"),
        ({"input": [{"role": "user", "content": [{"type": ["input_text"], "text": "hi"}]}]}, 400, "input"),
        ({"input": [{"role": "assistant", "content": "hi"}]}, 400, "input"),
        ({"input": []}, 400, "input"),
        ({"input": [{"role": ["user"], "content": "hi"}]}, 400, "input"),
        ({"input": ["hi"]}, 400, "input"),
        ({"input": [{"role": "user", "content": "   "}]}, 400, "input"),
        ({"temperature": 3}, 400, "temperature"),
        ({"max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"model": "gpt-4o"}, 404, "model"),
        ({"session_id": "../x"}, 400, "session_id"),
    ],
)
def test_what_is_not_served_is_refused_the_openai_way(
    server: LiveServer, body: dict[str, Any], status: int, param: str
) -> None:
    body = {"model": "clawlet", "input": "hi", **body}
    response = httpx.post(f"{server.url}/v1/responses", json=body, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"].startswith(param), error
    assert error["message"]


@pytest.mark.slow
def test_npm_openai_and_the_ai_sdk_use_the_responses_api(server: LiveServer) -> None:
    script = """
import OpenAI from "openai";
import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "x", maxRetries: 0 });
const whole = await client.responses.create({ model: "clawlet", input: "你好" });
let streamed = "", last = null;
for await (const event of await client.responses.create({ model: "clawlet", input: "hi", stream: true })) {
  if (event.type === "response.output_text.delta") streamed += event.delta;
  last = event.type;
}
const retrieved = await client.responses.retrieve(whole.id);
const model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" })("clawlet");
const generated = await generateText({ model, prompt: "hello", system: "Be kind.", maxRetries: 0 });
const stream = streamText({ model, prompt: "hello", maxRetries: 0 });
let aiStreamed = "";
for await (const part of stream.textStream) aiStreamed += part;
console.log(JSON.stringify({
  whole: whole.output_text, streamed, last, retrieved: retrieved.output_text,
  generated: generated.text, finish: generated.finishReason, usage: generated.usage,
  responseId: generated.providerMetadata?.openai?.responseId ?? null,
  aiStreamed, aiFinish: await stream.finishReason,
}));
"""
    result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
    assert result["whole"] and result["whole"] == result["retrieved"], json.dumps(result)
    assert result["streamed"] and result["last"] == "response.completed"
    assert result["generated"] and result["aiStreamed"], json.dumps(result)
    assert result["finish"] == "stop" and result["aiFinish"] == "stop"
    assert result["usage"]["outputTokens"] > 0 and str(result["responseId"]).startswith("resp_")


@pytest.mark.slow
def test_the_ai_sdk_continues_a_conversation_by_item_reference(
    live_server: Callable[..., LiveServer],
) -> None:
    """The AI SDK sends an earlier answer as an ``item_reference`` to its stored message item: the
    model gets that answer's text as history."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script([text_turn("First answer."), text_turn("Second answer.")])
        server = scripted_server(live_server, llm)
        script = """
import { generateText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" })("clawlet");
const first = await generateText({ model, prompt: "hello", maxRetries: 0 });
const messages = [
  { role: "user", content: "hello" }, ...first.response.messages, { role: "user", content: "again" },
];
const second = await generateText({ model, messages, maxRetries: 0 });
console.log(JSON.stringify({ first: first.text, second: second.text }));
"""
        result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
        assert result == {"first": "First answer.", "second": "Second answer."}
        history = [(m["role"], m["content"]) for m in llm.requests[1]["messages"][1:]]
        assert history == [("user", "hello"), ("assistant", "First answer."), ("user", "again")]

    unknown = {"type": "item_reference", "id": "msg_" + "0" * 32 + "_0"}
    response = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": "clawlet", "input": [unknown, {"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "input"
    assert "not found" in response.json()["error"]["message"]


def test_a_cancelled_run_ends_the_stream_as_incomplete(live_server: Callable[..., LiveServer]) -> None:
    """The run is cancelled (the workbench's stop) while the model is held: the stream ends with
    ``response.incomplete`` and the stored response is ``cancelled``."""
    release = threading.Event()
    with ScriptedOpenAIServer() as llm:
        llm.set_script([Turn(text="Too late.", hold=release)])
        server = scripted_server(live_server, llm)
        body = {"model": "clawlet", "input": "wait for it", "stream": True}
        try:
            with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=120) as reply:
                lines = reply.iter_lines()
                for line in lines:  # the response is under way (its events came) ...
                    if line.startswith("event: response.in_progress"):
                        break
                session_id = reply.headers["x-session-id"]
                for _ in range(2400):  # ... and the model was asked (it is held there)
                    if llm.requests:
                        break
                    release.wait(0.05)
                cancel = httpx.post(f"{server.url}/api/sessions/{session_id}/cancel", timeout=60)
                assert cancel.status_code == 200, cancel.text
                rest = "\n".join(lines)
        finally:
            release.set()
    frames = parse_sse(rest + "\n\n")
    last = EVENTS.validate_python(frames[-1][1], strict=True)
    assert last.type == "response.incomplete" and last.response.status == "cancelled"
    assert sdk(server).responses.retrieve(last.response.id).status == "cancelled"


def test_a_stream_the_client_left_still_stores_the_final_response(
    live_server: Callable[..., LiveServer],
) -> None:
    """The client drops the stream mid-run: the run goes on, and the stored response ends
    ``completed`` with the whole answer (so ``previous_response_id`` and GET see it)."""
    release = threading.Event()
    with ScriptedOpenAIServer() as llm:
        llm.set_script([Turn(text="Finished anyway.", hold=release)])
        server = scripted_server(live_server, llm)
        body = {"model": "clawlet", "input": "wait for it", "stream": True}
        try:
            with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=120) as reply:
                for line in reply.iter_lines():
                    if line.startswith("data: ") and '"response.created"' in line:
                        response_id = json.loads(line[6:])["response"]["id"]
                        break
        finally:
            release.set()
        client, pause = sdk(server), threading.Event()
        for _ in range(2400):  # until the run ended and its response was stored
            stored = client.responses.retrieve(response_id)
            if stored.status != "in_progress":
                break
            pause.wait(0.05)
        assert stored.status == "completed" and stored.output_text == "Finished anyway."


def test_langchain_uses_the_responses_api_with_previous_response_id(
    live_server: Callable[..., LiveServer],
) -> None:
    """LangChain's ``ChatOpenAI(use_responses_api=True, use_previous_response_id=True)`` sends only
    the new message and the last response's id: the session holds the rest."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script([text_turn("One."), text_turn("Two."), text_turn("Three.")])
        server = scripted_server(live_server, llm)
        chat = ChatOpenAI(
            base_url=f"{server.url}/v1",
            api_key="x",  # type: ignore[arg-type]
            model="clawlet",
            use_responses_api=True,
            use_previous_response_id=True,
            max_retries=0,
        )
        first = chat.invoke("one")
        assert first.text == "One." and str(first.response_metadata["id"]).startswith("resp_")
        second = chat.invoke([("user", "one"), first, ("user", "two")])
        assert second.text == "Two."
        stored = sdk(server).responses.retrieve(str(second.response_metadata["id"]))
        assert stored.previous_response_id == first.response_metadata["id"]
        history = [(m["role"], m["content"]) for m in llm.requests[1]["messages"][1:]]
        assert history == [("user", "one"), ("assistant", "One."), ("user", "two")]
        streamed = "".join(chunk.text for chunk in chat.stream("three"))
        assert streamed == "Three."

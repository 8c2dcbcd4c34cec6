"""``/v1`` honours what OpenAI clients send, driven by the real ``openai`` SDK against a real server
(and raw HTTP for the error shapes): refusals OpenAI's way (``n > 1``, unknown models, unserved
paths), ``GET /v1/models/{id}``, sampling options passed to every model call (the scripted
upstream records what it got), ``finish_reason: "length"`` when the cap cut the answer (also
through LangChain), and a final ``finish_reason`` chunk after a mid-stream error."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from openai.types.chat import ChatCompletionChunk

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, Turn, text_turn, tool_turn
from tests.conftest import LiveServer

ERROR_KEYS = {"message", "type", "param", "code"}


def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def test_refusals_and_model_lookup_the_openai_way(server: LiveServer) -> None:
    client = sdk(server)
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=hello)  # type: ignore[arg-type]
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    assert "gpt-4o" in unknown.value.message

    with pytest.raises(openai.BadRequestError) as several:
        client.chat.completions.create(model="clawlet", messages=hello, n=2)  # type: ignore[arg-type]
    assert several.value.param == "n" and several.value.code == "unsupported_value"
    one = client.chat.completions.create(model="clawlet", messages=hello, n=1)  # type: ignore[arg-type]
    assert len(one.choices) == 1

    model = client.models.retrieve("clawlet")
    assert model.id == "clawlet" and model.object == "model" and model.owned_by == "clawlet"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/nothing"), ("GET", "/v1/nothing"), ("POST", "/v1/embeddings"), ("DELETE", "/v1/x/y")],
)
def test_unserved_paths_are_openai_404s(server: LiveServer, method: str, path: str) -> None:
    response = httpx.request(method, f"{server.url}{path}", json={"model": "clawlet"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS and error["type"] == "not_found_error"
    assert error["message"] == f"Invalid URL ({method} {path})"
    assert "allow" not in response.headers


def test_a_served_path_with_another_method_stays_405(server: LiveServer) -> None:
    response = httpx.delete(f"{server.url}/v1/models")
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    assert set(response.json()["error"]) == ERROR_KEYS


SAMPLING = {
    "temperature": 0,
    "top_p": 0.5,
    "stop": ["END"],
    "seed": 7,
    "presence_penalty": 0.25,
    "frequency_penalty": -0.5,
}


def scripted_server(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(
        Settings(
            provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k", temperature=0.7
        )
    )


def test_sampling_options_reach_every_model_call(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"})),
                text_turn("Read it."),
                text_turn("Plain."),
                text_turn("Default."),
            ]
        )
        client = sdk(scripted_server(live_server, llm))
        answer = client.chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "read your identity"}],
            max_tokens=50,
            **SAMPLING,  # type: ignore[arg-type]
        )
        assert answer.choices[0].message.content == "Read it."
        assert len(llm.requests) == 2 and "tools" in llm.requests[0]  # a tool step, then the answer
        for sent in llm.requests:
            assert {key: sent.get(key) for key in SAMPLING} == SAMPLING
            assert sent["max_completion_tokens"] == 50  # the cap of each model call
        client.chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "hi"}],
            stop="STOP HERE",
            max_tokens=50,
            max_completion_tokens=9,
        )
        assert llm.requests[2]["stop"] == ["STOP HERE"] and llm.requests[2]["max_completion_tokens"] == 9
        client.chat.completions.create(model="clawlet", messages=[{"role": "user", "content": "hi"}])
        defaults = llm.requests[3]
        assert defaults["temperature"] == 0.7  # the configured default when the client sends none
        assert not {"top_p", "stop", "seed", "max_completion_tokens"} & set(defaults)


def test_an_answer_cut_by_max_tokens_ends_with_length(live_server: Callable[..., LiveServer]) -> None:
    with ScriptedOpenAIServer() as llm:
        cut = Turn(text="One two three", finish="length")
        llm.set_script([cut, cut, cut])
        server = scripted_server(live_server, llm)
        client = sdk(server)
        hello = [{"role": "user", "content": "count"}]
        answer = client.chat.completions.create(model="clawlet", messages=hello, max_tokens=3)  # type: ignore[arg-type]
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content == "One two three"
        chunks = list(
            client.chat.completions.create(model="clawlet", messages=hello, max_tokens=3, stream=True)  # type: ignore[arg-type]
        )
        finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finals == ["length"]
        langchain = ChatOpenAI(
            base_url=f"{server.url}/v1",
            api_key="x",
            model="clawlet",
            temperature=0,
            max_tokens=3,
            max_retries=0,
        )
        reply = langchain.invoke("count")
        assert reply.response_metadata["finish_reason"] == "length" and reply.text == "One two three"
        assert [sent["max_completion_tokens"] for sent in llm.requests] == [3, 3, 3]
        assert llm.requests[2]["temperature"] == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 3),
        ("top_p", -1),
        ("max_tokens", 0),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("seed", "x"),
    ],
)
def test_bad_sampling_options_are_400s(server: LiveServer, field: str, value: object) -> None:
    body = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}], field: value}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS and error["param"].startswith(field)


@pytest.mark.slow
def test_a_mid_stream_error_still_ends_with_a_finish_reason(live_server: Callable[..., LiveServer]) -> None:
    """The model fails after a tool ran: the error line, then the final chunk with its
    ``finish_reason`` (and the usage chunk asked for), then ``[DONE]``; the SDK raises the error."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"}), text="Reading.")])
        server = scripted_server(live_server, llm)  # the second model call finds the script exhausted
        body = {
            "model": "clawlet",
            "messages": [{"role": "user", "content": "read your identity"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as response:
            data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert response.status_code == 200 and data[-1] == "[DONE]"
        error, final, usage = (json.loads(item) for item in data[-4:-1])
        assert error["error"]["code"] == "agent_run_failed" and error["error"]["message"]
        assert ChatCompletionChunk.model_validate(final).choices[0].finish_reason == "stop"
        assert ChatCompletionChunk.model_validate(usage).usage is not None
        chunks = [ChatCompletionChunk.model_validate(json.loads(item)) for item in data[:-4]]
        assert "Reading." in "".join(c.choices[0].delta.content or "" for c in chunks)
        assert all(c.choices[0].finish_reason is None for c in chunks)

        llm.set_script([tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"}), text="Reading.")])
        with pytest.raises(openai.APIError, match="script exhausted"):
            for _ in sdk(server).chat.completions.create(
                model="clawlet", messages=[{"role": "user", "content": "again"}], stream=True
            ):
                pass

"""``response_format`` on ``/v1/chat/completions``: the turn's final answer honours it, driven by
the real ``openai`` SDK (``chat.completions.parse``) and LangChain's ``with_structured_output``
against a real server, with the offline demo model and with the scripted upstream (which records
what it got): tools may run first, a call offering no tools asks the upstream for the format, an
invalid answer gets one corrective call, then a clear error; streamed answers too."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from tests.conftest import LiveServer


class Tree(BaseModel):
    label: str
    children: list[Tree]
    parent: Tree | None = None


class City(BaseModel):
    name: str
    population: int
    sights: list[str]


CITY = {"name": "Lyon", "population": 522000, "sights": ["Fourvière"]}


def sdk(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def upstream(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k"))


def system_text(request: dict[str, object]) -> str:
    messages = request["messages"]
    assert isinstance(messages, list) and messages[0]["role"] == "system"
    return str(messages[0]["content"])


def test_the_demo_model_answers_in_the_format_asked(server: LiveServer) -> None:
    client = sdk(server)
    hello = [{"role": "user", "content": "Describe a city"}]
    parsed = client.chat.completions.parse(model="clawlet", messages=hello, response_format=City)  # type: ignore[arg-type]
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City) and city.sights and city.population == 0

    tree = client.chat.completions.parse(model="clawlet", messages=hello, response_format=Tree)  # type: ignore[arg-type]
    assert isinstance(tree.choices[0].message.parsed, Tree)

    plain = client.chat.completions.create(
        model="clawlet",
        messages=hello,  # type: ignore[arg-type]
        response_format={"type": "json_object"},
    )
    assert set(json.loads(plain.choices[0].message.content or "")) == {"answer"}

    streamed = client.chat.completions.create(
        model="clawlet",
        messages=hello,  # type: ignore[arg-type]
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "City", "schema": City.model_json_schema()},
        },
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert City.model_validate_json(text).sights

    for model in (
        ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="clawlet", max_retries=0),
        ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="clawlet", max_retries=0, streaming=True),
    ):
        assert isinstance(model.with_structured_output(City).invoke("Describe a city"), City)
        # json_mode sends no schema (the prompt describes it): the demo answers {"answer": ...}
        found = model.with_structured_output(City, method="json_mode", include_raw=True).invoke("hi in JSON")
        assert isinstance(found, dict) and json.loads(found["raw"].text)["answer"].startswith("[demo]")


def test_structured_output_through_a_real_upstream(live_server: Callable[..., LiveServer]) -> None:
    """A tool runs first; the valid final answer is the answer (LangChain's default method and
    json_mode, and the SDK's parse); the instruction and schema reach the model's system prompt."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                tool_turn(ToolCall("read_file", {"path": "workspace/IDENTITY.md"})),
                text_turn(json.dumps(CITY)),
                text_turn("```json\n" + json.dumps(CITY) + "\n```"),
                text_turn(json.dumps(CITY)),
            ]
        )
        server = upstream(live_server, llm)
        chat = ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="clawlet", max_retries=0)
        city = chat.with_structured_output(City).invoke("Read your identity, then describe Lyon")
        assert city == City(**CITY)  # type: ignore[arg-type]
        assert len(llm.requests) == 2 and "tools" in llm.requests[0]
        assert '"population"' in system_text(llm.requests[1]) and "JSON Schema (City)" in system_text(
            llm.requests[1]
        )

        found = chat.with_structured_output(City, method="json_mode").invoke("Describe Lyon in JSON")
        assert found == City(**CITY)  # type: ignore[arg-type]
        assert "one JSON object" in system_text(llm.requests[2])

        parsed = sdk(server).chat.completions.parse(
            model="clawlet",
            messages=[{"role": "user", "content": "Describe Lyon"}],
            response_format=City,
        )
        assert parsed.choices[0].message.parsed == City(**CITY)  # type: ignore[arg-type]


def test_a_call_without_tools_asks_the_upstream_for_the_format(
    live_server: Callable[..., LiveServer],
) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script([text_turn(json.dumps(CITY)), text_turn(json.dumps(CITY))])
        server = upstream(live_server, llm)
        chunks = sdk(server).chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "Describe Lyon"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "City", "schema": City.model_json_schema(), "strict": True},
            },
            extra_body={"allowed_tools": []},
            stream=True,
        )
        assert json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)) == CITY
        sent = llm.requests[0]
        assert "tools" not in sent
        assert sent["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "City", "schema": City.model_json_schema(), "strict": True},
        }
        answer = sdk(server).chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "Describe Lyon"}],
            response_format={"type": "json_object"},
            extra_body={"allowed_tools": []},
        )
        assert json.loads(answer.choices[0].message.content or "") == CITY
        assert llm.requests[1]["response_format"] == {"type": "json_object"}

        llm.set_script([text_turn(json.dumps(CITY))])
        chat = ChatOpenAI(
            base_url=f"{server.url}/v1",
            api_key="x",
            model="clawlet",
            max_retries=0,
            extra_body={"allowed_tools": []},
        )
        assert chat.with_structured_output(City).invoke("Describe Lyon") == City(**CITY)  # type: ignore[arg-type]
        native = llm.requests[2]["response_format"]
        assert native["type"] == "json_schema" and native["json_schema"]["name"] == "City"
        assert set(native["json_schema"]["schema"]["properties"]) == set(CITY)


def test_an_invalid_answer_gets_one_corrective_call(live_server: Callable[..., LiveServer]) -> None:
    """The draft is not valid: one call without tools, asking natively and saying why; the draft
    is never shown (streamed or not); a second invalid answer fails the run clearly."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                text_turn("Sure! Lyon is a lovely city."),
                text_turn(json.dumps(CITY)),
                text_turn('{"name": "Lyon"}'),
                text_turn(json.dumps(CITY)),
                text_turn("no"),
                text_turn("still no"),
            ]
        )
        server = upstream(live_server, llm)
        client = sdk(server)
        hello = [{"role": "user", "content": "Describe Lyon"}]
        parsed = client.chat.completions.parse(model="clawlet", messages=hello, response_format=City)  # type: ignore[arg-type]
        assert parsed.choices[0].message.content == json.dumps(CITY)
        draft, corrective = llm.requests[0], llm.requests[1]
        assert "tools" in draft and "response_format" not in draft
        assert "tools" not in corrective and corrective["response_format"]["json_schema"]["name"] == "City"
        said = corrective["messages"][-1]
        assert said["role"] == "user" and "not valid JSON" in said["content"]
        assert corrective["messages"][-2] == {"role": "assistant", "content": "Sure! Lyon is a lovely city."}

        chunks = client.chat.completions.create(
            model="clawlet",
            messages=hello,  # type: ignore[arg-type]
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "City", "schema": City.model_json_schema()},
            },
            stream=True,
        )
        assert json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)) == CITY
        assert "'population' is a required property" in llm.requests[3]["messages"][-1]["content"]

        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(
                model="clawlet",
                messages=hello,  # type: ignore[arg-type]
                response_format={"type": "json_object"},
            )
        assert failed.value.code == "agent_run_failed"
        assert "does not honour response_format json_object after a corrective retry" in failed.value.message
        assert len(llm.requests) == 6


def named(schema: dict[str, object]) -> dict[str, object]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"type": "xml"}, "'xml' is not supported"),
        ("json", "valid dictionary"),
        ({"type": "json_schema"}, "json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "name must be"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}},
            "not a valid JSON Schema",
        ),
        (named({"$ref": "https://example.com/s"}), "cannot be used"),
        (named({"type": "string", "pattern": "("}), "is not a 'regex'"),
    ],
)
def test_a_bad_response_format_is_a_400(server: LiveServer, value: object, says: str) -> None:
    body = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}], "response_format": value}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "response_format"
    assert says in error["message"]


def test_text_is_the_default_format(server: LiveServer) -> None:
    answer = sdk(server).chat.completions.create(
        model="clawlet",
        messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "text"},
    )
    assert (answer.choices[0].message.content or "").startswith("[demo]")

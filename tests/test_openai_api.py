"""Client conformance of /v1/chat/completions and /v1/models with the real openai SDK and
langchain-openai against a real server; every raw chunk is validated with the SDK's own model."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import LiveServer


def client(server: LiveServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def raw_stream(
    server: LiveServer, payload: dict[str, object], **headers: str
) -> tuple[httpx.Response, list[str]]:
    with httpx.stream(
        "POST", f"{server.url}/v1/chat/completions", json=payload, headers=headers, timeout=60
    ) as r:
        lines = [line for line in r.iter_lines()]
    return r, lines


def test_streamed_chunks_validate_and_end_properly(server: LiveServer) -> None:
    response, lines = raw_stream(
        server,
        {
            "model": "clawlet",
            "messages": [{"role": "user", "content": "run: echo hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert response.status_code == 200
    assert response.headers["x-session-id"].startswith("oai-")
    assert ": keep-alive" in lines  # while the tool ran
    data = [line[6:] for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(item)) for item in data[:-1]]
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" and c.model == "clawlet" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (
        chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens
    )
    assert all(not c.choices or c.choices[0].delta.tool_calls is None for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Running `echo hi`" in text and "hi\n```" in text


def test_openai_sdk_sync_async_stream_helper_and_non_stream(server: LiveServer) -> None:
    sync = client(server)
    completion = sync.chat.completions.create(
        model="clawlet", messages=[{"role": "user", "content": "python: 6*7"}]
    )
    assert isinstance(completion, ChatCompletion)
    assert "42" in (completion.choices[0].message.content or "")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0

    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in sync.chat.completions.create(
            model="clawlet", messages=[{"role": "user", "content": "你好"}], stream=True
        )
        if chunk.choices
    ]
    # the demo model answers instantly: text that piles up while the stream is written goes out
    # merged, so the number of pieces depends on the machine's load (at least one besides the role
    # and finish chunks)
    assert "你好" in "".join(pieces) and len(pieces) >= 3 and pieces[0] == ""

    with sync.chat.completions.stream(
        model="clawlet", messages=[{"role": "user", "content": "read workspace/IDENTITY.md"}]
    ) as stream:
        final = stream.get_final_completion()
    assert "Clawlet" in (final.choices[0].message.content or "")

    async def run_async() -> str:
        async_client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        result = await async_client.chat.completions.create(
            model="clawlet", messages=[{"role": "user", "content": "run: echo async"}]
        )
        collected = []
        async for chunk in await async_client.chat.completions.create(
            model="clawlet", messages=[{"role": "user", "content": "run: echo async2"}], stream=True
        ):
            if chunk.choices:
                collected.append(chunk.choices[0].delta.content or "")
        await async_client.close()
        return (result.choices[0].message.content or "") + "".join(collected)

    joined = asyncio.run(run_async())
    assert "async\n```" in joined and "async2\n```" in joined

    models = sync.models.list().data
    assert [m.id for m in models] == ["clawlet"] and models[0].created > 0 and models[0].owned_by


def test_langchain_openai_invoke_and_stream_with_usage(server: LiveServer) -> None:
    model = ChatOpenAI(
        base_url=f"{server.url}/v1", api_key="x", model="clawlet", stream_usage=True, max_retries=0
    )
    assert "offline demo model" in str(model.invoke("hello").content)
    aggregate = None
    for piece in model.stream("run: echo lc"):
        aggregate = piece if aggregate is None else aggregate + piece
    assert aggregate is not None and "lc\n```" in str(aggregate.content)
    assert aggregate.usage_metadata is not None and aggregate.usage_metadata["total_tokens"] > 0


def test_session_resume_and_history_seeding(settings: Settings, live_server: object) -> None:
    with ScriptedOpenAIServer() as llm:
        llm.set_script([text_turn("第一次回答"), text_turn("第二次回答"), text_turn("第三次回答")])
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server: LiveServer = live_server(custom)  # type: ignore[operator]
        sdk = client(server)
        first = sdk.chat.completions.with_raw_response.create(
            model="clawlet",
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "早上好"},
                {"role": "assistant", "content": "早上好！"},
                {"role": "user", "content": "记住数字 7"},
            ],
        )
        session_id = first.headers["x-session-id"]
        assert first.parse().choices[0].message.content == "第一次回答"
        sent = [(m["role"], m["content"]) for m in llm.requests[0]["messages"][1:]]
        assert sent == [("user", "早上好"), ("assistant", "早上好！"), ("user", "记住数字 7")]

        # Resume by header: only the new message is needed; the stored history is used.
        second = sdk.chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "是哪个数字？"}],
            extra_headers={"X-Session-ID": session_id},
        )
        assert second.choices[0].message.content == "第二次回答"
        resent = [(m["role"], m["content"]) for m in llm.requests[1]["messages"][1:]]
        assert resent[-3:] == [("user", "记住数字 7"), ("assistant", "第一次回答"), ("user", "是哪个数字？")]

        # Open WebUI's chat id header works as a session key too.
        sdk.chat.completions.create(
            model="clawlet",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-OpenWebUI-Chat-Id": "owui-1"},
        )
        stored = json.loads((custom.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8"))
        assert [m["content"] for m in stored["messages"]] == [
            "早上好",
            "早上好！",
            "记住数字 7",
            "第一次回答",
            "是哪个数字？",
            "第二次回答",
        ]
        assert (custom.paths.sessions / "owui-1.json").is_file()


def test_error_shapes(server: LiveServer) -> None:
    url = f"{server.url}/v1/chat/completions"
    cases = [
        ({"model": "clawlet", "messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "clawlet", "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ({"model": "clawlet", "messages": [{"role": "user", "content": "   "}]}, "messages"),
        ({"model": "clawlet", "messages": [{"role": "wizard", "content": "hi"}]}, None),
    ]
    for body, param in cases:
        response = httpx.post(url, json=body)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
        assert "detail" not in response.json()
        if param:
            assert param in (error["param"] or "") or param in error["message"]
    bad_json = httpx.post(url, content="{nope", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and "error" in bad_json.json()
    bad_session = httpx.post(
        url,
        json={"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Session-ID": "../x"},
    )
    assert bad_session.status_code == 400 and bad_session.json()["error"]["code"] == "invalid_session_id"
    missing = httpx.get(f"{server.url}/v1/nothing")
    assert missing.status_code == 404 and set(missing.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.slow
def test_busy_session_gets_409_without_retry(server: LiveServer) -> None:
    payload = {
        "model": "clawlet",
        "messages": [{"role": "user", "content": "python: import time; time.sleep(2)"}],
    }
    url = f"{server.url}/v1/chat/completions"
    results: list[httpx.Response] = []
    slow = threading.Thread(
        target=lambda: results.append(
            httpx.post(url, json=payload, headers={"X-Session-ID": "busy1"}, timeout=60)
        )
    )
    slow.start()
    for _ in range(100):
        history = httpx.get(f"{server.url}/api/sessions/busy1/history")
        if history.status_code == 200 and history.json()["running"]:
            break
        threading.Event().wait(0.05)
    second = httpx.post(url, json=payload, headers={"X-Session-ID": "busy1"})
    assert second.status_code == 409
    assert second.headers["x-should-retry"] == "false"
    assert second.json()["error"]["code"] == "session_busy"
    slow.join()
    assert results[0].status_code == 200


@pytest.mark.slow
def test_failed_run_reports_openai_errors(settings: Settings, live_server: object) -> None:
    with ScriptedOpenAIServer() as llm:  # an empty script: every LLM call fails with HTTP 500
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server: LiveServer = live_server(custom)  # type: ignore[operator]
        body = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 500
        assert response.headers["x-should-retry"] == "false"
        assert response.json()["error"]["code"] == "agent_run_failed"
        _, lines = raw_stream(server, {**body, "stream": True})
        data = [line[6:] for line in lines if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        assert "error" in json.loads(data[-3]) and json.loads(data[-3])["error"]["message"]
        with pytest.raises(openai.APIError):
            for _ in client(server).chat.completions.create(
                model="clawlet", messages=[{"role": "user", "content": "x"}], stream=True
            ):
                pass


def test_bearer_auth_on_v1(settings: Settings, live_server: object) -> None:
    server: LiveServer = live_server(Settings(api_token="s3cret-token"))  # type: ignore[operator]
    for key in ("wrong", ""):
        with pytest.raises(openai.AuthenticationError):
            client(server, key or "x").models.list()
    response = httpx.get(f"{server.url}/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert [m.id for m in client(server, "s3cret-token").models.list().data] == ["clawlet"]


def test_several_api_keys_are_accepted(settings: Settings, live_server: object) -> None:
    server: LiveServer = live_server(Settings(api_keys="key-one, key-two"))  # type: ignore[operator]
    for key in ("key-one", "key-two"):
        assert [m.id for m in client(server, key).models.list().data] == ["clawlet"]
    with pytest.raises(openai.AuthenticationError):
        client(server, "key-three").models.list()
    workbench = httpx.get(f"{server.url}/api/sessions", headers={"Authorization": "Bearer key-two"})
    assert workbench.status_code == 200
    assert httpx.get(f"{server.url}/api/sessions").json()["error"]["code"] == "unauthorized"

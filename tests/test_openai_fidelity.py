"""``/v1`` honours what OpenAI clients send, driven by the real ``openai`` SDK against a real server
(and raw HTTP for the error shapes): refusals OpenAI's way (``n > 1``, unknown models, unserved
paths), ``GET /v1/models/{id}``."""

from __future__ import annotations

import httpx
import openai
import pytest

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

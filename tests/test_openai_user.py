"""``user`` on ``/v1/chat/completions`` (OpenAI's end-user id): accepted and logged with the
session id, never passed to the model; an over-long one is a 400."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest

from tests.conftest import LiveServer


def test_the_end_user_is_logged_with_the_session(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    with caplog.at_level(logging.INFO, logger="clawlet.api.openai.chat"):
        answer = client.chat.completions.with_raw_response.create(
            model="clawlet", messages=[{"role": "user", "content": "hi"}], user="user-42"
        )
    session = answer.headers["x-session-id"]
    assert f"chat completion for end user 'user-42' in session {session}" in caplog.messages


def test_an_over_long_user_is_a_400(server: LiveServer) -> None:
    body = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}], "user": "u" * 257}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "user"

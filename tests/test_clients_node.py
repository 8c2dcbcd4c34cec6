"""The real npm ``openai`` and AI SDK (``ai`` + ``@ai-sdk/openai``) chat with clawlet's ``/v1``
on loopback, streamed and not: the harness the client-fidelity tests of issue 16 build on."""

from __future__ import annotations

import json

import pytest

from tests.conftest import LiveServer
from tests.support.node_clients import run_node_client

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`


def test_npm_openai_chats_streamed_and_not(server: LiveServer) -> None:
    script = """
import OpenAI from "openai";
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "x", maxRetries: 0 });
const messages = [{ role: "user", content: "你好，clawlet" }];
const whole = await client.chat.completions.create({ model: "clawlet", messages });
let streamed = "", finish = null;
const stream = await client.chat.completions.create({ model: "clawlet", messages, stream: true });
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.delta?.content ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
const choice = whole.choices[0];
console.log(JSON.stringify({
  whole: choice.message.content, finish: choice.finish_reason, streamed, streamFinish: finish,
}));
"""
    result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
    assert result["whole"] and result["streamed"], result
    assert result["finish"] == "stop" and result["streamFinish"] == "stop"


def test_ai_sdk_chat_model_generates_and_streams(server: LiveServer) -> None:
    script = """
import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
const provider = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" });
const model = provider.chat("clawlet");
const whole = await generateText({ model, prompt: "hello", maxRetries: 0 });
const stream = streamText({ model, prompt: "hello", maxRetries: 0 });
let streamed = "";
for await (const part of stream.textStream) streamed += part;
console.log(JSON.stringify({ whole: whole.text, finish: whole.finishReason, streamed }));
"""
    result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
    assert result["whole"] and result["streamed"], json.dumps(result)
    assert result["finish"] == "stop"

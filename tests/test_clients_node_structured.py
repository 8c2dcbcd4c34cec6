"""Structured output through clawlet's ``/v1`` with the real npm clients: the AI SDK's
``Output.object`` (``generateText`` and ``streamText``, a JSON schema sent as ``response_format``)
and npm ``openai``'s ``chat.completions.parse`` with ``zodResponseFormat``, answered by the
offline demo model (which builds its answer from the schema)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import LiveServer
from tests.support.node_clients import run_node_client

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`


def test_ai_sdk_output_object_and_npm_openai_parse(server: LiveServer) -> None:
    script = """
import { generateText, streamText, Output, jsonSchema } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
const schema = jsonSchema({
  type: "object",
  properties: {
    city: { type: "string" }, rank: { type: "integer" }, tags: { type: "array", items: { type: "string" } },
  },
  required: ["city", "rank", "tags"],
  additionalProperties: false,
});
const model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "x" }).chat("clawlet");
const output = Output.object({ schema });
const whole = await generateText({ model, prompt: "a city", output, maxRetries: 0 });
const stream = streamText({ model, prompt: "a city", output, maxRetries: 0 });
const streamed = await stream.output;
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "x", maxRetries: 0 });
const Place = z.object({ name: z.string(), visitors: z.number(), open: z.boolean() });
const parsed = await client.chat.completions.parse({
  model: "clawlet",
  messages: [{ role: "user", content: "a place" }],
  response_format: zodResponseFormat(Place, "place"),
});
console.log(JSON.stringify({ whole: whole.output, streamed, parsed: parsed.choices[0].message.parsed }));
"""
    result = run_node_client(script, env={"BASE_URL": f"{server.url}/v1"})
    for found in (result["whole"], result["streamed"]):
        assert set(found) == {"city", "rank", "tags"}, json.dumps(result)
        assert isinstance(found["city"], str) and found["rank"] == 0 and len(found["tags"]) == 1
    assert result["parsed"]["visitors"] == 0 and result["parsed"]["open"] is False, json.dumps(result)

"""The gateway's ``agent`` / ``agent.wait`` and operator read methods (``status``,
``system-presence``, ``logs.tail``, ``usage.cost``, ``diagnostics.stability``, ``config.get``,
``sessions.subscribe``, ``sessions.describe``, ``commands.list``, ``question.list``,
``plugin.approval.list``): a real server, a real WebSocket client, every frame validated against
``@openclaw/gateway-protocol``'s schema (``tests/test_openclaw_interop.py`` drives the same methods
with the real ``openclaw`` CLI and TUI).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect

from clawlet.config import Settings
from clawlet.gateway.protocol import request_frame
from clawlet.home import init_home
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import LiveServer
from tests.support.gateway_schema import ProtocolSchema
from tests.test_gateway_server import (
    APPROVALS,
    LONG_MESSAGE,
    QUESTIONS,
    READ,
    TIMEOUT,
    WRITE,
    Client,
    gateway,
    ws_url,
)

SECRET_KEY = "sk-very-secret-llm-key-123456"
URL_PASSWORD = "url-password-not-to-show"


async def agent_request(client: Client, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send ``agent``; its two responses (accepted, then the result) under one request id."""
    request_id = uuid.uuid4().hex
    client.pending[request_id] = "agent"
    await client.send(request_frame(request_id, "agent", params))
    accepted = await client.response(request_id)
    client.pending[request_id] = "agent"
    final = await client.response(request_id)
    return accepted, final


async def test_agent_answers_accepted_then_the_runs_result(
    server: LiveServer, schema: ProtocolSchema
) -> None:
    async with gateway(server, schema, client_id="cli", mode="cli") as client:
        params = {"message": "hello agent", "sessionKey": "agent:main:cli", "idempotencyKey": "run-1"}
        accepted, final = await agent_request(client, params)
        assert accepted["payload"] == {
            "runId": "run-1",
            "sessionKey": "agent:main:cli",
            "agentId": "main",
            "status": "accepted",
            "acceptedAt": accepted["payload"]["acceptedAt"],
        }
        result = final["payload"]
        assert result["status"] == "ok" and result["summary"] == "completed" and result["runId"] == "run-1"
        [payload] = result["result"]["payloads"]
        assert "hello agent" in payload["text"]  # the demo model echoes the message
        assert result["result"]["meta"]["durationMs"] >= 0

        waited = await client.ok("agent.wait", {"runId": "run-1", "timeoutMs": 1000})
        assert waited["status"] == "ok" and waited["endedAt"] >= waited["startedAt"]
        again_accepted, again = await agent_request(client, params)  # the same key: no second run
        assert again_accepted["payload"]["status"] == "accepted"
        assert again["payload"]["result"] == result["result"]
        history = await client.ok("chat.history", {"sessionKey": "agent:main:cli"})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]

        # no session key: the agent's main session
        _, main = await agent_request(
            client, {"message": "to main", "agentId": "main", "idempotencyKey": "run-2"}
        )
        assert main["payload"]["sessionKey"] == "agent:main:main"

        missing = await client.request("agent", {"idempotencyKey": "run-3"}, raw=True)
        assert missing["ok"] is False and missing["error"]["code"] == "INVALID_REQUEST"
        assert "message" in missing["error"]["message"]
        bad_timeout = await client.request(
            "agent", {"message": "x", "idempotencyKey": "run-4", "timeout": "soon"}, raw=True
        )
        assert bad_timeout["ok"] is False and "timeout" in bad_timeout["error"]["message"]
        unknown = await client.request("agent.wait", {"runId": "no-such-run"})
        assert unknown["ok"] is False and unknown["error"]["message"] == "agent run was not found"


@pytest.mark.slow
async def test_agent_past_its_timeout_is_aborted(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(settings, demo_token_delay=0.05)
    async with gateway(server, schema) as client:
        params = {
            "message": LONG_MESSAGE,
            "sessionKey": "agent:main:slow",
            "idempotencyKey": "slow-1",
            "timeout": 1,
        }
        accepted, final = await agent_request(client, params)
        assert accepted["payload"]["status"] == "accepted"
        assert final["payload"]["status"] == "timeout" and final["payload"]["summary"] == "aborted"
        waited = await client.ok("agent.wait", {"runId": "slow-1"})
        assert waited["status"] == "timeout" and waited["stopReason"] == "rpc"


async def test_reading_methods_need_operator_read(server: LiveServer, schema: ProtocolSchema) -> None:
    async with gateway(server, schema, scopes=(WRITE,)) as client:
        for method in ("status", "logs.tail", "usage.cost", "config.get", "diagnostics.stability"):
            refused = await client.request(method, {})
            assert refused["ok"] is False and refused["error"]["code"] == "FORBIDDEN", method


async def test_status_presence_and_sessions(server: LiveServer, schema: ProtocolSchema) -> None:
    async with (
        gateway(server, schema, client_id="cli", mode="cli") as first,
        gateway(server, schema, scopes=(READ, WRITE, APPROVALS, QUESTIONS)) as second,
    ):
        status = await first.ok("status", {})
        assert status["status"] == "healthy" and status["connections"] == 2
        assert set(status["checks"]) == {"llm", "workspace", "mcp", "sandbox"}
        assert status["checks"]["llm"]["details"]["provider"] == "demo"

        presence = await first.request("system-presence")
        assert presence["ok"] is True
        assert sorted(entry["text"] for entry in presence["payload"]) == ["cli", "gateway-client"]
        assert all(entry["ip"] == "127.0.0.1" for entry in presence["payload"])

        assert await first.ok("sessions.subscribe", {}) == {"subscribed": True}
        assert await first.ok("sessions.describe", {"key": "agent:main:fresh"}) == {"session": None}
        await first.ok(
            "chat.send", {"sessionKey": "agent:main:fresh", "message": "hi", "idempotencyKey": "c1"}
        )
        await first.run_events("c1")
        described = await first.ok("sessions.describe", {"key": "agent:main:fresh"})
        assert (
            described["session"]["key"] == "agent:main:fresh" and described["session"]["sessionId"] == "fresh"
        )
        assert await first.ok("commands.list", {}) == {"commands": []}
        assert await second.ok("question.list", {}) == {"questions": []}
        approvals = await second.request("plugin.approval.list", {})
        assert approvals["ok"] is True and approvals["payload"] == []
        refused = await first.request("question.list", {})  # without operator.questions
        assert refused["ok"] is False and refused["error"]["code"] == "FORBIDDEN"


async def test_logs_tail_pages_through_the_servers_log(
    server: LiveServer, schema: ProtocolSchema, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clawlet.gateway.server")
    async with gateway(server, schema, client_id="cli", mode="cli") as client:
        page = await client.ok("logs.tail", {"limit": 5000})
        lines = [json.loads(line) for line in page["lines"]]
        connected = [line for line in lines if "gateway client connected: cli/cli" in line["message"]]
        assert connected and connected[-1]["subsystem"] == "clawlet.gateway.server"
        assert connected[-1]["level"] == "info" and connected[-1]["time"].endswith("Z")
        assert page["cursor"] == page["size"] > 0

        async with gateway(server, schema):  # one more line: another client connects
            pass
        following = await client.ok("logs.tail", {"cursor": page["cursor"]})
        assert following["lines"] and all(line not in page["lines"] for line in following["lines"])
        assert any("gateway client connected: gateway-client" in line for line in following["lines"])
        past = await client.ok("logs.tail", {"cursor": following["cursor"] + 10_000})
        assert past["reset"] is True
        small = await client.ok("logs.tail", {"limit": 1})
        assert len(small["lines"]) == 1 and small["truncated"] is True
        bad = await client.request("logs.tail", {"limit": 0}, raw=True)
        assert bad["ok"] is False and bad["error"]["code"] == "INVALID_REQUEST"


async def test_usage_cost_counts_the_tokens_of_the_gateways_runs(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    with ScriptedOpenAIServer(lambda body: text_turn("Counted."), model="scripted-model") as llm:
        scripted = Settings(
            home=settings.home,
            provider="openai",
            llm_base_url=llm.base_url,
            llm_model=llm.model,
            llm_api_key="sk-scripted-not-a-secret",
        )
        server = live_server(scripted)
        async with gateway(server, schema) as client:
            empty = await client.ok("usage.cost", {})
            assert empty["days"] == 30 and empty["daily"] == [] and empty["totals"]["totalTokens"] == 0
            await client.ok(
                "chat.send", {"sessionKey": "agent:main:u", "message": "count me", "idempotencyKey": "u1"}
            )
            await client.run_events("u1")
            cost = await client.ok("usage.cost", {"days": 7})
            usage = llm.usages[-1]
            totals = cost["totals"]
            assert (
                totals["input"] == usage["prompt_tokens"] and totals["output"] == usage["completion_tokens"]
            )
            assert totals["totalTokens"] == usage["total_tokens"] > 0
            assert totals["totalCost"] == 0 and totals["missingCostByModel"] == {"scripted-model": 1}
            assert [day["totalTokens"] for day in cost["daily"]] == [usage["total_tokens"]]
            bad = await client.request("usage.cost", {"days": 0}, raw=True)
            assert bad["ok"] is False and bad["error"]["code"] == "INVALID_REQUEST"


async def test_diagnostics_stability_records_oversized_frames(
    server: LiveServer, schema: ProtocolSchema
) -> None:
    async with gateway(server, schema) as client:
        quiet = await client.ok("diagnostics.stability", {})
        assert quiet["count"] == 0 and quiet["events"] == [] and quiet["capacity"] >= 1
        assert quiet["summary"]["memory"]["latest"]["rssBytes"] > 0
        async with connect(ws_url(server), open_timeout=TIMEOUT, max_size=None) as ws:
            await ws.recv()  # the challenge
            await ws.send(json.dumps(request_frame("big", "connect", {"pad": "x" * 70_000})))
            refused = json.loads(await ws.recv())
            assert refused["ok"] is False
        noted = await client.ok("diagnostics.stability", {"limit": 5})
        [event] = noted["events"]
        assert event["type"] == "payload.large" and event["outcome"] == "rejected"
        assert noted["summary"]["byType"] == {"payload.large": 1} and noted["lastSeq"] == event["seq"]
        later = await client.ok("diagnostics.stability", {"sinceSeq": event["seq"]})
        assert later["events"] == []


@pytest.fixture
def secret_settings(settings: Settings) -> Iterator[Settings]:
    custom = settings.model_copy(
        update={
            "llm_api_key": SECRET_KEY,
            "gateway_token": "gw-token-not-to-show",
            "openclaw_gateway_url": f"ws://clawlet:{URL_PASSWORD}@127.0.0.1:18789",
        }
    )
    init_home(custom.paths)
    yield custom


async def test_config_get_shows_the_settings_without_secrets(
    live_server: Callable[..., LiveServer], secret_settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(secret_settings)
    async with gateway(server, schema, token="gw-token-not-to-show") as client:
        view = await client.ok("config.get", {})
        text = json.dumps(view)
        for secret in (SECRET_KEY, "gw-token-not-to-show", URL_PASSWORD):
            assert secret not in text
        config = view["config"]
        assert config["llm_api_key"] == "***" and config["gateway_token"] == "***"
        assert config["openclaw_gateway_url"] == "ws://***@127.0.0.1:18789"
        assert config["port"] == secret_settings.port and config["api_token"] is None
        assert view["runtimeConfig"] == config and view["valid"] is True

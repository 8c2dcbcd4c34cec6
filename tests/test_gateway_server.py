"""clawlet as an OpenClaw gateway: a real uvicorn server, a real ``websockets`` client, and every
frame either side sends checked against ``@openclaw/gateway-protocol``'s JSON Schema.

Frames sent on purpose to be invalid (bad JSON, wrong params) go out through ``send_raw`` and
are the only ones not validated; everything the server answers is validated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from clawlet.config import Settings
from clawlet.gateway import protocol
from clawlet.gateway.protocol import request_frame
from clawlet.gateway.server import GatewayServer, session_id_for, stable_session_id
from clawlet.services import Workspaces, build_services
from clawlet.sessions.store import TranscriptStore
from tests.conftest import LiveServer, free_port
from tests.support.gateway_schema import ProtocolSchema

READ = "operator.read"
WRITE = "operator.write"
APPROVALS = "operator.approvals"
QUESTIONS = "operator.questions"
TIMEOUT = 10.0
LONG_MESSAGE = " ".join(f"word{i}" for i in range(80))  # the demo echoes it: a long, slow reply


#: Definitions of ``@openclaw/gateway-protocol`` for the approval surface, checked on every frame.
APPROVAL_PARAMS = {
    "approval.resolve": "ApprovalResolveParams",
    "approval.get": "ApprovalGetParams",
    "exec.approval.resolve": "ExecApprovalResolveParams",
    "plugin.approval.resolve": "PluginApprovalResolveParams",
    "question.resolve": "QuestionResolveParams",
}
APPROVAL_RESULTS = {
    "approval.resolve": "ApprovalResolveResult",
    "approval.get": "ApprovalGetResult",
    "question.resolve": "QuestionResolveResult",
}
APPROVAL_EVENT_PAYLOADS = {
    "session.approval": "SessionApprovalEvent",
    "question.requested": "QuestionRecord",
    "question.resolved": "QuestionResolvedEvent",
}


def connect_params(
    *,
    low: int = 3,
    high: int = 4,
    scopes: tuple[str, ...] = (READ, WRITE),
    caps: tuple[str, ...] = (),
    token: str | None = None,
    client_id: str = "gateway-client",
    mode: str = "backend",
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "minProtocol": low,
        "maxProtocol": high,
        "client": {"id": client_id, "version": "1.0.0", "platform": "linux", "mode": mode},
        "role": "operator",
        "scopes": list(scopes),
    }
    if caps:
        params["caps"] = list(caps)
    if token is not None:
        params["auth"] = {"token": token}
    return params


class Client:
    """A gateway client that validates every frame and checks the per-connection event ``seq``."""

    def __init__(self, ws: ClientConnection, schema: ProtocolSchema, protocol: int = 4) -> None:
        self.ws = ws
        self.schema = schema
        self.protocol = protocol
        self.pending: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self.last_seq = 0
        self.validated = 0

    def check(self, frame: dict[str, Any], method: str | None = None) -> None:
        self.validated += self.schema.assert_frames_valid([(frame, method)], protocol=self.protocol)
        # approval frames too (the shared checker knows the chat surface only)
        name = None
        if frame.get("type") == "req":
            name, instance = APPROVAL_PARAMS.get(str(frame.get("method"))), frame.get("params", {})
        elif frame.get("type") == "res" and frame.get("ok"):
            name, instance = APPROVAL_RESULTS.get(method or ""), frame.get("payload")
        elif frame.get("type") == "event":
            name, instance = APPROVAL_EVENT_PAYLOADS.get(str(frame.get("event"))), frame.get("payload")
        if name:
            problems = self.schema.errors(name, instance)
            assert not problems, f"{name} violated: {problems}\n    in {json.dumps(frame)[:600]}"

    async def send(self, frame: dict[str, Any]) -> None:
        self.check(frame)
        await self.ws.send(json.dumps(frame))

    async def send_raw(self, text: str) -> None:
        await self.ws.send(text)

    async def receive(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        text = await asyncio.wait_for(self.ws.recv(), timeout)
        frame = json.loads(text)
        method = self.pending.pop(frame.get("id"), None) if frame.get("type") == "res" else None
        self.check(frame, method)
        if frame.get("type") == "event" and frame.get("event") != "connect.challenge":
            assert frame.get("seq") == self.last_seq + 1, f"event seq gap: {frame}"
            self.last_seq = frame["seq"]
        return frame

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, raw: bool = False
    ) -> dict[str, Any]:
        request_id = uuid.uuid4().hex
        self.pending[request_id] = method
        frame = request_frame(request_id, method, params)
        if raw:
            await self.send_raw(json.dumps(frame))
        else:
            await self.send(frame)
        return await self.response(request_id)

    async def response(self, request_id: str = "unknown") -> dict[str, Any]:
        while True:
            frame = await self.receive()
            if frame["type"] == "res" and frame["id"] == request_id:
                return frame
            assert frame["type"] == "event", frame
            self.events.append(frame)

    async def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        frame = await self.request(method, params)
        assert frame["ok"] is True, frame
        payload: dict[str, Any] = frame["payload"]
        return payload

    async def event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        for index, frame in enumerate(self.events):
            if predicate(frame):
                return self.events.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            frame = await self.receive(max(0.01, deadline - time.monotonic()))
            if frame["type"] == "event" and predicate(frame):
                return frame
            self.events.append(frame)

    async def run_events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's ``chat`` payloads up to and including its final, aborted or error one."""
        payloads = []
        while True:
            frame = await self.event(lambda f: f["event"] == "chat" and f["payload"]["runId"] == run_id)
            payloads.append(frame["payload"])
            if frame["payload"]["state"] != "delta":
                return payloads

    def tool_events(self, run_id: str) -> list[dict[str, Any]]:
        return [
            f["payload"] for f in self.events if f["event"] == "agent" and f["payload"]["runId"] == run_id
        ]


def ws_url(server: LiveServer, path: str = "/gateway") -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


async def challenge(client: Client) -> dict[str, Any]:
    frame = await client.receive()
    assert frame["event"] == "connect.challenge" and "seq" not in frame
    assert uuid.UUID(frame["payload"]["nonce"]) and frame["payload"]["ts"] > 0
    return frame


@asynccontextmanager
async def raw_client(
    server: LiveServer, schema: ProtocolSchema, protocol: int = 4, path: str = "/gateway"
) -> AsyncIterator[Client]:
    async with connect(ws_url(server, path), open_timeout=TIMEOUT) as ws:
        client = Client(ws, schema, protocol)
        await challenge(client)
        yield client


@asynccontextmanager
async def gateway(
    server: LiveServer, schema: ProtocolSchema, protocol: int = 4, path: str = "/gateway", **params: Any
) -> AsyncIterator[Client]:
    async with raw_client(server, schema, protocol, path) as client:
        hello = await client.ok("connect", connect_params(**params))
        assert hello["type"] == "hello-ok" and hello["protocol"] == protocol
        yield client


async def closed_with(client: Client) -> int | None:
    with pytest.raises(ConnectionClosed):
        while True:
            await client.receive()
    return client.ws.close_code


def transcript(settings: Settings, session_id: str, workspace: str | None = None) -> list[dict[str, Any]]:
    root = settings.workspaces_root / workspace / "sessions" if workspace else settings.paths.sessions
    return [dict(m) for m in TranscriptStore(root).load_messages(session_id)]


def text_of(payload: dict[str, Any]) -> str:
    return "".join(part["text"] for part in payload["message"]["content"])


# -- handshake -----------------------------------------------------------------------------------


async def test_v4_handshake_hello_and_read_methods(server: LiveServer, schema: ProtocolSchema) -> None:
    async with raw_client(server, schema) as client:
        hello = await client.ok("connect", connect_params(client_id="cli", mode="cli"))
        assert hello["protocol"] == 4
        assert hello["auth"] == {"role": "operator", "scopes": [READ, WRITE]}
        assert hello["snapshot"]["sessionDefaults"]["mainSessionKey"] == "agent:main:main"
        assert {"chat.send", "chat.abort", "chat.history", "sessions.list"} <= set(
            hello["features"]["methods"]
        )
        assert hello["policy"]["tickIntervalMs"] == 30_000

        agents = await client.ok("agents.list", {})
        assert agents["defaultId"] == "main" and agents["agents"][0]["id"] == "main"
        models = await client.ok("models.list", {})
        assert models["models"] == [
            {"id": "demo", "name": "demo (offline demo model, no LLM)", "provider": "demo"}
        ]
        health = await client.ok("health", {})
        assert health["ok"] is True and health["sessions"]["count"] == 0
        health_schema = schema.definitions["HelloOk"]["properties"]["snapshot"]["properties"]["health"]
        assert not schema_errors(schema, health_schema, health)
        sessions = await client.ok("sessions.list", {})
        assert sessions["sessions"] == [] and sessions["count"] == 0
        history = await client.ok("chat.history", {"sessionKey": "agent:main:main"})
        assert history == {"sessionKey": "agent:main:main", "sessionId": "main", "messages": []}
        assert client.validated >= 8


def schema_errors(schema: ProtocolSchema, definition: dict[str, Any], instance: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator({**definition, "definitions": schema.definitions})
    return [error.message for error in validator.iter_errors(instance)]


async def test_protocol_negotiation(server: LiveServer, schema: ProtocolSchema) -> None:
    async with gateway(server, schema, protocol=3, low=3, high=3) as v3:
        assert await v3.ok("health", {})
    async with raw_client(server, schema) as client:
        reply = await client.request("connect", connect_params(low=5, high=6))
        assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST"
        assert reply["error"]["details"] == {
            "code": "PROTOCOL_MISMATCH",
            "clientMinProtocol": 5,
            "clientMaxProtocol": 6,
            "expectedProtocol": 4,
        }
        assert await closed_with(client) == 1002


async def test_token_auth(live_server: Callable[..., LiveServer], schema: ProtocolSchema) -> None:
    server = live_server(Settings(gateway_token="gw-secret"))
    for token, detail in (
        (None, "AUTH_TOKEN_MISSING"),
        ("", "AUTH_TOKEN_MISSING"),
        ("nope", "AUTH_TOKEN_MISMATCH"),
    ):
        async with raw_client(server, schema) as client:
            reply = await client.request("connect", connect_params(token=token))
            assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST"
            assert reply["error"]["details"] == {"code": detail}
            assert reply["error"]["message"].startswith("unauthorized: gateway token")
            assert await closed_with(client) == 1008
    async with gateway(server, schema, token="gw-secret") as client:
        hello_again = await client.request("connect", connect_params(token="gw-secret"))
        assert hello_again["ok"] is False  # connect happens once per connection
        assert await client.ok("health", {})


async def test_handshake_refusals(server: LiveServer, schema: ProtocolSchema) -> None:
    async with raw_client(server, schema) as client:  # the first request must be connect
        reply = await client.request("health", {})
        assert reply["ok"] is False and "first request must be connect" in reply["error"]["message"]
        assert await closed_with(client) == 1008
    async with raw_client(server, schema) as client:  # pre-connect frames are capped at 64 KiB
        params = connect_params()
        params["client"]["displayName"] = "x" * (65 * 1024)
        await client.send_raw(json.dumps(request_frame("big", "connect", params)))
        reply = await client.response()
        assert reply["ok"] is False and reply["id"] == "unknown" and "exceeds" in reply["error"]["message"]
        assert await closed_with(client) == 1009
    for bad in (
        {"role": "node"},
        {"client": {"id": "not-a-client", "version": "1", "platform": "linux", "mode": "cli"}},
        {"minProtocol": "3"},
    ):
        async with raw_client(server, schema) as client:
            reply = await client.request("connect", {**connect_params(), **bad}, raw=True)
            assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST", bad
            assert await closed_with(client) == 1008
    # A page from another site may not drive the agents through a browser when no token is set.
    with pytest.raises(InvalidStatus):
        async with connect(ws_url(server), origin="http://evil.example"):
            pass
    async with connect(ws_url(server), origin=f"http://127.0.0.1:{server.port}") as ws:
        assert json.loads(await ws.recv())["event"] == "connect.challenge"


async def test_bad_frames_after_connect_keep_the_connection(
    server: LiveServer, schema: ProtocolSchema
) -> None:
    async with gateway(server, schema) as client:
        for text in ("{not json", "[1, 2]", '"text"', '{"type": "hello"}'):
            await client.send_raw(text)
            reply = await client.response("unknown")
            assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST"
        await client.send_raw(json.dumps({"type": "event", "event": "x", "id": "ev1"}))
        assert (await client.response("ev1"))["error"]["code"] == "INVALID_REQUEST"

        unknown = await client.request("does.not.exist", {}, raw=True)
        assert unknown["error"] == {"code": "INVALID_REQUEST", "message": "unknown method: does.not.exist"}
        for method, params in (
            ("chat.send", {"message": "hi", "idempotencyKey": "k"}),
            ("chat.send", {"sessionKey": "agent:main:main", "message": 3, "idempotencyKey": "k"}),
            ("chat.send", {"sessionKey": "agent:main:main", "message": " ", "idempotencyKey": "k"}),
            ("chat.send", {"sessionKey": "agent:main:main", "message": "hi"}),
            ("chat.history", {"sessionKey": "agent:main:main", "limit": "ten"}),
            ("chat.history", {"sessionKey": 7}),
            ("chat.abort", {}),
            ("sessions.list", {"limit": 0}),
        ):
            reply = await client.request(method, params, raw=True)
            assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST", (method, params)
        await client.send_raw(json.dumps({"type": "req", "id": "p", "method": "health", "params": [1]}))
        assert (await client.response("p"))["error"]["code"] == "INVALID_REQUEST"
        assert (await client.ok("health", {}))["ok"] is True  # still usable


async def test_missing_scope_is_forbidden(server: LiveServer, schema: ProtocolSchema) -> None:
    async with gateway(server, schema, scopes=(READ,)) as reader:
        reply = await reader.request(
            "chat.send", {"sessionKey": "agent:main:main", "message": "hi", "idempotencyKey": "k1"}
        )
        assert reply["error"]["code"] == "FORBIDDEN"
        assert reply["error"]["details"] == {
            "code": "MISSING_SCOPE",
            "missingScope": WRITE,
            "requiredScopes": [WRITE],
        }
        assert await reader.ok("sessions.list", {})
    async with gateway(server, schema, scopes=()) as nobody:
        assert (await nobody.request("health", {}))["error"]["details"]["missingScope"] == READ
    async with gateway(server, schema, scopes=("operator.admin",)) as admin:
        assert await admin.ok("health", {})


async def test_tick_events(live_server: Callable[..., LiveServer], schema: ProtocolSchema) -> None:
    server = live_server(Settings(gateway_tick_interval_ms=50))
    async with gateway(server, schema) as client:
        first = await client.event(lambda f: f["event"] == "tick", timeout=30)
        second = await client.event(lambda f: f["event"] == "tick", timeout=30)
        assert second["seq"] == first["seq"] + 1 and second["payload"]["ts"] >= first["payload"]["ts"]


# -- chat ----------------------------------------------------------------------------------------


async def test_chat_streams_to_v4_and_v3_clients(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(demo_token_delay=0.01)
    async with gateway(server, schema) as v4, gateway(server, schema, protocol=3, high=3) as v3:
        params = {"sessionKey": "agent:main:main", "message": "hello gateway", "idempotencyKey": "run-1"}
        assert await v4.ok("chat.send", params) == {"runId": "run-1", "status": "started"}
        new_events = await v4.run_events("run-1")
        old_events = await v3.run_events("run-1")

        for events in (new_events, old_events):
            deltas, final = events[:-1], events[-1]
            assert len(deltas) >= 2
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            texts = [text_of(e) for e in deltas]
            assert all(
                later.startswith(earlier) and later != earlier for earlier, later in itertools.pairwise(texts)
            )
            assert final["state"] == "final" and final["stopReason"] == "stop"
            assert all(e["sessionKey"] == "agent:main:main" and e["agentId"] == "main" for e in events)
        assert "".join(e["deltaText"] for e in new_events[:-1]) == text_of(new_events[-1])
        assert all("deltaText" not in e for e in old_events)

        reply = text_of(new_events[-1])
        assert "hello gateway" in reply
        stored = transcript(settings, "main")
        assert [m["role"] for m in stored] == ["user", "assistant"]
        assert stored[0]["content"] == "hello gateway" and stored[1]["content"] == reply

        # The same idempotency key again: acknowledged, no second run.
        assert await v4.ok("chat.send", params) == {"runId": "run-1", "status": "ok"}
        assert len(transcript(settings, "main")) == 2

        history = await v3.ok("chat.history", {"sessionKey": "agent:main:main", "limit": 1})
        assert history["sessionId"] == "main"
        [last] = history["messages"]
        assert last["role"] == "assistant" and last["content"] == [{"type": "text", "text": reply}]
        full = await v3.ok("chat.history", {"sessionKey": "agent:main:main"})
        assert [m["role"] for m in full["messages"]] == ["user", "assistant"]
        assert full["messages"][0]["timestamp"] <= full["messages"][1]["timestamp"]

        listed = await v4.ok("sessions.list", {})
        assert [row["key"] for row in listed["sessions"]] == ["agent:main:main"]
        row = listed["sessions"][0]
        assert row["sessionId"] == "main" and row["isMain"] is True and row["updatedAt"] > 0
        assert not schema_errors(schema, {"$ref": "#/definitions/SessionRow"}, row)


async def test_a_chat_event_is_encoded_once_for_every_client(
    live_server: Callable[..., LiveServer], schema: ProtocolSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fan-out: each ``chat`` event is encoded once per protocol version, not once per client; every
    client still gets it with its own ``seq``."""
    encoded: list[str] = []
    encode = protocol.encode

    def counting_encode(frame: dict[str, Any]) -> str:
        if frame.get("event") == "chat":
            encoded.append(frame["payload"]["state"])
        return encode(frame)

    monkeypatch.setattr(protocol, "encode", counting_encode)  # what EncodedEvent.of encodes with
    server = live_server(demo_token_delay=0.01)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(gateway(server, schema)) for _ in range(3)]
        clients.append(await stack.enter_async_context(gateway(server, schema, protocol=3, high=3)))
        params = {"sessionKey": "agent:main:main", "message": "hello fan-out", "idempotencyKey": "run-f"}
        assert await clients[0].ok("chat.send", params) == {"runId": "run-f", "status": "started"}
        runs = [await client.run_events("run-f") for client in clients]
    assert runs[0] == runs[1] == runs[2]  # each frame's own seq was checked as it arrived
    assert [e["seq"] for e in runs[3]] == [e["seq"] for e in runs[0]]  # the v3 form: same events
    assert len(encoded) == 2 * len(runs[0])  # the v4 form and the v3 form of each event


def test_an_encoded_event_is_the_frame_it_stands_for() -> None:
    for payload in ({"text": "plain"}, {"text": "é 中文 🦀"}, {"text": "lone \ud800"}, None):
        encoded = protocol.EncodedEvent.of("chat", payload)
        for seq in (1, 42, 1234567):
            text, size = encoded.with_seq(seq)
            assert text == protocol.encode(protocol.event_frame("chat", payload, seq=seq))
            assert size == protocol.frame_size(text)


@pytest.mark.slow
async def test_busy_session_is_unavailable_and_abort_keeps_partial_text(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(demo_token_delay=0.03)
    async with gateway(server, schema) as client:
        key = "agent:main:slow"
        await client.ok("chat.send", {"sessionKey": key, "message": LONG_MESSAGE, "idempotencyKey": "slow-1"})
        await client.event(lambda f: f["event"] == "chat" and f["payload"]["state"] == "delta")
        busy = await client.request(
            "chat.send", {"sessionKey": key, "message": "again", "idempotencyKey": "slow-2"}
        )
        assert busy["error"]["code"] == "UNAVAILABLE" and busy["error"]["retryable"] is True

        assert await client.ok("chat.abort", {"sessionKey": key, "runId": "slow-1"}) == {
            "ok": True,
            "aborted": True,
            "runIds": ["slow-1"],
        }
        events = await client.run_events("slow-1")
        aborted = events[-1]
        assert aborted["state"] == "aborted" and aborted["stopReason"] == "rpc"
        partial = text_of(aborted)
        assert partial and len(partial) < 300 and LONG_MESSAGE not in partial
        assert transcript(settings, "slow")[-1] == {"role": "assistant", "content": partial}

        nothing = await client.ok("chat.abort", {"sessionKey": key})
        assert nothing == {"ok": True, "aborted": False, "runIds": []}
        # The key that was refused as busy was not remembered: it starts a run now.
        again = await client.ok(
            "chat.send", {"sessionKey": key, "message": "again", "idempotencyKey": "slow-2"}
        )
        assert again["status"] == "started"
        assert (await client.run_events("slow-2"))[-1]["state"] == "final"


@pytest.mark.slow
async def test_tool_events_only_for_connections_with_the_cap(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server()
    async with gateway(server, schema, caps=("tool-events",)) as tools, gateway(server, schema) as plain:
        await plain.ok(
            "chat.send", {"sessionKey": "agent:main:t", "message": "run: echo hi", "idempotencyKey": "t1"}
        )
        final = (await tools.run_events("t1"))[-1]
        events = await plain.run_events("t1")
        assert events[-1] == final
        # the text after the tool is a new segment: joined with a blank line, in deltas as in final
        assert "".join(e["deltaText"] for e in events[:-1]) == text_of(events[-2]) == text_of(final)
        assert plain.tool_events("t1") == []
        start, result = tools.tool_events("t1")
        assert start["stream"] == "tool" and start["seq"] == 1 and result["seq"] == 2
        assert start["data"]["phase"] == "start" and start["data"]["name"] == "terminal"
        assert start["data"]["args"] == {"input": "echo hi"}
        assert result["data"]["phase"] == "result"
        assert result["data"]["result"]["content"][0]["text"].strip() == "hi"
        assert result["data"]["isError"] is False
        assert start["data"]["toolCallId"] == result["data"]["toolCallId"]
        segments = [
            m["content"] for m in transcript(settings, "t") if m["role"] == "assistant" and m["content"]
        ]
        assert len(segments) == 2 and text_of(final) == "\n\n".join(segments)


async def test_agents_and_session_keys(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server()
    server.app.state.gateway.list_agents = lambda: [
        {"id": "main", "name": "Main"},
        {"id": "travel", "name": "Travel planner", "model": "deepseek/deepseek-chat"},
        {"id": "", "name": "dropped"},
    ]
    async with gateway(server, schema) as client:
        agents = await client.ok("agents.list", {})
        assert agents["agents"] == [
            {"id": "main", "name": "Main"},
            {"id": "travel", "name": "Travel planner", "model": {"primary": "deepseek/deepseek-chat"}},
        ]
        unknown = await client.request(
            "chat.send", {"sessionKey": "agent:ghost:main", "message": "hi", "idempotencyKey": "g"}
        )
        assert unknown["error"]["code"] == "INVALID_REQUEST"
        assert unknown["error"]["details"] == {"code": "UNKNOWN_AGENT_ID", "agentId": "ghost"}

        key = "agent:Travel:INBOX-01J9ZX"  # keys are lower-cased, as the gateway does
        await client.ok("chat.send", {"sessionKey": key, "message": "plan a trip", "idempotencyKey": "tr1"})
        final = (await client.run_events("tr1"))[-1]
        assert final["sessionKey"] == "agent:travel:inbox-01j9zx" and final["agentId"] == "travel"
        stored = transcript(settings, "inbox-01j9zx", workspace="travel")
        assert stored[-1]["content"] == text_of(final)
        assert not settings.paths.sessions.joinpath("inbox-01j9zx.json").exists()

        odd = "agent:main:discord:channel/42"  # not a valid transcript id: a stable hash names it
        await client.ok("chat.send", {"sessionKey": odd, "message": "hey", "idempotencyKey": "d1"})
        await client.run_events("d1")
        history = await client.ok("chat.history", {"sessionKey": odd})
        assert history["sessionId"] == stable_session_id("discord:channel/42")
        assert len(history["messages"]) == 2

        rows = (await client.ok("sessions.list", {}))["sessions"]
        keys = {row["key"] for row in rows}
        assert "agent:travel:inbox-01j9zx" in keys and f"agent:main:{history['sessionId']}" in keys
        only = (await client.ok("sessions.list", {"agentId": "travel"}))["sessions"]
        assert [row["agentId"] for row in only] == ["travel"]


def test_session_ids_from_keys() -> None:
    assert session_id_for("main") == "main"
    assert session_id_for("inbox-01j9zx") == "inbox-01j9zx"
    for odd in ("a/b", "../x", "x" * 200, "with space"):
        assert session_id_for(odd) == stable_session_id(odd) and session_id_for(odd).startswith("gw-")
    assert stable_session_id("a/b") != stable_session_id("a/c")


async def test_client_disconnect_mid_run(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(demo_token_delay=0.01)
    async with gateway(server, schema) as watcher:
        async with gateway(server, schema) as sender:
            await sender.ok(
                "chat.send", {"sessionKey": "agent:main:gone", "message": "bye now", "idempotencyKey": "g1"}
            )
            await sender.event(lambda f: f["event"] == "chat" and f["payload"]["state"] == "delta")
        # the sender is gone; the run goes on and the watcher still sees it end
        final = (await watcher.run_events("g1"))[-1]
        assert final["state"] == "final"
        assert transcript(settings, "gone")[-1]["content"] == text_of(final)
        deadline = time.monotonic() + TIMEOUT
        while len(server.app.state.gateway.connections) != 1:  # the sender's connection is cleaned up
            assert time.monotonic() < deadline, server.app.state.gateway.connections
            await asyncio.sleep(0.02)
    async with gateway(server, schema) as later:
        assert (await later.ok("chat.history", {"sessionKey": "agent:main:gone"}))["messages"]


# -- approvals -----------------------------------------------------------------------------------

APPROVER: dict[str, Any] = {"scopes": (READ, WRITE, APPROVALS), "caps": ("approvals", "tool-events")}
APPEND = "run: echo once >> workspace/side.txt && wc -l < workspace/side.txt"
NOBODY = "Nobody who can answer approval requests is connected"


def set_policies(server: LiveServer, policies: dict[str, str]) -> None:
    response = httpx.put(f"{server.url}/api/config/tool-approvals", json={"policies": policies}, timeout=30)
    assert response.status_code == 200, response.text


def named(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda frame: frame["event"] == name


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def drained(client: Client) -> list[str]:
    """The names of every event the client has received so far (a round trip flushes them)."""
    await client.ok("health", {})
    return [frame["event"] for frame in client.events]


async def test_approve_runs_the_tool_once_and_the_reply_arrives(
    server: LiveServer, settings: Settings, schema: ProtocolSchema
) -> None:
    set_policies(server, {"terminal": "ask"})
    side = settings.paths.workspace / "side.txt"
    async with raw_client(server, schema) as approver, gateway(server, schema) as plain:
        hello = await approver.ok("connect", connect_params(**APPROVER))
        assert hello["auth"]["scopes"] == [READ, WRITE, APPROVALS]
        assert {"approval.resolve", "exec.approval.resolve", "question.resolve"} <= set(
            hello["features"]["methods"]
        )
        assert {"session.approval", "exec.approval.requested"} <= set(hello["features"]["events"])

        await approver.ok(
            "chat.send", {"sessionKey": "agent:main:ap1", "message": APPEND, "idempotencyKey": "ap1"}
        )
        pending = (await approver.event(named("session.approval")))["payload"]
        approval = pending["approval"]
        assert pending["phase"] == "pending" and pending["sessionKey"] == "agent:main:ap1"
        assert approval["status"] == "pending" and approval["expiresAtMs"] > approval["createdAtMs"]
        assert approval["presentation"] == {
            "kind": "exec",
            "commandText": APPEND[5:],
            "host": "gateway",
            "agentId": "main",
            "allowedDecisions": ["allow-once", "deny"],
        }
        classic = (await approver.event(named("exec.approval.requested")))["payload"]
        assert classic["id"] == approval["id"] and classic["expiresAtMs"] == approval["expiresAtMs"]
        assert classic["request"] == {
            "command": APPEND[5:],
            "host": "gateway",
            "agentId": "main",
            "sessionKey": "agent:main:ap1",
        }
        assert not side.exists(), "the tool ran before it was approved"
        assert (await approver.ok("approval.get", {"id": approval["id"]}))["approval"] == approval

        resolved = await approver.ok(
            "approval.resolve", {"id": approval["id"], "kind": "exec", "decision": "allow-once"}
        )
        assert resolved["applied"] is True
        assert {k: resolved["approval"][k] for k in ("status", "decision", "reason")} == {
            "status": "allowed",
            "decision": "allow-once",
            "reason": "user",
        }
        events = await approver.run_events("ap1")
        final = events[-1]
        assert final["state"] == "final" and [e["seq"] for e in events] == list(range(1, len(events) + 1))
        reply = text_of(final)
        assert reply.startswith(f"Running `{APPEND[5:]}` in the terminal.\n\n[demo] `terminal` returned:")
        assert "".join(e["deltaText"] for e in events[:-1]) == reply
        assert lines_of(side) == ["once"]

        terminal = (await approver.event(named("session.approval")))["payload"]
        assert terminal["phase"] == "terminal" and terminal["approval"] == resolved["approval"]
        done = (await approver.event(named("exec.approval.resolved")))["payload"]
        assert done["id"] == approval["id"] and done["decision"] == "allow-once"
        start, result = approver.tool_events("ap1")
        assert start["data"]["phase"] == "start" and result["data"]["phase"] == "result"
        assert start["data"]["toolCallId"] == result["data"]["toolCallId"]
        assert result["data"]["result"]["content"][0]["text"].strip() == "1"

        # the first answer wins; the tool never runs twice
        again = await approver.ok(
            "approval.resolve", {"id": approval["id"], "kind": "exec", "decision": "deny"}
        )
        assert again == {"applied": False, "approval": resolved["approval"]}
        classic_again = await approver.request(
            "exec.approval.resolve", {"id": approval["id"], "decision": "deny"}
        )
        assert classic_again["error"]["code"] == "APPROVAL_NOT_FOUND"
        assert lines_of(side) == ["once"]

        # a reader without the capability saw the same chat stream and no approval
        assert (await plain.run_events("ap1"))[-1] == final
        assert set(await drained(plain)) <= {"chat", "tick"}
        assert transcript(settings, "ap1")[-1]["content"] == reply.split("\n\n", 1)[1]


async def test_deny_and_the_tool_never_runs(
    server: LiveServer, settings: Settings, schema: ProtocolSchema
) -> None:
    set_policies(server, {"terminal": "ask"})
    target = settings.paths.workspace / "denied.txt"
    # the exec-only capability of classic exec approval clients
    async with gateway(server, schema, scopes=(READ, WRITE, APPROVALS), caps=("exec-approvals",)) as approver:
        await approver.ok(
            "chat.send",
            {
                "sessionKey": "agent:main:dn1",
                "message": "run: echo no > workspace/denied.txt",
                "idempotencyKey": "dn1",
            },
        )
        requested = (await approver.event(named("exec.approval.requested")))["payload"]
        bad = await approver.request("exec.approval.resolve", {"id": requested["id"], "decision": "maybe"})
        assert bad["error"]["code"] == "INVALID_REQUEST"
        unknown = await approver.request(
            "approval.resolve", {"id": "no-such-id", "kind": "exec", "decision": "allow-once"}
        )
        assert unknown["error"]["code"] == "APPROVAL_NOT_FOUND"
        wrong_kind = await approver.request(
            "approval.resolve", {"id": requested["id"], "kind": "plugin", "decision": "allow-once"}
        )
        assert wrong_kind["error"]["code"] == "APPROVAL_NOT_FOUND"
        assert await approver.ok("exec.approval.resolve", {"id": requested["id"], "decision": "deny"}) == {
            "ok": True
        }
        final = (await approver.run_events("dn1"))[-1]
        assert final["state"] == "final" and "reported an error" in text_of(final)
        assert not target.exists()
        denied = [f["payload"] for f in approver.events if f["event"] == "session.approval"][-1]
        assert denied["phase"] == "terminal"
        assert {k: denied["approval"][k] for k in ("status", "decision", "reason")} == {
            "status": "denied",
            "decision": "deny",
            "reason": "user",
        }
        done = (await approver.event(named("exec.approval.resolved")))["payload"]
        assert done["id"] == requested["id"] and done["decision"] == "deny"
        late = await approver.request(
            "exec.approval.resolve", {"id": requested["id"], "decision": "allow-once"}
        )
        assert late["error"]["code"] == "APPROVAL_NOT_FOUND"
        assert not target.exists()
        [call] = transcript(settings, "dn1")[1]["tool_calls"]
        assert call["tool"] == "terminal" and call["output"]


async def test_other_tools_ask_as_plugin_approvals(server: LiveServer, schema: ProtocolSchema) -> None:
    set_policies(server, {"python_repl": "ask"})
    async with gateway(server, schema, **APPROVER) as approver:
        await approver.ok(
            "chat.send", {"sessionKey": "agent:main:pl1", "message": "python: 6 * 7", "idempotencyKey": "pl1"}
        )
        approval = (await approver.event(named("session.approval")))["payload"]["approval"]
        presentation = approval["presentation"]
        assert presentation["kind"] == "plugin" and presentation["toolName"] == "python_repl"
        assert presentation["title"] == "Run python_repl?" and "6 * 7" in presentation["detail"]
        requested = (await approver.event(named("plugin.approval.requested")))["payload"]
        assert requested["id"] == approval["id"] and requested["request"]["toolName"] == "python_repl"
        assert await approver.ok(
            "plugin.approval.resolve", {"id": approval["id"], "decision": "allow-once"}
        ) == {"ok": True}
        final = (await approver.run_events("pl1"))[-1]
        assert final["state"] == "final" and "42" in text_of(final)
        done = (await approver.event(named("plugin.approval.resolved")))["payload"]
        assert done["id"] == approval["id"] and done["decision"] == "allow-once"


async def test_clients_without_the_capability_have_ask_tools_refused(
    server: LiveServer, settings: Settings, schema: ProtocolSchema
) -> None:
    set_policies(server, {"terminal": "ask"})
    async with gateway(server, schema, **APPROVER) as approver:
        for key, params in (
            ("nc1", {"scopes": (READ, WRITE, APPROVALS)}),  # the scope without the capability
            ("nc2", {"scopes": (READ, WRITE), "caps": ("approvals",)}),  # the capability without the scope
            ("nc3", {}),
        ):
            async with gateway(server, schema, **params) as client:
                await client.ok(
                    "chat.send",
                    {
                        "sessionKey": f"agent:main:{key}",
                        "message": f"run: echo x > workspace/{key}.txt",
                        "idempotencyKey": key,
                    },
                )
                final = (await client.run_events(key))[-1]
                assert final["state"] == "final" and "not available" in text_of(final)  # not offered
                assert not (settings.paths.workspace / f"{key}.txt").exists()
                assert not [name for name in await drained(client) if "approval" in name]
        # the approver, connected all along, was asked nothing about those turns
        assert not [name for name in await drained(approver) if "approval" in name]


async def test_a_paused_run_ends_when_nobody_can_answer(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server()
    gateway_server = server.app.state.gateway
    gateway_server.approval_orphan_grace = 0.0
    gateway_server.approval_poll_interval = 0.05
    set_policies(server, {"terminal": "ask", "python_repl": "ask"})
    async with gateway(server, schema) as watcher:
        # Nobody connected answers plugin approvals (python_repl): denied at once, and said so.
        async with gateway(
            server, schema, scopes=(READ, WRITE, APPROVALS), caps=("exec-approvals",)
        ) as execs:
            await execs.ok(
                "chat.send",
                {"sessionKey": "agent:main:nr1", "message": "python: 6 * 7", "idempotencyKey": "nr1"},
            )
            final = (await execs.run_events("nr1"))[-1]
            assert final["state"] == "final" and NOBODY in text_of(final)
            # nor does anyone hold operator.questions: the agent's question is declined for it
            await execs.ok(
                "chat.send",
                {"sessionKey": "agent:main:nr1", "message": "ask: ready?", "idempotencyKey": "nq1"},
            )
            assert (await execs.run_events("nq1"))[-1]["state"] == "final"
            assert not [name for name in await drained(execs) if "approval" in name or "question" in name]

        # The only approver leaves while its approval waits: denied, and the watcher gets the end.
        async with gateway(server, schema, **APPROVER) as approver:
            await approver.ok(
                "chat.send",
                {
                    "sessionKey": "agent:main:nr2",
                    "message": "run: echo late > workspace/late.txt",
                    "idempotencyKey": "nr2",
                },
            )
            await approver.event(named("exec.approval.requested"))
        final = (await watcher.run_events("nr2"))[-1]
        assert final["state"] == "final" and NOBODY in text_of(final)
        assert not (settings.paths.workspace / "late.txt").exists()

    # Nobody answers in time: expired, denied.
    gateway_server.approval_orphan_grace = 30.0
    gateway_server.approval_timeout = 0.3
    async with gateway(server, schema, **APPROVER) as approver:
        await approver.ok(
            "chat.send",
            {
                "sessionKey": "agent:main:nr3",
                "message": "run: echo slow > workspace/slow.txt",
                "idempotencyKey": "nr3",
            },
        )
        approval_id = (await approver.event(named("exec.approval.requested")))["payload"]["id"]
        final = (await approver.run_events("nr3"))[-1]
        assert final["state"] == "final" and "in time" in text_of(final)
        expired = [f["payload"] for f in approver.events if f["event"] == "session.approval"][-1]
        assert expired["approval"]["status"] == "expired" and expired["approval"]["reason"] == "timeout"
        late = await approver.ok(
            "approval.resolve", {"id": approval_id, "kind": "exec", "decision": "allow-once"}
        )
        assert late["applied"] is False and late["approval"]["status"] == "expired"
        assert not (settings.paths.workspace / "slow.txt").exists()


async def test_abort_while_waiting_cancels_the_approval(
    server: LiveServer, settings: Settings, schema: ProtocolSchema
) -> None:
    set_policies(server, {"terminal": "ask"})
    async with gateway(server, schema, **APPROVER) as approver:
        key = "agent:main:ab1"
        await approver.ok(
            "chat.send",
            {"sessionKey": key, "message": "run: echo x > workspace/never.txt", "idempotencyKey": "ab1"},
        )
        approval_id = (await approver.event(named("exec.approval.requested")))["payload"]["id"]
        busy = await approver.request(
            "chat.send", {"sessionKey": key, "message": "again", "idempotencyKey": "ab2"}
        )
        assert busy["error"]["code"] == "UNAVAILABLE" and busy["error"].get("retryable") is not True
        # the one mapping of session refusals (api.session_errors), the pending item in its one shape
        [pending] = busy["error"]["details"]["pending"]
        assert pending["approval_id"] == approval_id and pending["kind"] == "tool" and pending["call_id"]
        assert "exec.approval.resolve" in busy["error"]["message"]
        assert await approver.ok("chat.abort", {"sessionKey": key}) == {
            "ok": True,
            "aborted": True,
            "runIds": ["ab1"],
        }
        aborted = (await approver.run_events("ab1"))[-1]
        assert aborted["state"] == "aborted" and text_of(aborted).startswith(
            "Running `echo x > workspace/never.txt`"
        )
        cancelled = [f["payload"] for f in approver.events if f["event"] == "session.approval"][-1]
        assert (
            cancelled["approval"]["status"] == "cancelled"
            and cancelled["approval"]["reason"] == "run-aborted"
        )
        late = await approver.ok(
            "approval.resolve", {"id": approval_id, "kind": "exec", "decision": "allow-once"}
        )
        assert late["applied"] is False and late["approval"]["status"] == "cancelled"
        assert not (settings.paths.workspace / "never.txt").exists()
        # the session takes messages again
        await approver.ok("chat.send", {"sessionKey": key, "message": "hello", "idempotencyKey": "ab3"})
        assert (await approver.run_events("ab3"))[-1]["state"] == "final"


async def test_the_agents_question_is_asked_and_answered(server: LiveServer, schema: ProtocolSchema) -> None:
    async with gateway(
        server, schema, scopes=(READ, WRITE, APPROVALS, QUESTIONS), caps=("approvals",)
    ) as client:
        await client.ok(
            "chat.send",
            {
                "sessionKey": "agent:main:q1",
                "message": "ask: which colour do you like?",
                "idempotencyKey": "q1",
            },
        )
        record = (await client.event(named("question.requested")))["payload"]
        assert (
            record["status"] == "pending"
            and record["sessionKey"] == "agent:main:q1"
            and record["runId"] == "q1"
        )
        [question] = record["questions"]
        assert question["question"] == "which colour do you like?" and question["questionId"] == "answer"
        answers = {"answers": {"answer": ["blue"]}}
        empty = await client.request(
            "question.resolve", {"id": record["id"], "answers": {"answers": {"answer": [" "]}}}
        )
        assert empty["error"]["code"] == "INVALID_REQUEST"
        result = await client.ok("question.resolve", {"id": record["id"], "answers": answers})
        assert result == {"status": "answered", "answers": answers}
        final = (await client.run_events("q1"))[-1]
        assert final["state"] == "final" and "You answered: blue" in text_of(final)
        resolved = (await client.event(named("question.resolved")))["payload"]
        assert resolved == {"id": record["id"], "status": "answered", "answers": answers}

        # declined
        await client.ok(
            "chat.send",
            {"sessionKey": "agent:main:q1", "message": "ask: and your name?", "idempotencyKey": "q2"},
        )
        record = (await client.event(named("question.requested")))["payload"]
        assert await client.ok("question.resolve", {"id": record["id"], "cancel": True}) == {
            "status": "cancelled"
        }
        assert (await client.run_events("q2"))[-1]["state"] == "final"
        assert (await client.event(named("question.resolved")))["payload"] == {
            "id": record["id"],
            "status": "cancelled",
        }


# -- serving -------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_serve_with_a_gateway_port(clawlet_home: Path, schema: ProtocolSchema) -> None:
    port, gateway_port = free_port(), free_port()
    env = {**os.environ, "CLAWLET_HOME": str(clawlet_home), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "clawlet", "serve", "--port", str(port), "--gateway-port", str(gateway_port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        fake = LiveServer.__new__(LiveServer)
        deadline = time.monotonic() + 30
        for target in (gateway_port, port):
            fake.port = target
            while True:
                try:
                    async with gateway(fake, schema, path="/" if target == gateway_port else "/gateway") as c:
                        assert (await c.ok("health", {}))["ok"] is True
                    break
                except OSError:
                    assert process.poll() is None and time.monotonic() < deadline, (
                        "clawlet serve did not start"
                    )
                    await asyncio.sleep(0.1)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=20)
        assert process.returncode == 0, output
        assert (
            f"ws://127.0.0.1:{port}/gateway" in output and f"ws://127.0.0.1:{gateway_port}/gateway" in output
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- the transport-neutral server ----------------------------------------------------------------


class MemoryTransport:
    """An in-memory transport: frames the test feeds in, frames the server sent, how it closed."""

    def __init__(self, *, fail_sends: bool = False, stall_sends: bool = False) -> None:
        self.incoming: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self.fail_sends = fail_sends
        self.stall_sends = stall_sends
        self.arrived = asyncio.Event()

    async def send_text(self, text: str) -> None:
        if self.fail_sends and self.sent:
            raise ConnectionResetError("peer vanished")
        if self.stall_sends:
            await asyncio.Event().wait()
        self.sent.append(json.loads(text))
        self.arrived.set()

    async def receive_text(self) -> str | None:
        return await self.incoming.get()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)
        self.incoming.put_nowait(None)

    def feed(self, method: str, params: dict[str, Any], request_id: str | None = None) -> str:
        request_id = request_id or uuid.uuid4().hex
        self.incoming.put_nowait(json.dumps(request_frame(request_id, method, params)))
        return request_id

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while True:
            for frame in self.sent:
                if predicate(frame):
                    return frame
            assert time.monotonic() < deadline, f"no matching frame in {self.sent}"
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), 0.2)


async def test_broken_and_slow_peers_never_break_a_run(settings: Settings, schema: ProtocolSchema) -> None:
    workspaces = Workspaces(build_services(settings))
    # A burst (a delta and the final, each with the whole reply) fits; a peer that reads nothing
    # while several runs stream falls behind by more and is dropped.
    server = GatewayServer(settings, workspaces, max_buffered_bytes=8000)
    good, broken, slow = (
        MemoryTransport(),
        MemoryTransport(fail_sends=True),
        MemoryTransport(stall_sends=True),
    )
    tasks = [asyncio.create_task(server.handle(t, remote="test")) for t in (good, broken, slow)]
    for transport in (good, broken, slow):
        transport.feed("connect", connect_params(), "c1")
    await good.wait_for(lambda f: f.get("id") == "c1")
    for number in range(4):
        key = f"agent:main:s{number}"
        good.feed("chat.send", {"sessionKey": key, "message": LONG_MESSAGE, "idempotencyKey": f"m{number}"})
        final = await good.wait_for(
            lambda f, key=key: (
                f.get("event") == "chat"
                and f["payload"]["sessionKey"] == key
                and f["payload"]["state"] == "final"
            )
        )
        assert LONG_MESSAGE in text_of(final["payload"])
    assert slow.closed == (1008, "slow consumer")
    stability = server.stability.snapshot({})  # what `openclaw gateway stability` shows
    assert stability["summary"]["byType"] == {"gateway.slow_consumer": 1}
    assert stability["events"][0]["limitBytes"] == 8000
    assert broken.sent and broken.closed is None  # its sender stopped quietly at the first failure
    schema.assert_frames_valid(
        [(frame, "connect" if frame.get("id") == "c1" else None) for frame in good.sent]
    )

    broken.incoming.put_nowait(None)  # the broken peer's socket reports the disconnect
    await server.close()
    shutdown = await good.wait_for(lambda f: f.get("event") == "shutdown")
    assert shutdown["payload"] == {"reason": "gateway stopping"} and good.closed == (1012, "gateway stopping")
    await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
    assert server.connections == set() and server.runs == {}
    for each in workspaces.all():
        await each.sessions.shutdown()


async def test_handshake_timeout(settings: Settings) -> None:
    server = GatewayServer(settings, Workspaces(build_services(settings)), handshake_timeout=0.1)
    silent = MemoryTransport()
    await asyncio.wait_for(server.handle(silent), TIMEOUT)
    assert silent.sent[0]["event"] == "connect.challenge" and silent.closed == (1008, "connect timeout")


async def test_a_corrupt_transcript_is_refused_with_the_one_mapping(
    server: LiveServer, settings: Settings, schema: ProtocolSchema
) -> None:
    (settings.paths.sessions / "broken.json").write_text("{not json", encoding="utf-8")
    async with gateway(server, schema) as client:
        for method, params in (
            ("chat.history", {"sessionKey": "agent:main:broken"}),
            ("chat.send", {"sessionKey": "agent:main:broken", "message": "hi", "idempotencyKey": "b1"}),
        ):
            refused = await client.request(method, params)
            assert refused["ok"] is False and refused["error"]["code"] == "UNAVAILABLE", refused
            # api.session_errors' message: which file, and that it was left alone
            assert "sessions/broken.json is not a valid session file" in refused["error"]["message"], refused
    assert (settings.paths.sessions / "broken.json").read_text(encoding="utf-8") == "{not json"

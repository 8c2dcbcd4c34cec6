"""Gateway frames sent to break a connection (issue 14, section 5): a real uvicorn server, real
``websockets`` clients, every answer checked against ``@openclaw/gateway-protocol``'s schema.

Each abuse frame gets an ``INVALID_REQUEST`` error frame. Before ``connect`` the server then closes
the socket with a close frame (code and reason); after it the connection stays and answers
``health``. Nothing is logged as a traceback. A 7 MB ``chat.send`` is refused with a clear error
while other clients keep being served, and a stalled peer is dropped by the bytes it has queued.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect

from clawlet.config import Settings
from clawlet.gateway.protocol import decode, encode, request_frame
from clawlet.gateway.server import MAX_CHAT_MESSAGE_CHARS, MAX_REQUEST_ID_CHARS, GatewayServer
from clawlet.services import Workspaces, build_services
from tests.conftest import LiveServer
from tests.support.gateway_schema import ProtocolSchema
from tests.test_gateway_server import (
    Client,
    MemoryTransport,
    closed_with,
    connect_params,
    gateway,
    raw_client,
    ws_url,
)

DEADLINE = 60.0
"""Generous: the suite must pass on a loaded machine; nothing here asserts speed."""


def req(request_id: Any, method: str, params: Any) -> str:
    return json.dumps({"type": "req", "id": request_id, "method": method, "params": params})


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def with_surrogate(frame: str) -> str:
    """A JSON frame whose ``@@`` placeholder becomes the escape of a lone surrogate."""
    return frame.replace("@@", "\\ud800")


#: (name, frame, answered under) sent before ``connect``: each is refused with an error frame and a
#: close frame (1008 and the error's message as the reason).
CONNECT = connect_params()
BEFORE_CONNECT: list[tuple[str, str | bytes, str]] = [
    ("deep array", "[" * 30000, "unknown"),
    ("deep params", '{"type":"req","id":"c","method":"connect","params":' + nested(10000) + "}", "unknown"),
    ("lone surrogate in the id", with_surrogate(req("c@@", "connect", CONNECT)), "unknown"),
    (
        "lone surrogate in a param",
        with_surrogate(req("c", "connect", {**CONNECT, "client": {**CONNECT["client"], "version": "1@@"}})),
        "c",
    ),
    ("binary, not UTF-8", b"\xff\xfe{\x00", "unknown"),
    ("empty array", "[]", "unknown"),
    ("number", "1", "unknown"),
    ("string", '"x"', "unknown"),
    ("params of the wrong type", req("c", "connect", ["not", "an", "object"]), "c"),
    ("huge id", req("i" * 2000, "connect", CONNECT), "unknown"),
    (
        "a close reason longer than 123 bytes",
        req("c", "connect", {**CONNECT, "client": {"id": "客" * 200}}),
        "c",
    ),
]

#: (name, frame, answered under) sent after ``connect``: each gets an error frame, the socket stays.
AFTER_CONNECT: list[tuple[str, str | bytes, str]] = [
    ("deep array", "[" * 30000, "unknown"),
    ("deep params", '{"type":"req","id":"d","method":"health","params":' + nested(10000) + "}", "unknown"),
    ("lone surrogate in the id", '{"type":"req","id":"x\\ud800","method":"health","params":{}}', "unknown"),
    ("lone surrogate in a key", '{"type":"req","id":"k","method":"health","params":{"\\udc00":1}}', "k"),
    (
        "lone surrogate in chat.send text",
        '{"type":"req","id":"s","method":"chat.send","params":{"sessionKey":"agent:main:main",'
        '"message":"hi \\ud800","idempotencyKey":"k1"}}',
        "s",
    ),
    ("binary, not UTF-8", b"\xff\xfe{\x00", "unknown"),
    ("empty array", "[]", "unknown"),
    ("number", "1", "unknown"),
    ("string", '"x"', "unknown"),
    ("params of the wrong type", req("p", "chat.send", "nope"), "p"),
    ("params of the wrong type (health)", req("p2", "health", 7), "p2"),
    ("huge id", req("i" * 1_000_000, "health", {}), "unknown"),
    ("id just too long", req("i" * (MAX_REQUEST_ID_CHARS + 1), "health", {}), "unknown"),
]


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.exc_info is not None or record.levelno >= logging.ERROR
    ]


@pytest.mark.parametrize(
    ("name", "frame", "answered_under"), BEFORE_CONNECT, ids=[c[0] for c in BEFORE_CONNECT]
)
async def test_abuse_before_connect_gets_an_error_frame_and_a_close_frame(
    server: LiveServer,
    schema: ProtocolSchema,
    caplog: pytest.LogCaptureFixture,
    name: str,
    frame: str | bytes,
    answered_under: str,
) -> None:
    caplog.set_level(logging.WARNING)
    async with raw_client(server, schema) as client:
        await client.ws.send(frame)
        reply = await client.response(answered_under)
        assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST", reply
        assert await closed_with(client) == 1008
        reason = client.ws.close_reason or ""
        assert reason and reason in reply["error"]["message"]
    assert tracebacks(caplog) == []


@pytest.mark.parametrize(
    ("name", "frame", "answered_under"), AFTER_CONNECT, ids=[c[0] for c in AFTER_CONNECT]
)
async def test_abuse_after_connect_keeps_the_connection(
    server: LiveServer,
    schema: ProtocolSchema,
    caplog: pytest.LogCaptureFixture,
    name: str,
    frame: str | bytes,
    answered_under: str,
) -> None:
    caplog.set_level(logging.WARNING)
    async with gateway(server, schema) as client:
        await client.ws.send(frame)
        reply = await client.response(answered_under)
        assert reply["ok"] is False and reply["error"]["code"] == "INVALID_REQUEST", reply
        assert (await client.ok("health", {}))["ok"] is True
    assert tracebacks(caplog) == []


async def test_deep_but_parsable_params_and_a_too_long_message(
    server: LiveServer, schema: ProtocolSchema, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with gateway(server, schema) as client:
        # nesting the parser copes with is only data: the request is served
        assert (await client.request("health", json.loads(nested(500))))["ok"] is True
        too_long = {"sessionKey": "agent:main:big", "message": "x" * (MAX_CHAT_MESSAGE_CHARS + 1)}
        reply = await client.request("chat.send", {**too_long, "idempotencyKey": "big"})
        assert reply["error"]["code"] == "INVALID_REQUEST"
        assert f"at most {MAX_CHAT_MESSAGE_CHARS} characters" in reply["error"]["message"]
        assert (await client.ok("health", {}))["sessions"]["count"] == 0  # nothing was stored
    assert tracebacks(caplog) == []


def test_frames_with_lone_surrogates_encode_as_utf8() -> None:
    frame = {"type": "res", "id": "x\ud800", "ok": True, "payload": {"text": "中文 ok"}}
    text = encode(frame)
    text.encode("utf-8")  # sendable
    assert decode(text) == frame
    assert encode({"type": "event", "event": "chat", "payload": "中文"}) == (
        '{"type":"event","event":"chat","payload":"中文"}'
    )


async def answer(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request's response, waiting up to ``DEADLINE`` (events in between are dropped)."""
    request_id = uuid.uuid4().hex
    client.pending[request_id] = method
    await client.send(request_frame(request_id, method, params))
    deadline = time.monotonic() + DEADLINE
    while True:
        frame = await client.receive(max(0.1, deadline - time.monotonic()))
        if frame["type"] == "res" and frame["id"] == request_id:
            return frame


async def open_client(server: LiveServer, schema: ProtocolSchema) -> Client:
    ws = await connect(ws_url(server), open_timeout=DEADLINE, max_size=None)
    client = Client(ws, schema)
    await client.receive(DEADLINE)  # the challenge
    hello = await answer(client, "connect", connect_params())
    assert hello["ok"] is True, hello
    return client


@pytest.mark.slow
async def test_a_7mb_chat_send_is_refused_while_other_clients_are_served(
    server: LiveServer, schema: ProtocolSchema
) -> None:
    connected = await asyncio.gather(*(open_client(server, schema) for _ in range(50)))
    big = await open_client(server, schema)
    try:

        async def polls(client: Client) -> int:
            served = 0
            for _ in range(3):
                served += (await answer(client, "health", {}))["ok"] is True
            return served

        async def newcomer() -> bool:
            client = await open_client(server, schema)
            try:
                return (await answer(client, "health", {}))["ok"] is True
            finally:
                await client.ws.close()

        message = "lorem ipsum " * (7_000_000 // 12)
        params = {"sessionKey": "agent:main:flood", "message": message, "idempotencyKey": "flood"}
        big_reply, *results = await asyncio.wait_for(
            asyncio.gather(
                answer(big, "chat.send", params),
                *(polls(client) for client in connected),
                *(newcomer() for _ in range(50)),
            ),
            DEADLINE * 2,
        )
        assert big_reply["ok"] is False and big_reply["error"]["code"] == "INVALID_REQUEST"
        assert f"at most {MAX_CHAT_MESSAGE_CHARS} characters" in big_reply["error"]["message"]
        assert results[:50] == [3] * 50  # every connected client got every health answer
        assert results[50:] == [True] * 50  # every new client connected and was served
        assert (await answer(big, "health", {}))["ok"] is True  # the big client stays connected too
    finally:
        await asyncio.gather(*(client.ws.close() for client in [*connected, big]))


async def test_a_stalled_peer_is_dropped_by_the_bytes_it_has_queued(settings: Settings) -> None:
    """Non-ASCII text takes up to 3 bytes a character: the queue limit counts bytes. A run echoing
    4,000 CJK characters (12,000 bytes) ends with a delta (the text and the new text: ~24,000 bytes)
    and a final (~12,000): a reading peer's burst fits in 50,000 bytes; a peer that reads nothing
    holds ~75,000 bytes after two runs (but only ~28,000 characters)."""
    workspaces = Workspaces(build_services(settings))
    text = "汉" * 4000
    server = GatewayServer(settings, workspaces, max_buffered_bytes=50_000, delta_interval=30.0)
    good, stalled = MemoryTransport(), MemoryTransport(stall_sends=True)
    tasks = [asyncio.create_task(server.handle(t, remote="test")) for t in (good, stalled)]
    for transport in (good, stalled):
        transport.feed("connect", connect_params(), "c1")
    await good.wait_for(lambda f: f.get("id") == "c1")
    for number in range(2):
        key = f"agent:main:cjk{number}"
        good.feed("chat.send", {"sessionKey": key, "message": text, "idempotencyKey": key})
        final = await good.wait_for(is_final(key))
        assert text in json.dumps(final, ensure_ascii=False)
    assert stalled.closed == (1008, "slow consumer") and good.closed is None
    await server.close()
    await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
    for each in workspaces.all():
        await each.sessions.shutdown()


def is_final(key: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: (
        f.get("event") == "chat" and f["payload"]["sessionKey"] == key and f["payload"]["state"] == "final"
    )

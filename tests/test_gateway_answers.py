"""The gateway client's typed answers (``clawlet.gateway.answers``): ``chat.send``, ``chat.abort`` and
``chat.history`` read leniently into typed values, against the scripted gateway (a real WebSocket
server on loopback) and for the odd shapes a gateway may send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from clawlet.gateway.answers import chat_abort_result, chat_history, chat_send_result
from clawlet.gateway.client import GatewayClient
from tests.support.scripted_gateway import ScriptedGateway, ScriptedRun

TOKEN = "answers-token"
KEY = "agent:main:answers"


@pytest.fixture
async def gateway() -> AsyncIterator[ScriptedGateway]:
    gw = ScriptedGateway(token=TOKEN)
    await gw.start()
    yield gw
    await gw.stop()
    assert gw.errors == [], "the scripted gateway itself failed"


@pytest.fixture
async def client(gateway: ScriptedGateway) -> AsyncIterator[GatewayClient]:
    made = GatewayClient(gateway.url, TOKEN, request_timeout=30.0)
    await made.start()
    yield made
    await made.close()


async def test_send_abort_and_history_answer_typed_values(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    async def hang(run: ScriptedRun) -> None:
        await run.hang()

    gateway.chat_handler = hang
    gateway.run_id_for = lambda idempotency_key: f"run-{idempotency_key}"
    ack = await client.send(KEY, "hello", "k-1")
    assert ack == {"runId": "run-k-1", "status": "started"}
    assert gateway.requests("chat.send")[0]["params"] == {
        "sessionKey": KEY,
        "message": "hello",
        "idempotencyKey": "k-1",
    }
    assert await client.abort(KEY, "run-k-1") == {"ok": True, "aborted": True, "runIds": ["run-k-1"]}
    assert await client.abort(KEY) == {"ok": True, "aborted": False, "runIds": []}

    transcript: list[Any] = [
        {"role": "user", "content": "hello", "timestamp": 1, "idempotencyKey": "k-1:user", "extra": 1},
        "not a message",
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi"}],
            "stopReason": 7,
            "provenance": {"kind": None},
            "__openclaw": {"id": "m-1", "seq": 3, "runId": ["not", "a", "string"]},
        },
    ]
    gateway.methods["chat.history"] = lambda params: {"sessionKey": KEY, "messages": transcript}
    history = await client.history(KEY.upper())
    assert gateway.requests("chat.history")[-1]["params"] == {"sessionKey": KEY}
    assert history == {
        "messages": [
            {"role": "user", "content": "hello", "idempotencyKey": "k-1:user"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "hi"}],
                "provenance": {},
                "__openclaw": {"id": "m-1"},
            },
        ],
    }


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"runId": "r-1", "status": "started"}, {"runId": "r-1", "status": "started"}),
        ({"status": "in_flight"}, {"runId": "k", "status": "in_flight"}),  # OpenClaw's resend
        ({"runId": "", "status": "ok"}, {"runId": "k", "status": "ok"}),
        ({"runId": 5, "status": "queued"}, {"runId": "k", "status": "started"}),
        (None, {"runId": "k", "status": "started"}),
    ],
)
def test_a_chat_send_ack_always_names_the_run(payload: Any, expected: dict[str, str]) -> None:
    assert chat_send_result(payload, "k") == expected


def test_odd_abort_and_history_answers_read_as_nothing() -> None:
    assert chat_abort_result({"aborted": "yes", "runIds": ["a", 2]}) == {
        "ok": True,
        "aborted": False,
        "runIds": ["a"],
    }
    assert chat_abort_result([]) == {"ok": True, "aborted": False, "runIds": []}
    assert chat_history({"messages": "garbage"}) == {"messages": []}
    assert chat_history("garbage") == {"messages": []}

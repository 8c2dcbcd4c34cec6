"""The OpenClaw Gateway client (``clawlet.gateway.client``) against a scripted fake gateway.

The fake (``tests/support/scripted_gateway.py``) is a real WebSocket server on loopback; the tests
drive handshakes, v3 and v4 chat streams, aborts, timeouts, dropped and silent connections,
restarts and refusals, and check every frame the client sends against the protocol's JSON Schema.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import clawlet
from clawlet.gateway.answers import chat_abort_result, chat_history, chat_send_result
from clawlet.gateway.client import (
    ChatAccumulator,
    ChatUpdate,
    GatewayClient,
    GatewayUnavailable,
    redact_frame,
)
from clawlet.gateway.protocol import (
    DETAIL_AUTH_TOKEN_MISMATCH,
    DETAIL_MISSING_SCOPE,
    DETAIL_PROTOCOL_MISMATCH,
    FORBIDDEN,
    UNAVAILABLE,
    GatewayError,
    assistant_message,
)
from tests.support.gateway_schema import ProtocolSchema
from tests.support.scripted_gateway import SILENT, ScriptedGateway, ScriptedRun

TOKEN = "scripted-secret-token"
#: Seconds within which "at once" must happen: far longer than any delay on a loaded machine, far
#: shorter than the timeouts (SLOW) the client would wait for if it did not fail at once.
AT_ONCE = 30.0
SLOW = 600.0


# -- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture
async def gateway() -> AsyncIterator[ScriptedGateway]:
    gw = ScriptedGateway(token=TOKEN)
    await gw.start()
    yield gw
    await gw.stop()
    assert gw.errors == [], "the scripted gateway itself failed"


class Harness:
    """Makes clients with test-sized timeouts and records the frames each one sent and received."""

    def __init__(self) -> None:
        self.clients: list[GatewayClient] = []
        self.out: list[dict[str, Any]] = []
        self.incoming: list[dict[str, Any]] = []

    def client(self, url: str, token: str | None = TOKEN, **options: Any) -> GatewayClient:
        options.setdefault("request_timeout", 3.0)
        options.setdefault("backoff_initial", 0.01)
        options.setdefault("backoff_max", 0.05)

        def record(direction: str, frame: dict[str, Any]) -> None:
            (self.out if direction == "out" else self.incoming).append(frame)

        client = GatewayClient(url, token, on_frame=record, **options)
        self.clients.append(client)
        return client

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [f for f in self.out if f.get("method") == method]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    made = Harness()
    yield made
    for client in made.clients:
        await client.close()


async def until(predicate: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def run_chat(
    client: GatewayClient,
    message: str = "hi",
    *,
    key: str = "agent:main:main",
    idempotency_key: str | None = None,
    timeout: float = 5.0,
    **options: Any,
) -> list[ChatUpdate]:
    idem = idempotency_key or str(uuid.uuid4())
    return [update async for update in client.chat(key, message, idem, timeout=timeout, **options)]


def summary(updates: list[ChatUpdate]) -> list[tuple[str, str, str, bool]]:
    return [(u.state, u.text, u.delta, u.replaced) for u in updates]


# -- handshake -----------------------------------------------------------------------------------


async def test_handshake_waits_for_the_challenge_and_sends_a_valid_connect(
    harness: Harness, schema: ProtocolSchema
) -> None:
    async with ScriptedGateway(token=TOKEN, challenge_delay=0.2) as gw:
        gw.before_challenge = [("tick", {"ts": 1}), ("presence", {"note": "not the challenge"})]
        client = harness.client(gw.url)
        await client.start()
        conn = gw.latest
        assert conn.early_frames == [], "the client spoke before connect.challenge"
        assert conn.challenge_sent_at is not None and conn.connect_received_at is not None
        assert conn.connect_received_at >= conn.challenge_sent_at
        params = conn.connect_params
        assert params is not None
        assert params["minProtocol"] == 3 and params["maxProtocol"] == 4
        assert params["role"] == "operator"
        assert params["scopes"] == ["operator.read", "operator.write"]
        assert params["caps"] == ["tool-events"]
        assert params["client"]["id"] == "gateway-client" and params["client"]["mode"] == "backend"
        assert params["client"]["version"] == clawlet.__version__
        assert params["client"]["platform"] == sys.platform
        assert params["auth"] == {"token": TOKEN}
        assert client.connected and client.protocol == 4
        assert client.hello is not None and client.hello["type"] == "hello-ok"
        assert client.hello["server"]["connId"] == conn.conn_id
        assert client.tick_interval == 30.0
        schema.assert_frames_valid([(frame, None) for frame in conn.received])
        assert [f.get("event") for f in conn.sent[:3]] == ["tick", "presence", "connect.challenge"]
        schema.assert_frames_valid([(conn.sent[2], None), (conn.sent[3], "connect")])  # the fake is faithful
        await client.close()
        assert not client.connected


async def test_v3_gateway_without_token(harness: Harness) -> None:
    async with ScriptedGateway(max_protocol=3, tick_interval_ms=15_000) as gw:
        client = harness.client(gw.url, token=None)
        await client.start()
        assert client.protocol == 3
        assert client.tick_interval == 15.0
        assert gw.latest.connect_params is not None and "auth" not in gw.latest.connect_params


async def test_lenient_hello_with_extra_fields_and_no_tick_policy(harness: Harness) -> None:
    async with ScriptedGateway(token=TOKEN) as gw:
        gw.hello_extra = {"policy": {"maxPayload": 1024}, "somethingNew": {"x": [1, 2]}}
        client = harness.client(gw.url)
        await client.start()
        assert client.connected and client.tick_interval == 30.0
        assert await client.request("health") == {"ok": True}


async def test_auth_rejection_is_a_gateway_error_and_is_not_retried(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    client = harness.client(gateway.url, token="wrong-token", max_reconnects=5)
    with pytest.raises(GatewayError) as info:
        await client.start()
    assert info.value.details == {"code": DETAIL_AUTH_TOKEN_MISMATCH}
    assert "token mismatch" in info.value.message
    assert not client.connected
    await asyncio.sleep(0.1)
    assert len(gateway.connections) == 1, "a refused connect must not be retried in the background"
    with pytest.raises(GatewayError):
        await client.request("health")
    assert len(gateway.connections) == 2


async def test_start_retries_a_retryable_refusal_while_the_gateway_starts(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    """Real OpenClaw refuses connects with a retryable UNAVAILABLE for a moment after its port
    opens; start() waits retryAfterMs and tries again instead of failing the first task."""
    gateway.connect_error = GatewayError(
        UNAVAILABLE, "gateway starting; retry shortly", {"reason": "startup-sidecars"}, True, 300
    )
    client = harness.client(gateway.url, request_timeout=20.0)  # room for a loaded machine

    async def lift() -> None:
        await until(lambda: len(gateway.connections) >= 2, "a retried connect")
        gateway.connect_error = None

    lifting = asyncio.create_task(lift())
    await client.start()
    await lifting
    # connected on a retry: the first connect was refused, a later one (the 2nd or 3rd) accepted
    assert client.connected and len(gateway.connections) >= 2
    refused_at = [c.connect_received_at for c in gateway.connections if c.connect_received_at]
    assert refused_at[1] - refused_at[0] >= 0.29  # waited retryAfterMs


async def test_rejection_during_reconnect_ends_the_cycle(gateway: ScriptedGateway, harness: Harness) -> None:
    client = harness.client(gateway.url, max_reconnects=5)
    await client.start()
    gateway.token = "rotated-token"
    gateway.latest.drop()
    await until(lambda: isinstance(client.last_error, GatewayError), "the refused reconnect")
    await asyncio.sleep(0.1)
    assert len(gateway.connections) == 2, "one refused reconnect, then no more attempts"
    assert not client.connected
    with pytest.raises(GatewayError) as info:
        await client.request("health")
    assert (info.value.details or {}).get("code") == DETAIL_AUTH_TOKEN_MISMATCH


async def test_protocol_mismatch_is_a_gateway_error(harness: Harness) -> None:
    async with ScriptedGateway(token=TOKEN, min_protocol=5, max_protocol=5) as gw:
        with pytest.raises(GatewayError) as info:
            await harness.client(gw.url).start()
        assert (info.value.details or {}).get("code") == DETAIL_PROTOCOL_MISMATCH
    async with ScriptedGateway(token=TOKEN) as gw:
        gw.hello_extra = {"protocol": 7}  # a server that answers with a version we never offered
        with pytest.raises(GatewayError) as info:
            await harness.client(gw.url).start()
        assert (info.value.details or {}).get("code") == DETAIL_PROTOCOL_MISMATCH


async def test_unreachable_gateway_fails_start_fast(harness: Harness) -> None:
    gw = ScriptedGateway()
    await gw.start()
    url = gw.url
    await gw.stop()
    client = harness.client(url, request_timeout=SLOW, backoff_initial=SLOW, backoff_max=SLOW)
    with pytest.raises(GatewayUnavailable, match="cannot connect"):
        await asyncio.wait_for(client.start(), AT_ONCE)  # no retry, no waiting for a timeout
    assert not client.connected


# -- chat streams --------------------------------------------------------------------------------


async def test_v3_snapshots_accumulate(harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        for text in ("Hel", "Hello", "Hello, wor", "Hi"):
            await run.snapshot(text)
        await run.final("Hi there", usage={"input": 5, "output": 2})

    async with ScriptedGateway(token=TOKEN, max_protocol=3) as gw:
        gw.chat_handler = handler
        client = harness.client(gw.url)
        updates = await run_chat(client)
    assert client.protocol == 3
    assert summary(updates) == [
        ("delta", "Hel", "Hel", False),
        ("delta", "Hello", "lo", False),
        ("delta", "Hello, wor", ", wor", False),
        ("delta", "Hi", "Hi", True),  # a snapshot that does not continue the text replaces it
        ("final", "Hi there", " there", False),
    ]
    assert updates[-1].usage == {"input": 5, "output": 2} and updates[-1].stop_reason == "stop"


async def test_v4_delta_text_accumulates_and_replaces(gateway: ScriptedGateway, harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.delta("Hel")
        await run.delta("lo")
        await run.delta("Bye", replace=True)
        await run.delta(" now", message=False)
        await run.final(message=False)

    gateway.chat_handler = handler
    updates = await run_chat(harness.client(gateway.url))
    assert summary(updates) == [
        ("delta", "Hel", "Hel", False),
        ("delta", "Hello", "lo", False),
        ("delta", "Bye", "Bye", True),
        ("delta", "Bye now", " now", False),
        ("final", "Bye now", "", False),
    ]
    assert [u.seq for u in updates] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("ending", ["final", "error", "aborted"])
async def test_terminal_states(gateway: ScriptedGateway, harness: Harness, ending: str) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.delta("partial")
        if ending == "final":
            await run.final("partial and whole", stop_reason="end_turn", usage={"total": 9})
        elif ending == "error":
            await run.error("the model is overloaded", kind="rate_limit")
        else:
            await run.aborted(stop_reason="rpc")
        await run.delta(" after the end")  # must not be yielded

    gateway.chat_handler = handler
    updates = await run_chat(harness.client(gateway.url))
    assert [u.state for u in updates] == ["delta", ending]
    last = updates[-1]
    assert last.terminal
    if ending == "final":
        assert (last.text, last.delta, last.stop_reason, last.usage) == (
            "partial and whole",
            " and whole",
            "end_turn",
            {"total": 9},
        )
        assert last.error is None
    elif ending == "error":
        assert (last.text, last.error, last.error_kind) == (
            "partial",
            "the model is overloaded",
            "rate_limit",
        )
    else:
        assert (last.text, last.error, last.stop_reason) == ("partial", "aborted (rpc)", "rpc")


async def test_chat_send_params_and_run_matching(gateway: ScriptedGateway, harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        conn = run.conn
        other = {"sessionKey": run.session_key, "seq": 1, "state": "delta", "deltaText": "NOPE"}
        await conn.event("chat", {**other, "runId": "some-other-run"})
        await conn.event("chat", {**other, "runId": run.run_id, "sessionKey": "agent:other:main"})
        await conn.event("chat", {"state": "delta"})  # no runId
        await conn.event("presence", {"who": "someone"}, seq_step=7)  # unknown event after a seq gap
        await conn.send_raw("this is not json {")
        await conn.send_raw('{"type": "gossip"}')
        await conn.send_raw('["a", "list"]')
        await run.chat_event("status", phase="starting_model")
        await run.delta("Hello")
        await run.chat_event("final", message=assistant_message("Hello world"), unexpectedField=True)

    gateway.chat_handler = handler
    client = harness.client(gateway.url)
    key = str(uuid.uuid4())
    updates = await run_chat(client, "Do the THING", key="agent:main:TASK-01HXYZ", idempotency_key=key)
    assert summary(updates) == [("delta", "Hello", "Hello", False), ("final", "Hello world", " world", False)]
    assert all(u.run_id == key for u in updates)
    (send,) = gateway.requests("chat.send")
    assert send["params"] == {
        "sessionKey": "agent:main:task-01hxyz",
        "message": "Do the THING",
        "idempotencyKey": key,
    }
    assert client.connected and client.connects == 1, "bad frames must not break the connection"
    assert await client.request("health") == {"ok": True}


async def test_events_before_an_ack_with_another_run_id(gateway: ScriptedGateway, harness: Harness) -> None:
    gateway.run_id_for = lambda key: f"run-{key}"
    gateway.ack_delay = 0.1
    key = str(uuid.uuid4())
    updates = await run_chat(harness.client(gateway.url), "early", idempotency_key=key)
    assert [u.run_id for u in updates] == [f"run-{key}"] * 4
    assert updates[-1].state == "final" and updates[-1].text == "Echo: early"


async def test_tool_events_reach_listeners(gateway: ScriptedGateway, harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.tool("start", "exec", args={"cmd": "ls"})
        await run.conn.event(
            "agent", {"runId": run.run_id, "seq": 9, "stream": "assistant", "ts": 1, "data": {}}
        )
        await run.tool("result", "exec", result="ok")
        await run.final("done")

    gateway.chat_handler = handler
    client = harness.client(gateway.url)
    per_run: list[tuple[str, dict[str, Any]]] = []
    everywhere: list[str] = []
    remove = client.on_tool_event(lambda run_id, payload: everywhere.append(payload["data"]["phase"]))
    key = str(uuid.uuid4())
    updates = await run_chat(client, idempotency_key=key, on_tool=lambda rid, p: per_run.append((rid, p)))
    assert updates[-1].text == "done"
    assert [(rid, p["data"]["phase"], p["data"]["name"]) for rid, p in per_run] == [
        (key, "start", "exec"),
        (key, "result", "exec"),
    ]
    assert everywhere == ["start", "result"]
    remove()
    await run_chat(client)
    assert everywhere == ["start", "result"] and len(per_run) == 2


async def test_abort_params_and_the_aborted_update(gateway: ScriptedGateway, harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.delta("partial")
        await run.hang()

    gateway.chat_handler = handler
    client = harness.client(gateway.url)
    key = str(uuid.uuid4())
    updates: list[ChatUpdate] = []

    async def consume() -> None:
        async for update in client.chat("Agent:Main:Main", "long job", key, timeout=5):
            updates.append(update)

    task = asyncio.create_task(consume())
    await until(lambda: updates, "the first delta")
    result = await client.abort("Agent:Main:Main", key)
    await asyncio.wait_for(task, AT_ONCE)
    assert gateway.requests("chat.abort")[-1]["params"] == {"sessionKey": "agent:main:main", "runId": key}
    assert result == {"ok": True, "aborted": True, "runIds": [key]}
    assert summary(updates)[-1] == ("aborted", "partial", "", False)
    await client.abort("agent:main:main")
    assert gateway.requests("chat.abort")[-1]["params"] == {"sessionKey": "agent:main:main"}


async def test_chat_timeout_aborts_the_run(gateway: ScriptedGateway, harness: Harness) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.delta("thinking")
        await run.hang()

    gateway.chat_handler = handler
    key = str(uuid.uuid4())
    client = harness.client(gateway.url, request_timeout=SLOW)
    with pytest.raises(TimeoutError, match=key):  # the chat's own timeout, not the client's
        await asyncio.wait_for(run_chat(client, idempotency_key=key, timeout=0.3), AT_ONCE)
    await until(lambda: gateway.requests("chat.abort"), "the chat.abort after the timeout")
    assert gateway.requests("chat.abort")[-1]["params"] == {"sessionKey": "agent:main:main", "runId": key}


# -- requests ------------------------------------------------------------------------------------


async def test_request_timeout_is_gateway_unavailable(gateway: ScriptedGateway, harness: Harness) -> None:
    gateway.methods["slow.method"] = SILENT
    client = harness.client(gateway.url, request_timeout=SLOW)
    await client.start()
    with pytest.raises(GatewayUnavailable, match=r"slow\.method"):  # the request's timeout, not the client's
        await asyncio.wait_for(client.request("slow.method", {"x": 1}, timeout=0.2), AT_ONCE)
    assert client.connected
    assert await client.request("health") == {"ok": True}


async def test_error_response_is_gateway_error(gateway: ScriptedGateway, harness: Harness) -> None:
    gateway.methods["sessions.list"] = GatewayError(
        FORBIDDEN, "missing scope", {"code": DETAIL_MISSING_SCOPE}
    )
    client = harness.client(gateway.url)
    with pytest.raises(GatewayError) as info:
        await client.request("sessions.list", {})
    assert (info.value.code, info.value.details) == (FORBIDDEN, {"code": DETAIL_MISSING_SCOPE})
    with pytest.raises(GatewayError, match="unknown method"):
        await client.request("no.such.method")
    assert client.connected


ANSWERS_KEY = "agent:main:answers"


async def test_send_abort_and_history_answer_typed_values(gateway: ScriptedGateway, harness: Harness) -> None:
    """``send``, ``abort`` and ``history`` read their answers leniently into typed values
    (``clawlet.gateway.answers``): fields of the wrong type and entries that are not messages are
    dropped."""
    client = harness.client(gateway.url, request_timeout=AT_ONCE)

    async def hang(run: ScriptedRun) -> None:
        await run.hang()

    gateway.chat_handler = hang
    gateway.run_id_for = lambda idempotency_key: f"run-{idempotency_key}"
    ack = await client.send(ANSWERS_KEY, "hello", "k-1")
    assert ack == {"runId": "run-k-1", "status": "started"}
    assert gateway.requests("chat.send")[0]["params"] == {
        "sessionKey": ANSWERS_KEY,
        "message": "hello",
        "idempotencyKey": "k-1",
    }
    assert await client.abort(ANSWERS_KEY, "run-k-1") == {"ok": True, "aborted": True, "runIds": ["run-k-1"]}
    assert await client.abort(ANSWERS_KEY) == {"ok": True, "aborted": False, "runIds": []}

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
    gateway.methods["chat.history"] = lambda params: {"sessionKey": ANSWERS_KEY, "messages": transcript}
    history = await client.history(ANSWERS_KEY.upper())
    assert gateway.requests("chat.history")[-1]["params"] == {"sessionKey": ANSWERS_KEY}
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


# -- lost connections ----------------------------------------------------------------------------


async def test_disconnect_fails_pending_requests_and_chats(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.delta("half")
        await run.hang()

    gateway.chat_handler = handler
    gateway.methods["slow.method"] = SILENT
    client = harness.client(gateway.url)
    await client.start()
    updates: list[ChatUpdate] = []

    async def consume() -> None:
        async for update in client.chat("agent:main:main", "work", str(uuid.uuid4()), timeout=SLOW):
            updates.append(update)

    chat_task = asyncio.create_task(consume())
    request_task = asyncio.create_task(client.request("slow.method", timeout=SLOW))
    await until(lambda: updates and gateway.requests("slow.method"), "a delta and the pending request")
    gateway.latest.drop()
    # in-flight work fails at once, not at its timeout
    with pytest.raises(GatewayUnavailable, match="may still finish on the gateway"):
        await asyncio.wait_for(chat_task, AT_ONCE)
    with pytest.raises(GatewayUnavailable, match="connection was lost"):
        await asyncio.wait_for(request_task, AT_ONCE)
    assert summary(updates) == [("delta", "half", "half", False)]
    await until(lambda: client.connected and client.connects == 2, "the reconnect")


@pytest.mark.slow
async def test_watchdog_drops_a_silent_connection_and_reconnects(harness: Harness) -> None:
    # ticks 0.4 s apart: a loaded machine's scheduling delays stay well inside the 0.8 s watchdog
    async with ScriptedGateway(token=TOKEN, tick_interval_ms=400) as gw:
        client = harness.client(gw.url)
        await client.start()
        await asyncio.sleep(1.0)  # more than twice the tick interval: ticks keep the connection
        assert client.connected and client.connects == 1 and len(gw.connections) == 1
        first = gw.latest
        first.silent = True
        await until(first.closed.is_set, "the watchdog to drop the silent connection", timeout=60)
        assert first.close_code == 4000
        await until(lambda: client.connected and client.connects == 2, "the reconnect")
        assert await client.request("health") == {"ok": True}


async def test_server_restart_reconnects_and_a_new_chat_works(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    client = harness.client(gateway.url, backoff_initial=0.02, backoff_max=0.1)
    await client.start()
    port = gateway.port
    await gateway.stop()
    await until(lambda: not client.connected, "the client to notice the stop")
    waiting = asyncio.create_task(client.request("health", timeout=SLOW))
    await asyncio.sleep(0.3)  # a few refused attempts while the gateway is down
    assert not waiting.done()
    await gateway.start()
    assert gateway.port == port
    # a request during a reconnect waits for it
    assert await asyncio.wait_for(waiting, AT_ONCE) == {"ok": True}
    assert client.connects == 2
    updates = await run_chat(client, "again")
    assert updates[-1].state == "final" and updates[-1].text == "Echo: again"


async def test_gives_up_after_max_reconnects_and_recovers_later(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    client = harness.client(gateway.url, max_reconnects=3, backoff_initial=0.01, backoff_max=0.02)
    await client.start()
    gateway.refuse_connections = True
    gateway.latest.drop()
    await until(lambda: "gave up" in str(client.last_error), "the client to give up")
    assert len(gateway.connections) == 1 + 3, "exactly max_reconnects attempts"
    await asyncio.sleep(0.1)
    assert len(gateway.connections) == 4, "no attempts after giving up"
    with pytest.raises(GatewayUnavailable):  # fails fast once the client gave up, not at its timeout
        await asyncio.wait_for(client.request("health", timeout=SLOW), AT_ONCE)
    assert len(gateway.connections) == 5, "a request after giving up makes one fresh attempt"
    gateway.refuse_connections = False
    assert await client.request("health") == {"ok": True}
    assert client.connected and client.last_error is None
    updates = await run_chat(client, "back")
    assert updates[-1].text == "Echo: back"


async def test_keeps_reconnecting_past_max_reconnects_while_needed_then_stops(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    """While ``keep_reconnecting()`` is true (the inbox: a task waits for the gateway) attempts go
    on every ``backoff_max`` seconds after the regular ones; once it is false the cycle stops."""
    client = harness.client(gateway.url, max_reconnects=3, backoff_initial=0.01, backoff_max=0.02)
    needed = True
    client.keep_reconnecting = lambda: needed
    await client.start()
    gateway.refuse_connections = True
    gateway.latest.drop()
    await until(lambda: len(gateway.connections) >= 1 + 3 + 10, "attempts past max_reconnects", 30)
    gateway.refuse_connections = False
    await until(lambda: client.connected, "the reconnect once the gateway accepts", 30)
    assert client.connects == 2 and client.last_error is None
    assert (await run_chat(client, "back"))[-1].text == "Echo: back"
    needed = False
    before = len(gateway.connections)
    gateway.refuse_connections = True
    gateway.latest.drop()
    await until(lambda: not client._socket.running, "the cycle to stop when nobody needs it", 30)
    attempts = len(gateway.connections)
    assert attempts == before + 3, "only the regular attempts when nobody needs the gateway"
    with pytest.raises(GatewayUnavailable):
        await client.request("health", timeout=5)
    assert len(gateway.connections) == attempts + 1, "a request makes one fresh attempt"


async def test_connect_by_waits_for_the_gateway_up_to_a_deadline(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    client = harness.client(gateway.url, backoff_initial=0.01, backoff_max=0.05)
    gateway.refuse_connections = True
    loop = asyncio.get_running_loop()
    with pytest.raises(GatewayUnavailable, match="closed the connection during the handshake"):
        await client.connect_by(loop.time() + 0.5)
    refused = len(gateway.connections)
    assert refused >= 2, "attempts went on until the deadline"
    waiting = asyncio.create_task(client.connect_by(loop.time() + 30))
    await until(lambda: len(gateway.connections) > refused, "another attempt")
    gateway.refuse_connections = False
    await asyncio.wait_for(waiting, 30)
    assert client.connected


async def test_close_fails_in_flight_chats_and_later_requests(
    gateway: ScriptedGateway, harness: Harness
) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.hang()

    gateway.chat_handler = handler
    client = harness.client(gateway.url)
    chat_task = asyncio.create_task(run_chat(client, timeout=30))
    await until(lambda: gateway.runs, "the run to start")
    await client.close()
    with pytest.raises(GatewayUnavailable, match="closed"):
        await asyncio.wait_for(chat_task, AT_ONCE)
    with pytest.raises(GatewayUnavailable, match="closed"):
        await client.request("health")
    await asyncio.sleep(0.1)
    assert len(gateway.connections) == 1, "a closed client does not reconnect"


def test_backoff_doubles_up_to_the_cap() -> None:
    client = GatewayClient("ws://127.0.0.1:1", backoff_initial=1.0, backoff_max=30.0)
    assert [client.backoff_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]


# -- the schema ----------------------------------------------------------------------------------


async def test_every_frame_the_client_sends_is_schema_valid(
    gateway: ScriptedGateway, harness: Harness, schema: ProtocolSchema
) -> None:
    async def handler(run: ScriptedRun) -> None:
        await run.tool("start", "read")
        if run.message == "hang":
            await run.delta("waiting")
            await run.hang()
        await run.stream(["Hello", " there"])
        await run.final()

    gateway.chat_handler = handler
    client = harness.client(gateway.url)
    await run_chat(client, "first", key="agent:main:main")
    hanging = asyncio.create_task(run_chat(client, "hang", key="agent:writer:main"))
    await until(lambda: len(gateway.runs) == 2 and gateway.runs[1].text, "the second run")
    await client.abort("agent:writer:main")
    await asyncio.wait_for(hanging, AT_ONCE)
    await client.request("chat.history", {"sessionKey": "agent:main:main", "limit": 20})
    await client.request("agents.list", {})
    await client.request("models.list", {})
    await client.request("sessions.list", {"limit": 10})
    await client.request("health", {})
    methods = [frame.get("method") for frame in harness.out]
    assert methods[:2] == ["connect", "chat.send"] and "chat.abort" in methods
    assert harness.out == gateway.received, "the gateway received exactly what the client sent"
    assert schema.assert_frames_valid([(frame, None) for frame in harness.out]) == len(methods)
    # the scripted gateway's side is schema-valid too, so these tests exercise realistic traffic
    asked = {frame["id"]: frame["method"] for frame in harness.out}
    schema.assert_frames_valid([(frame, asked.get(frame.get("id", ""))) for frame in gateway.latest.sent])


async def test_v3_traffic_is_schema_valid(harness: Harness, schema: ProtocolSchema) -> None:
    async with ScriptedGateway(token=TOKEN, max_protocol=3) as gw:
        client = harness.client(gw.url)
        updates = await run_chat(client, "old school")
        assert updates[-1].text == "Echo: old school"
        schema.assert_frames_valid([(frame, None) for frame in harness.out])
        asked = {frame["id"]: frame["method"] for frame in harness.out}
        schema.assert_frames_valid(
            [(frame, asked.get(frame.get("id", ""))) for frame in gw.latest.sent], protocol=3
        )


# -- pieces --------------------------------------------------------------------------------------


def test_accumulator_edge_cases() -> None:
    acc = ChatAccumulator("r1")
    assert acc.apply({"state": "status", "phase": "starting_model", "seq": 1}) is None
    first = acc.apply({"state": "delta", "seq": 2, "deltaText": "ab"})
    assert first is not None and (first.text, first.delta) == ("ab", "ab")
    assert acc.apply({"state": "delta", "seq": 2, "deltaText": "ab"}) is None, "a duplicate seq is dropped"
    gap = acc.apply({"state": "delta", "seq": 9, "deltaText": "X", "message": assistant_message("abcdX")})
    assert gap is not None and (gap.text, gap.delta) == ("abcdX", "X"), "the snapshot repairs a missed event"
    empty = acc.apply({"state": "delta"})
    assert empty is not None and (empty.text, empty.delta) == ("abcdX", "")
    final = acc.apply({"state": "final"})
    assert final is not None and (final.state, final.text, final.delta) == ("final", "abcdX", "")
    assert acc.apply({"state": "delta", "deltaText": "late"}) is None, "nothing after the terminal event"
    error = ChatAccumulator("r2").apply({"state": "error"})
    assert error is not None and error.state == "error" and error.error and error.error_kind is None
    aborted = ChatAccumulator("r3").apply({"state": "aborted", "errorMessage": "stopped by user"})
    assert aborted is not None and aborted.error == "stopped by user"


def test_redact_frame_hides_the_token() -> None:
    frame = {"type": "req", "id": "1", "method": "connect", "params": {"auth": {"token": TOKEN}, "role": "x"}}
    clean = redact_frame(frame)
    assert TOKEN not in str(clean) and clean["params"]["role"] == "x"
    assert frame["params"]["auth"]["token"] == TOKEN, "the original frame is untouched"


async def test_the_token_is_never_logged(
    gateway: ScriptedGateway, harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")  # everything, the websockets library's frame dumps included
    client = harness.client(gateway.url)
    await run_chat(client)
    gateway.latest.drop()
    await until(lambda: client.connects == 2, "the reconnect")
    assert any("connect" in record.getMessage() for record in caplog.records)
    assert TOKEN not in caplog.text

"""One turn per session: of two simultaneous requests on one session exactly one runs and the other
is told the session is busy (each surface in its own format), and the transcript never interleaves.

A real server on loopback runs the demo model slowed down, so a turn streams for seconds unless it
is cancelled; each test sends 50 simultaneous pairs on one surface (the workbench's ``/api/chat``
on existing and on new sessions, ``/v1/chat/completions`` with ``X-Session-ID``, ``/api/agent``,
inbox follow-ups, the gateway's ``chat.send`` over real WebSockets). A winner is cancelled as soon
as both answers of its pair are in (the inbox's are left to finish), which keeps the tests short.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from clawlet.gateway.server import session_id_for
from clawlet.inbox.backends import task_session_name
from clawlet.inbox.db import create_db_engine
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task
from clawlet.inbox.repository import InboxRepository
from clawlet.llm.demo import SUMMARY_REQUEST_MARKER
from clawlet.sessions.store import SessionNotFound, TranscriptStore
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from tests.conftest import LiveServer
from tests.support.gateway_schema import ProtocolSchema
from tests.test_gateway_server import READ, WRITE, Client, gateway

pytestmark = pytest.mark.slow  # 50 simultaneous turns per surface: not in `pytest -m "not slow"`

PAIRS = 50
TOKEN_DELAY = 0.05
WORDS = " ".join(f"word{i}" for i in range(40))  # the demo echoes it: a turn of seconds
DEADLINE = 120.0  # generous: the suite must pass on a loaded machine

OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}


def texts(index: int) -> tuple[str, str]:
    """The two messages of a pair: which one ran shows in the transcript."""
    return f"first {index} {WORDS}", f"second {index} {WORDS}"


def http_client(server: LiveServer) -> httpx.AsyncClient:
    # 2 × PAIRS streams stay open at once, plus the cancels: no pool limit
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.AsyncClient(base_url=server.url, timeout=DEADLINE, limits=limits)


def transcript(settings: Settings, session_id: str) -> list[dict[str, Any]]:
    try:
        return [dict(m) for m in TranscriptStore(settings.paths.sessions).load_messages(session_id)]
    except SessionNotFound:
        return []


def assert_one_turn_each(settings: Settings, ran: dict[str, str], earlier_turns: int = 0) -> None:
    """Every session's transcript alternates user and assistant (an assistant message may be
    missing only at the end, after a cancel) and holds exactly one new user message: the winner's."""
    for session_id, winner in ran.items():
        messages = transcript(settings, session_id)
        roles = [m["role"] for m in messages]
        assert roles and roles[0] == "user", (session_id, roles)
        assert all(a != b for a, b in itertools.pairwise(roles)), (session_id, roles)
        users = [m["content"] for m in messages if m["role"] == "user"]
        assert users[earlier_turns:] == [winner], (session_id, roles)


def assert_exactly_one_ran(outcomes: list[list[int]]) -> None:
    both = sum(1 for pair in outcomes if pair.count(200) == 2)
    assert all(sorted(pair) == [200, 409] for pair in outcomes), (
        f"{both} of {len(outcomes)} pairs ran both turns; outcomes: {outcomes}"
    )


Build = Callable[[httpx.AsyncClient, str, str], httpx.Request]


async def race_http(
    client: httpx.AsyncClient,
    session_ids: list[str],
    build: Build,
    is_busy_answer: Callable[[httpx.Response], bool],
) -> tuple[list[list[int]], dict[str, str]]:
    """Send every pair at once; cancel each winner as soon as its pair has answered, then read
    every stream to its end. The status codes of each pair, and the winner's text per session."""

    async def pair(index: int, session_id: str) -> tuple[list[int], str | None]:
        sent = texts(index)
        responses = await asyncio.gather(
            *(client.send(build(client, session_id, text), stream=True) for text in sent)
        )
        try:
            answers = zip(sent, responses, strict=True)
            winners = [text for text, response in answers if response.status_code == 200]
            if winners:
                cancelled = await client.post(f"/api/sessions/{session_id}/cancel")
                assert cancelled.status_code == 200, cancelled.text
            for response in responses:
                await response.aread()
                if response.status_code != 200:
                    assert is_busy_answer(response), (response.status_code, response.text)
        finally:
            for response in responses:
                await response.aclose()
        return [response.status_code for response in responses], winners[0] if len(winners) == 1 else None

    results = await asyncio.gather(*(pair(index, sid) for index, sid in enumerate(session_ids)))
    outcomes = [statuses for statuses, _ in results]
    ran = {sid: winner for sid, (_, winner) in zip(session_ids, results, strict=True) if winner is not None}
    return outcomes, ran


def clawlet_busy(response: httpx.Response) -> bool:
    if response.status_code != 409:
        return False
    error = response.json()["error"]
    return error["code"] == "session_busy" and bool(error["message"])


def openai_busy(response: httpx.Response) -> bool:
    if response.status_code != 409:
        return False
    error = response.json()["error"]
    return (
        set(error) == OPENAI_ERROR_KEYS
        and error["code"] == "session_busy"
        and error["type"] == "conflict_error"
    )


def workbench_chat(client: httpx.AsyncClient, session_id: str, text: str) -> httpx.Request:
    return client.build_request("POST", "/api/chat", json={"message": text, "session_id": session_id})


def openai_chat(client: httpx.AsyncClient, session_id: str, text: str) -> httpx.Request:
    body = {"model": "clawlet", "stream": True, "messages": [{"role": "user", "content": text}]}
    headers = {"X-Session-ID": session_id}
    return client.build_request("POST", "/v1/chat/completions", json=body, headers=headers)


def native_agent(client: httpx.AsyncClient, session_id: str, text: str) -> httpx.Request:
    return client.build_request("POST", "/api/agent", json={"prompt": text, "session-id": session_id})


@pytest.fixture
def slow_server(live_server: Callable[..., LiveServer]) -> LiveServer:
    return live_server(demo_token_delay=TOKEN_DELAY)


async def test_workbench_chat_on_existing_sessions(slow_server: LiveServer, settings: Settings) -> None:
    store = TranscriptStore(settings.paths.sessions)
    session_ids = [f"existing-{index}" for index in range(PAIRS)]
    for session_id in session_ids:
        store.append(session_id, "user", "hello")
        store.append(session_id, "assistant", "hi")
    async with http_client(slow_server) as client:
        outcomes, ran = await race_http(client, session_ids, workbench_chat, clawlet_busy)
    assert_exactly_one_ran(outcomes)
    assert_one_turn_each(settings, ran, earlier_turns=1)


async def test_workbench_chat_on_new_sessions(slow_server: LiveServer, settings: Settings) -> None:
    session_ids = [f"new-{index}" for index in range(PAIRS)]
    async with http_client(slow_server) as client:
        outcomes, ran = await race_http(client, session_ids, workbench_chat, clawlet_busy)
    assert_exactly_one_ran(outcomes)
    assert_one_turn_each(settings, ran)


async def test_openai_chat_with_a_session_header(slow_server: LiveServer, settings: Settings) -> None:
    session_ids = [f"oai-pair-{index}" for index in range(PAIRS)]
    async with http_client(slow_server) as client:
        outcomes, ran = await race_http(client, session_ids, openai_chat, openai_busy)
    assert_exactly_one_ran(outcomes)
    assert_one_turn_each(settings, ran)


async def test_native_agent_endpoint(slow_server: LiveServer, settings: Settings) -> None:
    session_ids = [f"agent-pair-{index}" for index in range(PAIRS)]
    async with http_client(slow_server) as client:
        outcomes, ran = await race_http(client, session_ids, native_agent, clawlet_busy)
    assert_exactly_one_ran(outcomes)
    assert_one_turn_each(settings, ran)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_inbox_follow_ups(live_server: Callable[..., LiveServer], settings: Settings) -> None:
    roomy = settings.model_copy(update={"inbox_max_running": 2 * PAIRS})  # every winner runs at once
    server = live_server(roomy, demo_token_delay=TOKEN_DELAY)
    repository = InboxRepository(create_db_engine(settings.inbox_database_url))
    tasks = []
    for _ in range(PAIRS):  # answered tasks, put straight into the database
        task = Task(new_ulid(), "main", "answered", False, "completed", 1000, 1000)
        repository.create_task(task, Message(new_ulid(), task.id, "user", "hello", 1000))
        tasks.append(task)

    async with http_client(server) as client:

        async def pair(index: int, task: Task) -> tuple[list[int], str | None]:
            sent = texts(index)
            responses = await asyncio.gather(
                *(client.post(f"/api/v1/tasks/{task.id}/messages", json={"content": text}) for text in sent)
            )
            for response in responses:
                if response.status_code == 200:
                    assert response.json()["ok"] is True
                else:
                    assert response.status_code == 409, response.text
                    assert response.json()["error"]["code"] == "task_busy", response.text
            winners = [text for text, r in zip(sent, responses, strict=True) if r.status_code == 200]
            return [r.status_code for r in responses], winners[0] if len(winners) == 1 else None

        results = await asyncio.gather(*(pair(index, task) for index, task in enumerate(tasks)))

        async def all_answered() -> bool:
            listed = (await client.get("/api/v1/tasks", params={"limit": 2 * PAIRS})).json()
            return all(task["status"] in ("completed", "failed") for task in listed)

        await eventually(all_answered, "every follow-up to be answered")

    assert_exactly_one_ran([statuses for statuses, _ in results])
    ran = {
        task_session_name(task.id): winner
        for task, (_, winner) in zip(tasks, results, strict=True)
        if winner is not None
    }
    assert_one_turn_each(settings, ran)
    for task in tasks:
        contents = [m.content for m in repository.list_messages(task.id) if m.sender_type == "user"]
        assert contents[0] == "hello" and len(contents) == 2, contents  # the loser was not saved


async def test_gateway_chat_send(slow_server: LiveServer, settings: Settings, schema: ProtocolSchema) -> None:
    """Each side of a pair has its own connection (a connection handles its requests in order);
    the senders may only write, so one reader follows every run's ``chat`` events."""
    terminal: dict[str, str] = {}  # run id → the state of its last chat event

    async def follow(reader: Client) -> None:
        while True:
            frame = await reader.receive(timeout=DEADLINE)
            payload = frame.get("payload") or {}
            if frame.get("event") == "chat" and payload.get("state") != "delta":
                terminal[payload["runId"]] = payload["state"]

    async with contextlib.AsyncExitStack() as stack:
        reader = await stack.enter_async_context(gateway(slow_server, schema, scopes=(READ,)))
        following = asyncio.create_task(follow(reader))
        senders: list[Client] = list(
            await asyncio.gather(
                *(
                    stack.enter_async_context(gateway(slow_server, schema, scopes=(WRITE,)))
                    for _ in range(2 * PAIRS)
                )
            )
        )

        async def pair(index: int, sides: tuple[Client, Client]) -> tuple[list[int], str | None, list[str]]:
            key = f"agent:main:gw-pair-{index}"
            sent = texts(index)
            frames = await asyncio.gather(
                *(
                    client.request(
                        "chat.send", {"sessionKey": key, "message": text, "idempotencyKey": f"{index}-{side}"}
                    )
                    for side, (client, text) in enumerate(zip(sides, sent, strict=True))
                )
            )
            winners: list[str] = []
            run_ids: list[str] = []
            for client, text, frame in zip(sides, sent, frames, strict=True):
                if frame["ok"]:
                    assert frame["payload"]["status"] == "started", frame
                    winners.append(text)
                    run_ids.append(frame["payload"]["runId"])
                    await client.ok("chat.abort", {"sessionKey": key, "runId": frame["payload"]["runId"]})
                else:
                    error = frame["error"]
                    assert error["code"] == "UNAVAILABLE" and error["retryable"] is True, frame
                    assert "still answering" in error["message"], frame
            statuses = [200 if frame["ok"] else 409 for frame in frames]
            return statuses, winners[0] if len(winners) == 1 else None, run_ids

        try:
            results = await asyncio.gather(
                *(pair(index, (senders[2 * index], senders[2 * index + 1])) for index in range(PAIRS))
            )
            run_ids = {run_id for _, _, ids in results for run_id in ids}

            async def all_over() -> bool:
                assert not following.done() or following.exception() is None
                return run_ids <= set(terminal)

            await eventually(all_over, "every run to end")
        finally:
            following.cancel()
    assert_exactly_one_ran([statuses for statuses, _, _ in results])
    ran = {
        session_id_for(f"gw-pair-{index}"): winner
        for index, (_, winner, _) in enumerate(results)
        if winner is not None
    }
    assert_one_turn_each(settings, ran)


async def test_compression_and_turns_exclude_each_other(
    settings: Settings, live_server: Callable[..., LiveServer]
) -> None:
    """A compression is refused while a turn runs, and a turn (or a decision) while a compression
    runs: the model holds each call until the test lets it go."""
    calls = {"chat": threading.Event(), "summary": threading.Event()}
    release = {"chat": threading.Event(), "summary": threading.Event()}

    def script(body: dict[str, Any]) -> Turn:
        kind = "summary" if SUMMARY_REQUEST_MARKER in str(body["messages"][0]["content"]) else "chat"
        calls[kind].set()
        release[kind].wait(DEADLINE)  # holds the scripted server: one held call at a time
        return text_turn(f"the {kind} answer")

    with ScriptedOpenAIServer(script) as llm:
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server = live_server(custom)
        session_id = "compressing"
        store = TranscriptStore(settings.paths.sessions)
        for index in range(4):
            store.append(session_id, "user", f"question {index}")
            store.append(session_id, "assistant", f"answer {index}")
        compress = f"/api/sessions/{session_id}/compress"
        async with http_client(server) as client:
            turn = asyncio.create_task(
                client.post("/api/chat", json={"message": "hi", "session_id": session_id, "stream": False})
            )
            try:
                await asyncio.to_thread(calls["chat"].wait, DEADLINE)
                assert clawlet_busy(await client.post(compress))
            finally:
                release["chat"].set()
            assert (await turn).status_code == 200

            compression = asyncio.create_task(client.post(compress))
            try:
                await asyncio.to_thread(calls["summary"].wait, DEADLINE)
                for build, is_busy_answer in (
                    (workbench_chat, clawlet_busy),
                    (openai_chat, openai_busy),
                    (native_agent, clawlet_busy),
                ):
                    meanwhile = await client.send(build(client, session_id, "meanwhile"), stream=True)
                    if meanwhile.status_code != 200:  # a turn that started is not waited for
                        await meanwhile.aread()
                    await meanwhile.aclose()
                    assert is_busy_answer(meanwhile), meanwhile.status_code
            finally:
                release["summary"].set()
            done = await compression
            assert done.status_code == 200, done.text
            assert done.json()["summary"] == "the summary answer"
    messages = transcript(settings, session_id)
    assert "meanwhile" not in str(messages)
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)


async def test_delete_while_a_turn_runs_or_starts(slow_server: LiveServer, settings: Settings) -> None:
    """Deleting a session stops its turn, and a turn sent at the same moment either is refused
    or starts a fresh session after the deletion: never a turn on a half-deleted session."""
    session_ids = [f"deleted-{index}" for index in range(PAIRS)]
    async with http_client(slow_server) as client:

        async def one(index: int, session_id: str) -> None:
            first, second = texts(index)
            running = await client.send(workbench_chat(client, session_id, first), stream=True)
            try:
                assert running.status_code == 200
                deleting = asyncio.create_task(client.delete(f"/api/sessions/{session_id}"))
                while not deleting.done():  # a client that keeps sending while the deletion runs
                    chat = await client.send(workbench_chat(client, session_id, second), stream=True)
                    if chat.status_code == 200:
                        await client.post(f"/api/sessions/{session_id}/cancel")
                    await chat.aread()
                    await chat.aclose()
                    if chat.status_code == 200:
                        break
                    assert clawlet_busy(chat), chat.text
                deleted = await deleting
                assert deleted.status_code == 200, deleted.text
                await running.aread()
            finally:
                await running.aclose()
            messages = transcript(settings, session_id)
            roles = [m["role"] for m in messages]
            assert first not in str(messages), roles
            if messages:  # the second turn came after the deletion: a new session
                assert roles[0] == "user" and messages[0]["content"] == second, roles
                assert all(a != b for a, b in itertools.pairwise(roles)), roles

        await asyncio.gather(*(one(index, sid) for index, sid in enumerate(session_ids)))

        async def none_running() -> bool:
            for item in (await client.get("/api/sessions")).json():
                if (await client.get(f"/api/sessions/{item['id']}/approvals")).json()["running"]:
                    return False
            return True

        await eventually(none_running, "every turn to end")

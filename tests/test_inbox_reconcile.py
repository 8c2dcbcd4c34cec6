"""The inbox's gateway backend reads the reply from ``chat.history`` when the ``chat`` events do not
carry it (``clawlet.inbox.reconcile`` and ``GatewayBackend``).

The transcripts and events below copy the shape of a real OpenClaw 2026.9.6 trace: a message sent
while the session is busy is acked, gets an empty ``final`` (no ``message``) and is answered by a
run of its own; after a restart OpenClaw adds an internal ``[System] Your previous turn was
interrupted…`` user message and replays the turn. The backend runs against the scripted gateway
(a real WebSocket server on loopback); the real-OpenClaw versions are in
``tests/test_openclaw_interop.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from clawlet.gateway.answers import chat_history
from clawlet.gateway.client import GatewayClient
from clawlet.gateway.protocol import assistant_message
from clawlet.inbox.backends import GatewayBackend, task_session_key
from clawlet.inbox.models import Task
from clawlet.inbox.reconcile import HistoryReply, Reconciled, reply_after
from tests.support.scripted_gateway import ScriptedGateway, ScriptedRun

TOKEN = "reconcile-token"
RESTART_NOTE = (
    "[System] Your previous turn was interrupted by a gateway restart while OpenClaw was waiting on"
    " tool/model work. The restart did not cancel the user's task."
)


def user(text: str, key: str | None = None, *, internal: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": text, "timestamp": 1}
    if key is not None:
        message["idempotencyKey"] = f"{key}:user"
        message["__openclaw"] = {"id": f"id-{key}", "idempotencyKey": f"{key}:user"}
    if internal:
        message["provenance"] = {"kind": "internal_system", "sourceTool": "main_session_restart_recovery"}
    return message


def assistant(text: str, message_id: str, *, stop: str = "stop") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stopReason": stop,
        "__openclaw": {"runId": f"run-{message_id}", "id": message_id},
    }


# -- finding the reply ---------------------------------------------------------------------------


def found(history: Any, idempotency_key: str, content: str) -> Reconciled:
    """``reply_after`` on a ``chat.history`` answer as the client reads it."""
    return reply_after(chat_history(history), idempotency_key, content)


def test_the_reply_follows_the_message_with_our_idempotency_key() -> None:
    history = {
        "messages": [
            user("[slow] first", "run-a"),
            assistant("slow slow", "m-1"),
            user("second", "run-b"),
            assistant("SECOND ANSWER", "m-2"),
        ]
    }
    assert found(history, "run-b", "second") == Reconciled(True, HistoryReply("m-2", "SECOND ANSWER"))
    assert found(history, "run-a", "[slow] first").reply == HistoryReply("m-1", "slow slow")


def test_a_message_not_answered_yet_has_no_reply() -> None:
    history = {"messages": [user("[slow] first", "run-a"), user("second", "run-b")]}
    assert found(history, "run-a", "[slow] first") == Reconciled(True, None)
    assert found(history, "run-b", "second") == Reconciled(True, None)
    assert found(history, "run-c", "third") == Reconciled(False, None)
    assert found({"messages": "garbage"}, "run-a", "x") == Reconciled(False, None)


def test_a_replayed_turn_after_the_restart_note_is_the_reply() -> None:
    history = {
        "messages": [
            user("do it", "run-a"),
            assistant("let me look", "m-1", stop="toolUse"),  # not a finished reply
            {"role": "toolResult", "content": "ok"},
            user(RESTART_NOTE, "recovery", internal=True),
            assistant("done after the restart", "m-2"),
        ]
    }
    assert found(history, "run-a", "do it").reply == HistoryReply("m-2", "done after the restart")


def test_without_idempotency_keys_the_last_message_with_that_text_is_ours() -> None:
    history = {
        "messages": [user("again"), assistant("first answer", "m-1"), user("again"), assistant("", "m-2")]
    }
    assert found(history, "unknown", "again") == Reconciled(True, None)
    history["messages"].append(assistant("second answer", "m-3"))
    assert found(history, "unknown", "again").reply == HistoryReply("m-3", "second answer")


# -- the backend against a gateway ---------------------------------------------------------------


class Transcript:
    """The scripted gateway's ``chat.history`` for one session."""

    def __init__(self, gateway: ScriptedGateway) -> None:
        self.messages: list[dict[str, Any]] = []
        self.reads = 0
        gateway.methods["chat.history"] = self.history

    def history(self, params: dict[str, Any]) -> dict[str, Any]:
        self.reads += 1
        return {"sessionKey": params.get("sessionKey"), "messages": list(self.messages)}


@pytest.fixture
async def gateway() -> AsyncIterator[ScriptedGateway]:
    async with ScriptedGateway(token=TOKEN) as gw:
        yield gw


@pytest.fixture
async def client(gateway: ScriptedGateway) -> AsyncIterator[GatewayClient]:
    made = GatewayClient(gateway.url, TOKEN, request_timeout=3.0, backoff_initial=0.01, backoff_max=0.05)
    yield made
    await made.close()


TASK = Task("01TASKRECONCILE", "main", "t", False, "running", 1, 1)
MESSAGE_ID = "01MESSAGE"


async def run(backend: GatewayBackend, content: str = "second") -> tuple[Any, list[str]]:
    progress: list[str] = []
    outcome = await backend.run(TASK, content, MESSAGE_ID, progress.append)
    return outcome, progress


async def other_run_final(run: ScriptedRun, text: str) -> None:
    """The final of the run OpenClaw answers a queued message with (a runId of its own)."""
    payload = {"runId": "followup-run", "sessionKey": run.session_key, "seq": 13, "state": "final"}
    payload.update(stopReason="stop", message=assistant_message(text))
    await run.conn.event("chat", payload)


async def test_an_empty_final_is_answered_from_the_transcript_once_the_other_run_ends(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    transcript = Transcript(gateway)
    answered = asyncio.Event()

    async def busy(run: ScriptedRun) -> None:
        transcript.messages = [user("[slow] first", "run-a"), user("second", run.run_id)]
        await run.chat_event("final")  # what OpenClaw sends a message queued behind a busy run
        await answered.wait()
        transcript.messages += [assistant("SECOND ANSWER", "m-2")]
        await other_run_final(run, "SECOND ANSWER")

    gateway.chat_handler = busy
    backend = GatewayBackend(client, timeout_seconds=60)
    result = asyncio.create_task(run(backend))
    await wait_for(lambda: transcript.reads >= 1, "the transcript to be read after the empty final")
    assert not result.done(), "an empty final is not a reply"
    answered.set()
    outcome, progress = await asyncio.wait_for(result, 30)
    assert (outcome.state, outcome.text) == ("final", "SECOND ANSWER")
    assert progress[-1] == "SECOND ANSWER"
    history_reads = [f for f in gateway.requests("chat.history")]
    assert history_reads[-1]["params"]["sessionKey"] == task_session_key(TASK).lower()


@pytest.mark.slow
async def test_a_reply_never_written_fails_within_the_run_timeout(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    transcript = Transcript(gateway)

    async def empty(run: ScriptedRun) -> None:
        transcript.messages = [user("second", run.run_id)]
        await run.chat_event("final")

    gateway.chat_handler = empty
    outcome, _ = await asyncio.wait_for(run(GatewayBackend(client, timeout_seconds=1)), 30)
    assert outcome.state == "error" and outcome.text == ""
    assert outcome.error == (
        "no reply from the OpenClaw gateway within 1 s (its transcript has the message but no reply)"
    )


async def test_after_a_lost_connection_the_replayed_reply_is_read_from_the_transcript(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    transcript = Transcript(gateway)

    async def interrupted(run: ScriptedRun) -> None:
        transcript.messages = [user("do it", run.run_id)]
        await run.stream(["half an ans"])
        transcript.messages += [
            user(RESTART_NOTE, "recovery", internal=True),
            assistant("whole answer", "m-9"),
        ]
        run.conn.drop()

    gateway.chat_handler = interrupted
    outcome, progress = await asyncio.wait_for(run(GatewayBackend(client, timeout_seconds=60), "do it"), 30)
    assert (outcome.state, outcome.text) == ("final", "whole answer")
    assert progress == ["half an ans", "whole answer"]
    assert client.connects == 2, "read after the reconnect"


async def test_an_abort_ends_the_wait_for_the_transcript(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    transcript = Transcript(gateway)

    async def empty(run: ScriptedRun) -> None:
        transcript.messages = [user("second", run.run_id)]
        await run.chat_event("final")

    gateway.chat_handler = empty
    backend = GatewayBackend(client, timeout_seconds=60)
    result = asyncio.create_task(run(backend))
    await wait_for(lambda: transcript.reads >= 1, "the transcript to be read")
    await backend.abort(TASK)
    outcome, _ = await asyncio.wait_for(result, 30)
    assert outcome.state == "aborted"
    assert gateway.requests("chat.abort")


async def wait_for(predicate: Any, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def test_a_message_lost_with_the_connection_is_sent_again_once(
    gateway: ScriptedGateway, client: GatewayClient
) -> None:
    """The connection drops before the gateway recorded the message: after the reconnect the
    transcript does not have it, so it is sent again with the same idempotency key."""
    transcript = Transcript(gateway)

    async def flaky(run: ScriptedRun) -> None:
        if len(gateway.runs) == 1:
            run.conn.drop()  # lost before anything was recorded
            return
        transcript.messages = [user(run.message, run.run_id), assistant("answered the copy", "m-1")]
        await run.final("answered the copy")

    gateway.chat_handler = flaky
    outcome, _ = await asyncio.wait_for(run(GatewayBackend(client, timeout_seconds=60), "hello?"), 30)
    assert (outcome.state, outcome.text) == ("final", "answered the copy")
    sends = gateway.requests("chat.send")
    assert len(sends) == 2
    assert {s["params"]["idempotencyKey"] for s in sends} == {MESSAGE_ID}
    assert {s["params"]["message"] for s in sends} == {"hello?"}

"""The gateway's session methods as OpenClaw's TUI uses them (``sessions.create`` for ``/new``,
``sessions.reset`` for ``/reset``, ``sessions.patch`` for a label or the model picker,
``sessions.resolve``, ``sessions.delete``, ``chat.history`` paging, ``sessions.changed`` after
``sessions.subscribe``): a real server, a real WebSocket client, every frame validated against
``@openclaw/gateway-protocol``'s schema (``tests/test_openclaw_interop.py`` drives ``/new`` and
``/reset`` from the real TUI).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clawlet.config import Settings
from clawlet.gateway import server as server_module
from clawlet.gateway.server import _existing_case
from clawlet.sessions.store import TranscriptStore
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import LiveServer
from tests.support.gateway_schema import ProtocolSchema
from tests.test_gateway_server import (
    APPROVALS,
    LONG_MESSAGE,
    READ,
    WRITE,
    Client,
    gateway,
    named,
    set_policies,
)

ADMIN = "operator.admin"


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(lambda body: text_turn("Noted."), model="scripted-model") as server:
        yield server


@pytest.fixture
def scripted(
    live_server: Callable[..., LiveServer], settings: Settings, llm: ScriptedOpenAIServer
) -> LiveServer:
    return live_server(
        settings.model_copy(
            update={
                "provider": "openai",
                "llm_base_url": llm.base_url,
                "llm_model": llm.model,
                "llm_api_key": "sk-scripted-not-a-secret",
            }
        )
    )


async def chat(client: Client, key: str, message: str, run_id: str) -> None:
    await client.ok("chat.send", {"sessionKey": key, "message": message, "idempotencyKey": run_id})
    [*_, final] = await client.run_events(run_id)
    assert final["state"] == "final", final


def said(llm: ScriptedOpenAIServer) -> list[str]:
    """What the model was shown from users in its last request."""
    return [str(m["content"]) for m in llm.requests[-1]["messages"] if m["role"] == "user"]


async def changed(client: Client, reason: str) -> dict[str, Any]:
    frame = await client.event(
        lambda f: f["event"] == "sessions.changed" and f["payload"]["reason"] == reason
    )
    payload: dict[str, Any] = frame["payload"]
    return payload


async def test_new_session_as_the_tui_creates_it_then_chats_in_it(
    scripted: LiveServer, schema: ProtocolSchema, llm: ScriptedOpenAIServer
) -> None:
    async with gateway(scripted, schema, scopes=(READ, WRITE, ADMIN), client_id="openclaw-tui") as tui:
        assert await tui.ok("sessions.subscribe", {}) == {"subscribed": True}
        await chat(tui, "agent:main:first", "first words", "r1")
        # what the TUI's /new sends: a bare key with the agent, succeeding the current session
        created = await tui.ok(
            "sessions.create",
            {
                "key": "tui-1234",
                "agentId": "main",
                "parentSessionKey": "agent:main:first",
                "succeedsParent": True,
                "emitCommandHooks": True,
            },
        )
        assert created["ok"] is True and created["key"] == "agent:main:tui-1234"
        assert created["sessionId"] == "tui-1234" and created["runStarted"] is False
        assert created["entry"]["key"] == "agent:main:tui-1234"
        assert created["resolved"] == {"modelProvider": "openai", "model": "scripted-model"}
        event = await changed(tui, "create")
        assert event["sessionKey"] == "agent:main:tui-1234" and event["agentId"] == "main"
        described = await tui.ok("sessions.describe", {"key": "agent:main:tui-1234"})
        assert described["session"]["sessionId"] == "tui-1234"
        history = await tui.ok("chat.history", {"sessionKey": "agent:main:tui-1234", "limit": 200})
        assert history["messages"] == []

        await chat(tui, "agent:main:tui-1234", "in the new one", "r2")
        assert said(llm) == ["in the new one"]  # nothing of the first session
        listed = await tui.ok("sessions.list", {})
        assert {"agent:main:first", "agent:main:tui-1234"} <= {row["key"] for row in listed["sessions"]}

        # with a label and a first message: the turn starts at once
        labelled = await tui.ok(
            "sessions.create", {"label": "Trip plans", "message": "plan it", "idempotencyKey": "r3"}
        )
        assert labelled["runStarted"] is True and labelled["runId"] == "r3"
        assert labelled["entry"]["label"] == "Trip plans"
        await tui.run_events("r3")
        again = await tui.ok("sessions.create", {"key": "agent:main:tui-1234"})  # adopted as it is
        assert again["entry"]["sessionId"] == "tui-1234"
        assert len((await tui.ok("chat.history", {"sessionKey": "agent:main:tui-1234"}))["messages"]) == 2

        for params, word in (
            ({"key": "x", "fork": True, "parentSessionKey": "agent:main:first"}, "fork"),
            ({"key": "x", "permissionMode": "full"}, "permissionMode"),
            ({"key": "x", "model": "other/model"}, "one model"),
        ):
            refused = await tui.request("sessions.create", params)
            assert refused["ok"] is False and refused["error"]["code"] == "INVALID_REQUEST"
            assert word in refused["error"]["message"], refused


async def test_reset_empties_the_transcript_the_model_sees(
    scripted: LiveServer, schema: ProtocolSchema, llm: ScriptedOpenAIServer, settings: Settings
) -> None:
    key = "agent:main:keep"
    async with (
        gateway(scripted, schema, scopes=(READ, WRITE, ADMIN)) as client,
        gateway(scripted, schema) as watcher,
    ):
        await watcher.ok("sessions.subscribe", {})
        await chat(client, key, "remember the colour blue", "k1")
        await client.ok("sessions.patch", {"key": key, "label": "Colours"})
        reset = await client.ok("sessions.reset", {"key": key, "reason": "reset"})
        assert reset["ok"] is True and reset["key"] == key
        assert reset["entry"]["sessionId"] == "keep" and reset["entry"]["label"] == "Colours"
        assert (await changed(watcher, "reset"))["sessionKey"] == key
        assert (await client.ok("chat.history", {"sessionKey": key}))["messages"] == []
        await chat(client, key, "what colour?", "k2")
        assert said(llm) == ["what colour?"]

        (settings.paths.sessions / "broken.json").write_text("{not json")
        assert (await client.request("chat.history", {"sessionKey": "agent:main:broken"}))["ok"] is False
        await client.ok("sessions.reset", {"key": "agent:main:broken"})  # a corrupt one too
        assert (await client.ok("chat.history", {"sessionKey": "agent:main:broken"}))["messages"] == []
        new = await client.ok("sessions.reset", {"key": "agent:main:never-used", "reason": "new"})
        assert new["entry"]["sessionId"] == "never-used"
        bad = await client.request("sessions.reset", {"key": key, "reason": "later"}, raw=True)
        assert bad["ok"] is False and bad["error"]["code"] == "INVALID_REQUEST"
    async with gateway(scripted, schema, scopes=(READ, WRITE)) as writer:
        refused = await writer.request("sessions.reset", {"key": key})
        assert refused["ok"] is False and refused["error"]["code"] == "FORBIDDEN"


async def test_patch_resolve_and_delete(scripted: LiveServer, schema: ProtocolSchema) -> None:
    async with gateway(scripted, schema, scopes=(READ, WRITE, ADMIN)) as client:
        await client.ok("sessions.subscribe", {})
        patched = await client.ok("sessions.patch", {"key": "agent:main:notes", "label": "My notes"})
        assert patched["entry"]["label"] == "My notes" and patched["entry"]["displayName"] == "My notes"
        assert (await changed(client, "patch"))["sessionKey"] == "agent:main:notes"
        model = await client.ok(
            "sessions.patch", {"key": "agent:main:notes", "model": "openai/scripted-model"}
        )
        assert model["resolved"]["model"] == "scripted-model"
        cleared = await client.ok("sessions.patch", {"key": "agent:main:notes", "label": None})
        assert "label" not in cleared["entry"] and cleared["entry"]["displayName"] == "notes"
        await client.ok("sessions.patch", {"key": "agent:main:notes", "label": "My notes"})
        for params, word in (
            ({"key": "agent:main:notes", "model": "anthropic/claude"}, "one model"),
            ({"key": "agent:main:notes", "thinkingLevel": "high"}, "thinkingLevel"),
            ({"key": "agent:main:notes", "expectedSessionId": "other"}, "changed"),
        ):
            refused = await client.request("sessions.patch", params)
            assert refused["ok"] is False and word in refused["error"]["message"], refused

        by_label = await client.ok("sessions.resolve", {"label": "my notes"})
        assert by_label == {
            "ok": True,
            "key": "agent:main:notes",
            "agentId": "main",
            "displayName": "My notes",
        }
        assert (await client.ok("sessions.resolve", {"sessionId": "notes"}))["key"] == "agent:main:notes"
        assert (await client.ok("sessions.resolve", {"key": "notes"}))["key"] == "agent:main:notes"
        await client.ok("sessions.patch", {"key": "agent:main:twin", "label": "My notes"})
        twins = await client.ok("sessions.resolve", {"label": "My notes"})
        assert twins["ok"] is False and len(twins["candidates"]) == 2
        missing = await client.request("sessions.resolve", {"key": "agent:main:nothing"})
        assert missing["ok"] is False and "No session found" in missing["error"]["message"]
        allowed = await client.ok("sessions.resolve", {"key": "agent:main:nothing", "allowMissing": True})
        assert allowed["key"] == "agent:main:nothing"

        deleted = await client.ok("sessions.delete", {"key": "agent:main:twin"})
        assert deleted == {"ok": True, "key": "agent:main:twin", "deleted": True, "archived": []}
        assert (await changed(client, "delete"))["sessionKey"] == "agent:main:twin"
        assert (await client.ok("sessions.describe", {"key": "agent:main:twin"}))["session"] is None
        gone = await client.ok("sessions.delete", {"key": "agent:main:twin"})
        assert gone["deleted"] is False
        kept = await client.request("sessions.delete", {"key": "agent:main:notes", "deleteTranscript": False})
        assert kept["ok"] is False and "deleteTranscript" in kept["error"]["message"]


async def test_without_subscribing_no_sessions_changed(scripted: LiveServer, schema: ProtocolSchema) -> None:
    async with (
        gateway(scripted, schema, scopes=(READ, WRITE, ADMIN)) as actor,
        gateway(scripted, schema) as quiet,
    ):
        await actor.ok("sessions.patch", {"key": "agent:main:a", "label": "A"})
        await actor.ok("sessions.subscribe", {})
        await actor.ok("sessions.patch", {"key": "agent:main:a", "label": "B"})
        await changed(actor, "patch")
        await quiet.ok("health", {})  # anything queued before this answer has arrived
        assert not [f for f in quiet.events if f["event"] == "sessions.changed"]


async def test_chat_history_pages_back_by_offset(scripted: LiveServer, schema: ProtocolSchema) -> None:
    key = "agent:main:long"
    async with gateway(scripted, schema) as client:
        for index in range(3):
            await chat(client, key, f"message {index} " + "x" * 50, f"h{index}")
        newest = await client.ok("chat.history", {"sessionKey": key, "limit": 2, "offset": 0})
        assert [m["role"] for m in newest["messages"]] == ["user", "assistant"]
        assert newest["messages"][0]["content"][0]["text"].startswith("message 2")
        assert newest["totalMessages"] == 6 and newest["hasMore"] is True and newest["nextOffset"] == 2
        older = await client.ok("chat.history", {"sessionKey": key, "limit": 4, "offset": 2})
        assert older["messages"][0]["content"][0]["text"].startswith("message 0")
        assert older["hasMore"] is False and "nextOffset" not in older
        cut = await client.ok("chat.history", {"sessionKey": key, "limit": 1, "maxChars": 9})
        assert cut["messages"][0]["content"][0]["text"] == "Noted."
        user = await client.ok("chat.history", {"sessionKey": key, "limit": 2, "maxChars": 9})
        assert user["messages"][0]["content"][0]["text"] == "message 2"
        refused = await client.request("chat.history", {"sessionKey": key, "cursor": "abc"})
        assert refused["ok"] is False and "offset" in refused["error"]["message"]
        wrong = await client.request("chat.history", {"sessionKey": key, "sessionId": "other"})
        assert wrong["ok"] is False and wrong["error"]["code"] == "INVALID_REQUEST"


async def test_compact_summarises_the_first_half(
    scripted: LiveServer, schema: ProtocolSchema, llm: ScriptedOpenAIServer
) -> None:
    key = "agent:main:chatty"
    async with gateway(scripted, schema, scopes=(READ, WRITE, ADMIN)) as client:
        await client.ok("sessions.subscribe", {})
        missing = await client.ok("sessions.compact", {"key": "agent:main:none"})
        assert missing == {
            "ok": True,
            "key": "agent:main:none",
            "compacted": False,
            "reason": "no transcript",
        }
        await chat(client, key, "one", "c1")
        short = await client.ok("sessions.compact", {"key": key})
        assert short["compacted"] is False and "at least 4 messages" in short["reason"]
        await chat(client, key, "two", "c2")
        done = await client.ok("sessions.compact", {"key": key})
        assert done["compacted"] is True and done["archivedCount"] == 4 and done["remainingCount"] == 0
        assert (await changed(client, "compact"))["sessionKey"] == key
        assert "summar" in json.dumps(llm.requests[-1]["messages"]).lower()  # the model was asked
        await chat(client, key, "three", "c3")
        assert said(llm) == ["three"]  # the first half is archived: only its summary goes along
        refused = await client.request("sessions.compact", {"key": key, "maxLines": 10})
        assert refused["ok"] is False and "maxLines" in refused["error"]["message"]


@pytest.mark.slow
async def test_reset_stops_a_running_turn_and_a_paused_one(
    live_server: Callable[..., LiveServer], settings: Settings, schema: ProtocolSchema
) -> None:
    server = live_server(settings, demo_token_delay=0.05)
    set_policies(server, {"python_repl": "ask"})
    scopes = (READ, WRITE, APPROVALS, ADMIN)
    async with gateway(server, schema, scopes=scopes, caps=("approvals",)) as client:
        await client.ok(
            "chat.send", {"sessionKey": "agent:main:busy", "message": LONG_MESSAGE, "idempotencyKey": "b1"}
        )
        await client.event(lambda f: f["event"] == "chat" and f["payload"]["state"] == "delta")
        await client.ok("sessions.reset", {"key": "agent:main:busy"})
        assert (await client.run_events("b1"))[-1]["state"] == "aborted"
        assert (await client.ok("chat.history", {"sessionKey": "agent:main:busy"}))["messages"] == []

        await client.ok(
            "chat.send",
            {"sessionKey": "agent:main:paused", "message": "python: 6 * 7", "idempotencyKey": "p1"},
        )
        await client.event(named("plugin.approval.requested"))
        await client.ok("sessions.reset", {"key": "agent:main:paused"})
        assert (await client.run_events("p1"))[-1]["state"] == "aborted"
        assert (await client.ok("chat.history", {"sessionKey": "agent:main:paused"}))["messages"] == []
        again = await client.ok(
            "chat.send", {"sessionKey": "agent:main:paused", "message": "hello", "idempotencyKey": "p2"}
        )
        assert again["status"] == "started"
        assert (await client.run_events("p2"))[-1]["state"] == "final"


def test_a_session_key_finds_a_capitalised_transcript_by_the_names_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys are lower-cased: ``mychat`` finds ``MyChat.json``; a new key reads the directory's names
    (no ``Path`` made and matched per session, which every new ``chat.send`` paid)."""
    store = TranscriptStore(tmp_path / "sessions")
    assert _existing_case(store, "mychat") == "mychat"  # no directory yet
    for session_id in ("MyChat", "other", "Upper.JSON-not"):
        store.append(session_id, "user", "hi")
    (store.directory / "Shout.JSON").write_text("{}", encoding="utf-8")  # not a transcript's name

    def no_glob(self: Path, pattern: str) -> Iterator[Path]:
        raise AssertionError(f"globbed {self}/{pattern}")

    monkeypatch.setattr(Path, "glob", no_glob)
    assert _existing_case(store, "mychat") == "MyChat"
    assert _existing_case(store, "other") == "other"
    assert _existing_case(store, "shout") == "shout"
    assert _existing_case(store, "new-key") == "new-key"


async def test_a_new_key_in_a_small_sessions_directory_is_searched_without_a_worker_thread(
    scripted: LiveServer, schema: ProtocolSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of ``chat.send`` to new keys on one connection: each key's search for another
    spelling went to a worker thread, and each waited for the busy loop to take its answer back
    before the next frame was read. A small directory is read on the loop; a large one still on a
    thread (its listing would hold the loop)."""
    searched: list[tuple[str, bool]] = []
    search = server_module._existing_case

    def on_the_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread
            return False
        return True

    def counted(store: Any, session_id: str) -> str:
        searched.append((session_id, on_the_loop()))
        return search(store, session_id)

    monkeypatch.setattr(server_module, "_existing_case", counted)
    async with gateway(scripted, schema, scopes=(READ, WRITE)) as client:
        await chat(client, "agent:main:first-new", "one", "run-1")
        assert searched == [("first-new", True)]
        monkeypatch.setattr(server_module, "SMALL_DIRECTORY_BYTES", 0)
        await chat(client, "agent:main:second-new", "two", "run-2")
        assert searched[-1] == ("second-new", False)


async def test_a_key_of_a_stored_session_is_resolved_without_a_worker_thread(
    scripted: LiveServer, schema: ProtocolSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[str] = []
    search = server_module._existing_case

    def counted(store: Any, session_id: str) -> str:
        searched.append(session_id)
        return search(store, session_id)

    monkeypatch.setattr(server_module, "_existing_case", counted)
    async with gateway(scripted, schema, scopes=(READ, WRITE)) as client:
        await chat(client, "agent:main:kept", "one", "run-1")
        assert searched == ["kept"]  # new: its directory is searched for another spelling
        await chat(client, "agent:main:kept", "two", "run-2")
        assert searched == ["kept"]  # stored under that very name: one stat

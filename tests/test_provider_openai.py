"""The real OpenAI-compatible provider path, end to end, against a scripted LLM server.

Each test starts a ``ScriptedOpenAIServer`` (a real HTTP server on loopback speaking OpenAI's
streaming wire format) and a real clawlet server configured with ``provider="openai"`` pointing
at it, so the whole chain runs: langchain-openai's HTTP client, ``create_agent``, the tools, the
event translation, the SSE edge and the transcript store.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

import httpx
import pytest
from pytest_socket import SocketConnectBlockedError

from clawlet.config import Settings
from clawlet.engine.titles import MAX_TITLE_CHARS
from clawlet.llm.demo import TITLE_REQUEST_MARKER
from clawlet.testing.scripted_openai import (
    ScriptedOpenAIServer,
    ToolCall,
    Turn,
    split_text,
    text_turn,
    tool_turn,
)
from tests.conftest import LiveServer, parse_sse
from tests.support.transcripts import calls_shown

CORE_TOOLS = {"terminal", "python_repl", "fetch_url", "read_file", "search_knowledge_base"}

SseEvents = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def scripted() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def openai_server(
    settings: Settings, scripted: ScriptedOpenAIServer, live_server: Callable[..., LiveServer]
) -> Callable[..., LiveServer]:
    """Factory: a clawlet server whose provider is the scripted OpenAI-compatible endpoint."""

    def start(**overrides: Any) -> LiveServer:
        custom = Settings(
            provider="openai",
            llm_base_url=scripted.base_url,
            llm_model="scripted-model",
            llm_api_key="test-key",
            **overrides,
        )
        assert custom.paths.root == settings.paths.root  # the temp home, already initialised
        return live_server(custom)

    return start


def chat(server: LiveServer, message: str, session_id: str) -> SseEvents:
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": message, "session_id": session_id, "stream": True},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)  # type: ignore[return-value]


def collapsed_names(events: SseEvents) -> list[str]:
    names = [name for name, _ in events]
    return [name for i, name in enumerate(names) if i == 0 or name != names[i - 1]]


def tokens(events: SseEvents) -> list[str]:
    return [data["content"] for name, data in events if name == "token"]


STREAMING_PACE = 0.05
"""Seconds between a scripted answer's chunks where a test looks at how the answer streams: like a
real model's, each chunk is relayed before the next comes (an instant upstream's burst may come
merged into fewer tokens: the run's watchers join the text that piled up, see ``Run.events``)."""


def relayed_whole(relayed: list[str], deltas: list[str]) -> bool:
    """Whether the relayed tokens are the model's deltas, each one or more whole deltas in order."""
    ends = set(accumulate(len(delta) for delta in deltas))
    return "".join(relayed) == "".join(deltas) and set(accumulate(len(token) for token in relayed)) <= ends


def one(events: SseEvents, name: str) -> dict[str, Any]:
    found = [data for event, data in events if event == name]
    assert len(found) == 1, f"expected exactly one {name!r} event, got {found}"
    return found[0]


def load_session(server: LiveServer, session_id: str) -> dict[str, Any]:
    path = server.settings.paths.sessions / f"{session_id}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def is_title_request(body: dict[str, Any]) -> bool:
    first = body["messages"][0]
    return first["role"] == "system" and TITLE_REQUEST_MARKER in str(first["content"])


def agent_requests(scripted: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    return [body for body in scripted.requests if not is_title_request(body)]


# -- text turns and titles -----------------------------------------------------------------------


def test_text_turn_streams_tokens_then_done_then_title(
    scripted: ScriptedOpenAIServer, openai_server: Callable[..., LiveServer]
) -> None:
    answer = "Hello from the scripted model, streamed in pieces!"
    scripted.set_script([text_turn(answer, delay=STREAMING_PACE), text_turn("Greetings")])
    server = openai_server()

    events = chat(server, "Say hello", "t1")

    assert collapsed_names(events) == ["token", "done", "title"]
    assert relayed_whole(tokens(events), split_text(answer))
    assert len(tokens(events)) > 1
    assert "".join(tokens(events)) == answer
    assert one(events, "done") == {"type": "done", "content": answer, "session_id": "t1"}
    assert one(events, "title") == {"type": "title", "session_id": "t1", "title": "Greetings"}

    assert scripted.errors == [] and scripted.remaining_turns == 0
    agent_call, title_call = scripted.requests
    assert agent_call["model"] == "scripted-model" and agent_call["stream"] is True
    assert agent_call["messages"][-1] == {"role": "user", "content": "Say hello"}
    assert is_title_request(title_call) and "tools" not in title_call
    assert title_call["stream"] is False  # nobody watches a title come
    assert "user: Say hello" in title_call["messages"][-1]["content"]
    assert answer in title_call["messages"][-1]["content"]

    stored = load_session(server, "t1")
    assert stored["title"] == "Greetings"
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [
        ("user", "Say hello"),
        ("assistant", answer),
    ]


@pytest.mark.parametrize(
    ("scripted_title", "expected"),
    [
        ("《天气查询》", "天气查询"),  # quotes stripped, Chinese kept
        ("关于今天北京天气情况的详细询问与建议", "关于今天北京天气情况"),  # cut to 10 characters
        ('"A rather long English title."', "A rather l"),
    ],
)
def test_title_is_cleaned_and_at_most_ten_characters(
    scripted: ScriptedOpenAIServer,
    openai_server: Callable[..., LiveServer],
    scripted_title: str,
    expected: str,
) -> None:
    answer = "今天北京晴，气温 25 度，适合出行。"
    scripted.set_script([text_turn(answer, delay=STREAMING_PACE), text_turn(scripted_title)])
    server = openai_server()

    events = chat(server, "今天北京天气怎么样？", "zh")

    assert "".join(tokens(events)) == answer
    assert len(tokens(events)) > 1
    title = one(events, "title")["title"]
    assert title == expected
    assert len(title) <= MAX_TITLE_CHARS
    assert load_session(server, "zh")["title"] == expected
    assert scripted.remaining_turns == 0 and scripted.errors == []


def test_second_turn_sends_history_and_asks_no_new_title(
    scripted: ScriptedOpenAIServer, openai_server: Callable[..., LiveServer]
) -> None:
    scripted.set_script([text_turn("First answer."), text_turn("Opening"), text_turn("Second answer.")])
    server = openai_server()

    chat(server, "first question", "h1")
    events = chat(server, "second question", "h1")

    assert collapsed_names(events) == ["token", "done"]
    assert "".join(tokens(events)) == "Second answer."
    last = scripted.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in last[1:]] == [
        ("user", "first question"),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    assert len(scripted.requests) == 3 and scripted.errors == []


# -- what the model is sent ----------------------------------------------------------------------


def test_request_carries_system_prompt_and_the_five_tool_schemas(
    scripted: ScriptedOpenAIServer, openai_server: Callable[..., LiveServer]
) -> None:
    scripted.set_script([text_turn("ok"), text_turn("Check")])
    server = openai_server()
    chat(server, "hello", "p1")

    first = scripted.requests[0]
    system = first["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("<!-- Skills Snapshot -->")
    for tag in ("<!-- Soul -->", "<!-- Identity -->", "<!-- Agents Guide -->", "<!-- Long-term Memory -->"):
        assert tag in system["content"]
    snapshot = server.settings.paths.skills_snapshot.read_text(encoding="utf-8").strip()
    assert snapshot and snapshot in system["content"]

    tools = {tool["function"]["name"]: tool for tool in first["tools"]}
    assert set(tools) >= CORE_TOOLS  # the five core tools (further tools may be added)
    assert len(tools) == len(first["tools"])  # no tool sent twice
    for tool in first["tools"]:
        assert tool["type"] == "function"
        assert tool["function"]["description"]
        assert tool["function"]["parameters"]["type"] == "object"
    terminal = tools["terminal"]["function"]
    assert terminal["description"]
    assert terminal["parameters"]["properties"]["command"]["type"] == "string"
    assert terminal["parameters"]["required"] == ["command"]
    assert tools["read_file"]["function"]["parameters"]["required"] == ["path"]
    assert first["stream_options"] == {"include_usage": True}


# -- tool calls ----------------------------------------------------------------------------------


def test_tool_call_turn_runs_the_tool_and_records_segments(
    scripted: ScriptedOpenAIServer, openai_server: Callable[..., LiveServer]
) -> None:
    call = ToolCall("terminal", {"command": "echo hi"}, id="call_echo_1", argument_chunks=4)
    scripted.set_script(
        [
            tool_turn(call, text="Let me run that."),
            text_turn("The command printed hi."),
            text_turn("Echo test"),
        ]
    )
    server = openai_server()

    events = chat(server, "please run echo hi", "tc")

    assert collapsed_names(events) == [
        "token",
        "tool_start",
        "tool_end",
        "new_response",
        "token",
        "done",
        "title",
    ]
    assert one(events, "tool_start") == {
        "type": "tool_start",
        "tool": "terminal",
        "input": "echo hi",
        "call_id": "call_echo_1",
    }
    assert one(events, "tool_end") == {
        "type": "tool_end",
        "tool": "terminal",
        "output": "hi",
        "is_error": False,
        "call_id": "call_echo_1",
    }
    names = [name for name, _ in events]
    before_tool = tokens(events[: names.index("tool_start")])
    after_tool = tokens(events[names.index("new_response") :])
    assert "".join(before_tool) == "Let me run that."
    assert "".join(after_tool) == "The command printed hi."
    assert one(events, "done")["content"] == "Let me run that.\n\nThe command printed hi."

    assert scripted.errors == [] and scripted.remaining_turns == 0
    followup = scripted.requests[1]["messages"]
    assistant = followup[-2]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_echo_1"]
    assert assistant["tool_calls"][0]["function"]["name"] == "terminal"
    # The arguments split over several deltas were reassembled into the original JSON.
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"command": "echo hi"}
    assert followup[-1] == {"role": "tool", "content": "hi", "tool_call_id": "call_echo_1"}

    stored = load_session(server, "tc")
    messages = stored["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[0]["content"] == "please run echo hi"
    assert messages[1]["content"] == "Let me run that."
    assert calls_shown(messages[1]["tool_calls"]) == [
        {"tool": "terminal", "input": "echo hi", "output": "hi"}
    ]
    assert messages[2]["content"] == "The command printed hi."
    assert "tool_calls" not in messages[2]
    assert stored["title"] == "Echo test"


@pytest.mark.parametrize(
    ("call", "error_text"),
    [
        (ToolCall("read_file", {"path": "../../etc/passwd"}), "Error from read_file"),
        (ToolCall("terminal", {"command": "rm -rf /"}), "refused by the safety blacklist"),
        (ToolCall("no_such_tool", {"x": 1}), "no_such_tool"),
    ],
    ids=["path-escape", "blacklisted-command", "unknown-tool"],
)
def test_failing_tool_becomes_an_error_message_and_the_run_finishes(
    scripted: ScriptedOpenAIServer,
    openai_server: Callable[..., LiveServer],
    call: ToolCall,
    error_text: str,
) -> None:
    scripted.set_script([tool_turn(call), text_turn("That did not work."), text_turn("Failure")])
    server = openai_server()

    events = chat(server, "try something", "fail")

    names = collapsed_names(events)
    assert "error" not in names
    assert names[-2:] == ["done", "title"]
    assert "".join(tokens(events)) == "That did not work."
    assert one(events, "done")["content"] == "That did not work."

    assert scripted.errors == [] and len(scripted.requests) == 3
    tool_message = scripted.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert error_text in tool_message["content"]
    if call.name != "no_such_tool":  # a real tool raised: the SSE edge flags the error
        tool_end = one(events, "tool_end")
        assert tool_end["is_error"] is True and error_text in tool_end["output"]
    if call.name == "read_file":
        assert "root:" not in tool_message["content"]  # nothing from /etc/passwd leaked


def test_model_call_cap_ends_the_run_cleanly(
    scripted: ScriptedOpenAIServer, openai_server: Callable[..., LiveServer]
) -> None:
    counter = {"n": 0}

    def always_a_tool_call(body: dict[str, Any]) -> Turn:
        if is_title_request(body):
            return text_turn("Loop")
        counter["n"] += 1
        return tool_turn(ToolCall("terminal", {"command": f"echo step{counter['n']}"}))

    scripted.set_script(always_a_tool_call)
    server = openai_server(max_model_calls=3)

    events = chat(server, "loop forever", "cap")

    names = collapsed_names(events)
    assert "error" not in names
    assert names[-3:] == ["token", "done", "title"]
    assert "limit of 3 model calls" in one(events, "done")["content"]
    calls = agent_requests(scripted)
    assert len(calls) == 3  # the cap, not the (unbounded) script, ended the run
    assert counter["n"] == 3
    assert [data["output"] for name, data in events if name == "tool_end"] == ["step1", "step2", "step3"]
    # Each follow-up request carries every earlier tool result.
    assert [m["content"] for m in calls[-1]["messages"] if m["role"] == "tool"] == ["step1", "step2"]
    assert scripted.errors == []
    stored = load_session(server, "cap")
    assert stored["messages"][0] == {"role": "user", "content": "loop forever"}
    assert "CLAWLET_MAX_MODEL_CALLS" in stored["messages"][-1]["content"]
    recorded = [c["output"] for m in stored["messages"][1:] for c in m.get("tool_calls") or []]
    assert recorded == ["step1", "step2", "step3"]


# -- the network guard ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:A test tried to use socket:UserWarning")
def test_network_guard_blocks_non_loopback_connections() -> None:
    with pytest.raises(SocketConnectBlockedError):
        socket.create_connection(("203.0.113.1", 80), timeout=1)
    with pytest.raises(SocketConnectBlockedError):
        httpx.get("http://203.0.113.1/v1/models", timeout=1)


def test_network_guard_still_allows_loopback(scripted: ScriptedOpenAIServer) -> None:
    response = httpx.get(f"{scripted.base_url}/models", timeout=5)
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "scripted-model"

"""The offline demo model: its phrasings, tool answers, streaming and determinism."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from clawlet.llm.demo import (
    HINTS,
    RETRIEVAL_HEADER,
    SUMMARY_REQUEST_MARKER,
    TITLE_REQUEST_MARKER,
    DemoChatModel,
    plan_reply,
)
from clawlet.llm.replying import split_tokens
from clawlet.tools.registry import TOOL_NAMES

ALL_TOOLS = set(TOOL_NAMES)


@pytest.mark.parametrize(
    ("message", "tool", "args", "text"),
    [
        ("run: ls -la", "terminal", {"command": "ls -la"}, "Running `ls -la` in the terminal."),
        ("RUN:echo hi", "terminal", {"command": "echo hi"}, "Running `echo hi` in the terminal."),
        ("运行：ls", "terminal", {"command": "ls"}, "Running `ls` in the terminal."),
        ("运行: pwd", "terminal", {"command": "pwd"}, "Running `pwd` in the terminal."),
        ("python: 1 + 1", "python_repl", {"code": "1 + 1"}, "Running that Python code."),
        (
            "py: print(1)\nprint(2)",
            "python_repl",
            {"code": "print(1)\nprint(2)"},
            "Running that Python code.",
        ),
        ("python：x = 1", "python_repl", {"code": "x = 1"}, "Running that Python code."),
        (
            "read workspace/SOUL.md",
            "read_file",
            {"path": "workspace/SOUL.md"},
            "Reading `workspace/SOUL.md`.",
        ),
        ("read: memory/MEMORY.md", "read_file", {"path": "memory/MEMORY.md"}, "Reading `memory/MEMORY.md`."),
        ("读取：skills", "read_file", {"path": "skills"}, "Reading `skills`."),
        (
            "fetch https://example.com/a",
            "fetch_url",
            {"url": "https://example.com/a"},
            "Fetching https://example.com/a.",
        ),
        ("抓取 http://x.test", "fetch_url", {"url": "http://x.test"}, "Fetching http://x.test."),
        (
            "search 龙井",
            "search_knowledge_base",
            {"query": "龙井"},
            "Searching the knowledge base for “龙井”.",
        ),
        (
            "搜索：green tea",
            "search_knowledge_base",
            {"query": "green tea"},
            "Searching the knowledge base for “green tea”.",
        ),
        ("remember: I like tea", "save_memory", {"fact": "I like tea"}, "I'll remember that."),
        ("记住：我喜欢绿茶", "save_memory", {"fact": "我喜欢绿茶"}, "I'll remember that."),
        (
            "What's the weather in Paris?",
            "read_file",
            {"path": "skills/get_weather/SKILL.md"},
            "Let me read the get_weather skill first.",
        ),
        (
            "北京今天天气怎么样",
            "read_file",
            {"path": "skills/get_weather/SKILL.md"},
            "Let me read the get_weather skill first.",
        ),
    ],
)
def test_plan_reply_for_each_phrasing(message: str, tool: str, args: dict[str, str], text: str) -> None:
    reply = plan_reply([HumanMessage(message)], ALL_TOOLS)
    assert reply.tool_name == tool
    assert reply.tool_args == args
    assert reply.text == text


def test_plain_text_gets_a_labelled_echo_with_hints() -> None:
    reply = plan_reply([HumanMessage("  hello there  ")], ALL_TOOLS)
    assert reply.tool_name is None
    assert (
        reply.text
        == f"[demo] I am clawlet's offline demo model, not a real LLM. You said: “hello there”. {HINTS}"
    )
    # "read" with several words is not a file read.
    assert plan_reply([HumanMessage("read the docs please")], ALL_TOOLS).tool_name is None


def test_answers_from_a_tool_result() -> None:
    history = [
        HumanMessage("run: echo hi"),
        AIMessage("", tool_calls=[{"name": "terminal", "args": {}, "id": "1"}]),
    ]
    ok = plan_reply([*history, ToolMessage("hi\n", tool_call_id="1", name="terminal")], ALL_TOOLS)
    assert ok.tool_name is None
    assert ok.text == "[demo] `terminal` returned:\n\n```\nhi\n```"
    failed = plan_reply(
        [
            *history,
            ToolMessage("Error from terminal: boom", tool_call_id="1", name="terminal", status="error"),
        ],
        ALL_TOOLS,
    )
    assert (
        failed.text == "[demo] The `terminal` tool reported an error:\n\n```\nError from terminal: boom\n```"
    )
    weather = plan_reply(
        [
            HumanMessage("天气"),
            ToolMessage("name: get_weather\nuse wttr.in", tool_call_id="2", name="read_file"),
        ],
        ALL_TOOLS,
    )
    assert weather.text.startswith("[demo] The get_weather skill says to fetch wttr.in")
    assert weather.text.endswith("name: get_weather\nuse wttr.in")


def test_a_tool_that_is_not_bound_is_reported_unavailable() -> None:
    reply = plan_reply([HumanMessage("run: ls")], set())
    assert reply.tool_name is None
    assert reply.text == "[demo] The `terminal` tool is not available in this run."
    weather = plan_reply([HumanMessage("weather?")], {"terminal"})
    assert weather.text == "[demo] The `read_file` tool is not available in this run."


def test_title_summary_and_retrieval_requests() -> None:
    title = plan_reply(
        [
            SystemMessage(f"{TITLE_REQUEST_MARKER}: short"),
            HumanMessage("user: run: echo hello world\nassistant: x"),
        ],
        set(),
    )
    assert title.text == "echo hello"
    summary = plan_reply(
        [SystemMessage(SUMMARY_REQUEST_MARKER), HumanMessage("user: a\nassistant: b")], set()
    )
    assert summary.text == "[demo summary] user: a\nassistant: b"
    recalled = plan_reply(
        [HumanMessage(f"{RETRIEVAL_HEADER}\n1. (memory/MEMORY.md) 喜欢绿茶"), HumanMessage("我喜欢什么")],
        ALL_TOOLS,
    )
    assert recalled.text == "[demo] Here is what I remember that may help:\n\n1. (memory/MEMORY.md) 喜欢绿茶"


def test_split_tokens_keeps_text_and_splits_chinese_per_character() -> None:
    text = "Hello  world, 你好世界！ok\n\nbye"
    pieces = split_tokens(text)
    assert "".join(pieces) == text
    assert pieces[:2] == ["Hello", "  world,"]
    assert pieces[3:8] == ["你", "好", "世", "界", "！"]


@tool
def terminal(command: str) -> str:
    """Run a command."""
    return command


async def test_astream_yields_token_chunks_and_a_tool_call_chunk() -> None:
    model = DemoChatModel().bind_tools([terminal])
    chunks = [chunk async for chunk in model.astream([HumanMessage("运行：echo 你好世界")])]
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    texts = [chunk.text for chunk in chunks if chunk.text]
    assert len(texts) >= 6
    assert "".join(texts) == "Running `echo 你好世界` in the terminal."
    assert "你" in texts and "好" in texts
    tool_chunks = [c for chunk in chunks for c in chunk.tool_call_chunks]
    assert len(tool_chunks) == 1
    assert tool_chunks[0]["name"] == "terminal"
    assert tool_chunks[0]["args"] == '{"command": "echo 你好世界"}'
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert merged.tool_calls == [
        {
            "name": "terminal",
            "args": {"command": "echo 你好世界"},
            "id": merged.tool_calls[0]["id"],
            "type": "tool_call",
        }
    ]
    assert str(merged.tool_calls[0]["id"]).startswith("call_demo_")


async def test_astream_honours_the_token_delay() -> None:
    import time

    model = DemoChatModel(token_delay=0.01)
    started = time.monotonic()
    chunks = [chunk async for chunk in model.astream([HumanMessage("你好你好你好你好你好")])]
    assert time.monotonic() - started >= 0.01 * len(chunks) * 0.8


def test_sync_stream_matches_async_text() -> None:
    model = DemoChatModel()
    text = "".join(chunk.text for chunk in model.stream([HumanMessage("hi")]))
    assert text == plan_reply([HumanMessage("hi")], set()).text


def test_invoke_returns_an_ai_message_with_tool_calls() -> None:
    model = DemoChatModel().bind_tools([terminal])
    message = model.invoke([HumanMessage("run: date")])
    assert isinstance(message, AIMessage)
    assert message.text == "Running `date` in the terminal."
    assert len(message.tool_calls) == 1
    assert message.tool_calls[0]["name"] == "terminal"
    assert message.tool_calls[0]["args"] == {"command": "date"}
    unbound = DemoChatModel().invoke([HumanMessage("run: date")])
    assert unbound.tool_calls == []


def test_replies_are_deterministic() -> None:
    model = DemoChatModel().bind_tools([terminal])
    conversations = [[HumanMessage("run: ls")], [HumanMessage("你好")], [HumanMessage("weather")]]
    for messages in conversations:
        first, second = model.invoke(messages), model.invoke(messages)
        assert first.text == second.text
        assert [(c["name"], c["args"]) for c in first.tool_calls] == [
            (c["name"], c["args"]) for c in second.tool_calls
        ]
        assert plan_reply(messages, {"terminal"}) == plan_reply(messages, {"terminal"})

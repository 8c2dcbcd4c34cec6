"""``FunctionModel`` on its own: a streamed reply merges back into what the function returned, tool
calls included, and every copy ``bind_tools`` makes records into one list of calls."""

from __future__ import annotations

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.tools import tool

from clawlet.testing.function_model import CallInfo, FunctionModel, reply, tool_call


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


def script(messages: list[BaseMessage], info: CallInfo) -> str | AIMessage:
    if not info.tools:
        return "No tools, 没有工具."
    return reply(
        "Looking both up.",
        tool_call("lookup", {"city": "北京"}, call_id="a"),
        tool_call("lookup", {"city": "Paris"}, call_id="b"),
        usage={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    )


async def test_a_streamed_reply_keeps_its_text_tool_calls_and_usage() -> None:
    model = FunctionModel(script)
    bound = model.bind_tools([lookup], tool_choice="auto")

    chunks = [chunk async for chunk in bound.astream([HumanMessage("weather?")])]

    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    assert len([chunk for chunk in chunks if chunk.text]) > 2
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.text == "Looking both up."
    assert [(call["name"], call["args"], call["id"]) for call in merged.tool_calls] == [
        ("lookup", {"city": "北京"}, "a"),
        ("lookup", {"city": "Paris"}, "b"),
    ]
    assert merged.usage_metadata is not None and merged.usage_metadata["output_tokens"] == 2
    ((messages, info),) = model.calls  # the bound copy recorded into the model's list
    assert messages[0].text == "weather?"
    assert info.tool_names == ["lookup"] and info.options == {"tool_choice": "auto"}


def test_invoke_and_stream_answer_alike_without_tools() -> None:
    model = FunctionModel(script)
    assert model.invoke("hi").text == "No tools, 没有工具."
    assert "".join(chunk.text for chunk in model.stream("hi")) == "No tools, 没有工具."
    assert len(model.calls) == 2

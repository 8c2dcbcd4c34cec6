"""Agent turns of the engine itself, its model an in-process ``FunctionModel`` the test writes.

No HTTP server, no demo-model phrasing: each test says what the model answers as a function of the
messages it is sent, runs ``AgentEngine.stream`` and checks the events and what the model saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from clawlet.config import Settings
from clawlet.engine import agent as agent_module
from clawlet.engine.agent import AgentEngine
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.prompt import RAG_MEMORY_NOTE
from clawlet.engine.tool_approvals import PausePoint
from clawlet.events import Event, NewSegment, Retrieval, TextDelta, Thinking, ToolEnd, ToolStart, Usage
from clawlet.llm.demo import RETRIEVAL_HEADER
from clawlet.llm.providers import ProviderConfigError
from clawlet.services import build_services
from clawlet.testing.function_model import CallInfo, FunctionModel, reply, tool_call

Reply = str | AIMessage


def engine_with(settings: Settings, function: Callable[[list[BaseMessage], CallInfo], Reply]) -> AgentEngine:
    return build_services(settings, model=FunctionModel(function)).engine


async def turn(
    engine: AgentEngine,
    message: str,
    history: list[dict[str, str]] | None = None,
    context: RunContext = DEFAULT_CONTEXT,
) -> list[Event]:
    return [event async for event in engine.stream(message, history or [], context)]


def text_of(events: list[Event]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def calls_of(engine: AgentEngine) -> list[tuple[list[BaseMessage], CallInfo]]:
    model = engine.build_model()
    assert isinstance(model, FunctionModel)
    return model.calls


def system_prompt_of(messages: list[BaseMessage]) -> str:
    (system,) = [message for message in messages if isinstance(message, SystemMessage)]
    return system.text


def read_then_answer(messages: list[BaseMessage], info: CallInfo) -> Reply:
    """Read the soul file, then say what it holds."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return f"The soul file says: {last.text.strip()}"
    return reply("Let me read it.", tool_call("read_file", {"path": "workspace/SOUL.md"}, call_id="c1"))


async def test_a_tool_call_its_result_and_the_final_text_stream_in_order(settings: Settings) -> None:
    (settings.paths.workspace / "SOUL.md").write_text("Be brief.\n", encoding="utf-8")
    engine = engine_with(settings, read_then_answer)

    events = await turn(engine, "what does your soul say?")

    kinds = [type(event) for event in events]
    first_end = kinds.index(ToolStart)
    assert set(kinds[:first_end]) == {TextDelta}
    assert kinds[first_end : first_end + 3] == [ToolStart, ToolEnd, NewSegment]
    assert set(kinds[first_end + 3 :]) == {TextDelta}
    assert len([kind for kind in kinds if kind is TextDelta]) > 2  # streamed in pieces, not at once
    start = next(event for event in events if isinstance(event, ToolStart))
    end = next(event for event in events if isinstance(event, ToolEnd))
    assert (start.tool, start.input, start.call_id) == ("read_file", "workspace/SOUL.md", "c1")
    assert (end.tool, end.call_id, end.is_error) == ("read_file", "c1", False)
    assert "Be brief." in end.output
    assert text_of(events) == f"Let me read it.The soul file says: {end.output.strip()}"

    (first, info), (second, _) = calls_of(engine)
    assert "<!-- Soul -->\nBe brief." in system_prompt_of(first)
    assert isinstance(first[-1], HumanMessage) and first[-1].text == "what does your soul say?"
    assert info.tool_names == [name for name in engine.tool_names() if name != "ask_user"]  # none may ask
    assert isinstance(second[-1], ToolMessage) and second[-1].tool_call_id == "c1"


async def test_a_raising_tool_becomes_an_error_result_and_the_run_goes_on(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool
    def explode(what: str) -> str:
        """Always fails."""
        raise ValueError(f"kaput: {what}")

    def script(messages: list[BaseMessage], info: CallInfo) -> Reply:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"That failed ({last.status})."
        return reply("", tool_call("explode", {"what": "the lab"}))

    engine = engine_with(settings, script)
    built = engine.build_tools
    monkeypatch.setattr(engine, "build_tools", lambda: [*built(), explode])

    events = await turn(engine, "blow it up")

    (end,) = [event for event in events if isinstance(event, ToolEnd)]
    assert end.is_error and end.output == "Error from explode: ValueError: kaput: the lab"
    assert text_of(events) == "That failed (error)."
    (_, _), (second, _) = calls_of(engine)
    assert second[-1].text == end.output


async def test_the_model_call_cap_ends_a_looping_run_before_the_recursion_limit(settings: Settings) -> None:
    """A model that calls a tool forever is stopped by the model-call cap with a readable notice:
    the graph's recursion limit (several nodes per model call) is never what ends it."""
    cap = 12
    settings = settings.model_copy(update={"max_model_calls": cap})

    def forever(messages: list[BaseMessage], info: CallInfo) -> Reply:
        return reply("", tool_call("read_file", {"path": "workspace/SOUL.md"}))

    engine = engine_with(settings, forever)
    events = await turn(engine, "loop")

    assert len(calls_of(engine)) == cap
    assert len([event for event in events if isinstance(event, ToolEnd)]) == cap
    assert text_of(events) == (
        f"⚠️ Stopped: this turn reached its limit of {cap} model calls (CLAWLET_MAX_MODEL_CALLS). "
        "Ask me to continue, or raise the limit."
    )


async def test_tool_calls_past_the_cap_are_refused_and_the_run_goes_on(settings: Settings) -> None:
    """Each run may make ``max_tool_calls`` tool calls: the ones past it answer LangChain's error at
    once and do not run, the others run, and the model is asked again with all the results."""
    settings = settings.model_copy(update={"max_tool_calls": 3})
    soul = {"path": "workspace/SOUL.md"}

    def script(messages: list[BaseMessage], info: CallInfo) -> Reply:
        if isinstance(messages[-1], ToolMessage):
            answered = len([m for m in messages if isinstance(m, ToolMessage)])
            if answered == 2:  # after the first answer's two calls: two more, one of them past the cap
                return reply(
                    "", tool_call("read_file", soul, call_id="c3"), tool_call("read_file", soul, call_id="c4")
                )
            return "Done."
        return reply(
            "", tool_call("read_file", soul, call_id="c1"), tool_call("read_file", soul, call_id="c2")
        )

    engine = engine_with(settings, script)
    events = await turn(engine, "read a lot")

    ends = {event.call_id: event for event in events if isinstance(event, ToolEnd)}
    assert sorted(ends) == ["c1", "c2", "c3"]  # c4 never ran...
    assert not any(end.is_error for end in ends.values())
    *_, (last, _) = calls_of(engine)
    (refused,) = [m for m in last if isinstance(m, ToolMessage) and m.tool_call_id == "c4"]
    assert refused.status == "error"  # ...and the model was told why
    assert refused.text == "Tool call limit exceeded. Do not make additional tool calls."
    assert text_of(events) == "Done."
    assert len(calls_of(engine)) == 3


def test_a_turn_runs_no_graph_node_but_the_model_and_the_tools(settings: Settings, tmp_path: Path) -> None:
    """The model-call and tool-call caps are kept around the model call, so no node runs before
    the model (the first token waits for no extra LangGraph step), and the approvals raise their
    interrupts around the tool call, so no node runs after it either: in both agents."""
    engine = engine_with(settings, lambda messages, info: "hi")
    assert sorted(engine.build_agent().builder.nodes) == ["model", "tools"]
    pausable = engine.pausable_agent(PausePoint(tmp_path, "thread"))
    assert sorted(pausable.builder.nodes) == ["model", "tools"]


async def test_the_model_call_is_wrapped_in_three_middleware_layers(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What only prepares the model request (the workspace prompt, the allowed tools, sampling, the
    client's tools) runs in one layer: each layer is held, with LangChain's and LangSmith's
    wrappers, for as long as the model streams (memory per turn in flight)."""
    layers: list[list[str]] = []

    def recording(
        model: Any, tools: Any, *, middleware: list[AgentMiddleware[Any, Any, Any]], **options: Any
    ) -> Any:
        layers.append(  # the middleware LangChain nests around the model call (factory.py's own test)
            [
                type(m).__name__
                for m in middleware
                if type(m).awrap_model_call is not AgentMiddleware.awrap_model_call
                or type(m).wrap_model_call is not AgentMiddleware.wrap_model_call
            ]
        )
        return create_agent(model, tools, middleware=middleware, **options)

    monkeypatch.setattr(agent_module, "create_agent", recording)
    events = await turn(engine_with(settings, lambda messages, info: "hi"), "hello")
    assert text_of(events) == "hi"
    assert layers == [["RunCaps", "ModelRequestSteps", "ResponseFormatMiddleware"]]


async def test_a_turn_whose_calls_would_pause_is_refused_without_a_pause_point(settings: Settings) -> None:
    """The agent of turns that never pause cannot ask: a context that asks before a tool runs needs
    a pause point (refused rather than run unasked)."""
    engine = engine_with(settings, lambda messages, info: "hi")
    for asking in (
        RunContext.for_edge(can_ask=True),  # ask tools (the workspace's policy) pause
        replace(DEFAULT_CONTEXT, resume_call_ids=frozenset({"call_1"})),  # a paused call is asked again
    ):
        with pytest.raises(ValueError, match="needs a pause point"):
            await turn(engine, "hi", context=asking)
    assert calls_of(engine) == []


async def test_a_disallowed_tool_the_model_calls_anyway_is_refused_and_does_not_run(
    settings: Settings,
) -> None:
    def script(messages: list[BaseMessage], info: CallInfo) -> Reply:
        if isinstance(messages[-1], ToolMessage):
            return "Refused."
        return reply("", tool_call("read_file", {"path": "workspace/SOUL.md"}))

    engine = engine_with(settings, script)
    context = RunContext.for_edge(disallowed_tools=["read_file"])

    events = await turn(engine, "read it", context=context)

    (_, info), (second, _) = calls_of(engine)
    assert "read_file" not in info.tool_names  # not offered...
    refusal = second[-1]
    assert isinstance(refusal, ToolMessage) and refusal.status == "error"  # ...and refused when called
    assert "read_file" in refusal.text and "Soul" not in refusal.text
    assert text_of(events) == "Refused."


async def test_the_system_prompt_is_rebuilt_from_disk_for_every_turn(settings: Settings) -> None:
    engine = engine_with(settings, lambda messages, info: "ok")
    soul = settings.paths.workspace / "SOUL.md"
    for animal in ("a calm otter", "an excitable parrot"):
        soul.write_text(f"# Soul\nYou are {animal}.\n", encoding="utf-8")
        await turn(engine, "hello")
        assert f"<!-- Soul -->\n# Soul\nYou are {animal}." in system_prompt_of(calls_of(engine)[-1][0])
    assert "excitable parrot" in system_prompt_of(calls_of(engine)[-1][0])
    assert "calm otter" not in system_prompt_of(calls_of(engine)[-1][0])


async def test_rag_mode_swaps_the_memory_section_for_the_excerpts_retrieved(settings: Settings) -> None:
    settings.paths.memory_file.write_text("# Memory\n- The user's cat is called Miso.\n", encoding="utf-8")
    engine = engine_with(settings, lambda messages, info: "ok")
    engine.runtime_config.set_rag_mode(True)

    events = await turn(engine, "what is my cat called? Miso?")

    ((messages, _),) = calls_of(engine)
    prompt = system_prompt_of(messages)
    assert prompt.endswith(RAG_MEMORY_NOTE) and "Miso" not in prompt
    recalled = messages[-2]
    assert isinstance(recalled, HumanMessage) and recalled.text.startswith(RETRIEVAL_HEADER)
    assert "Miso" in recalled.text
    assert isinstance(events[0], Retrieval) and events[0].results


async def test_history_reasoning_and_usage_reach_the_events(settings: Settings) -> None:
    def script(messages: list[BaseMessage], info: CallInfo) -> Reply:
        answer = reply(
            "Cut sho",
            usage={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
            response_metadata={"finish_reason": "length"},
        )
        answer.additional_kwargs["reasoning_content"] = "thinking it over"
        return answer

    engine = engine_with(settings, script)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

    events = await turn(engine, "tell me", history)

    assert [event.text for event in events if isinstance(event, Thinking)] == ["thinking it over"]
    assert text_of(events) == "Cut sho"
    assert events[-1] == Usage(input_tokens=7, output_tokens=3, truncated=True)
    ((messages, _),) = calls_of(engine)
    assert [(type(m), m.text) for m in messages[1:]] == [
        (HumanMessage, "hi"),
        (AIMessage, "hello"),
        (HumanMessage, "tell me"),
    ]


async def test_history_messages_carry_ids_of_their_place(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history reaches the model with ids of its place in the transcript, so LangGraph's
    ``add_messages`` draws no random UUID for each earlier message every turn (only for the new one)."""
    import uuid

    drawn: list[uuid.UUID] = []
    uuid4 = uuid.uuid4

    def counting() -> uuid.UUID:
        drawn.append(uuid4())
        return drawn[-1]

    engine = engine_with(settings, lambda messages, info: "fine")
    history = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n}"} for n in range(40)]
    await turn(engine, "warm-up")  # whatever a first turn sets up once
    monkeypatch.setattr(uuid, "uuid4", counting)
    await turn(engine, "and now?", history)
    monkeypatch.undo()

    messages, _info = calls_of(engine)[-1]
    assert [m.id for m in messages[1:-1]] == [f"history-{n}" for n in range(40)]
    assert [m.text for m in messages[1:-1]] == [f"m{n}" for n in range(40)]
    assert len(drawn) < 40


async def test_a_failing_model_call_fails_the_turn(settings: Settings) -> None:
    def broken(messages: list[BaseMessage], info: CallInfo) -> Reply:
        raise ConnectionError("the provider is down")

    engine = engine_with(settings, broken)
    with pytest.raises(ConnectionError, match="the provider is down"):
        await turn(engine, "hello")


# -- no real provider in tests -------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider": "openai", "llm_model": "gpt-x", "llm_api_key": "k"},  # the SDK's api.openai.com
        {"provider": "openai", "llm_model": "gpt-x", "llm_base_url": "https://llm.example.com/v1"},
        {"provider": "deepseek", "deepseek_api_key": "k"},
        {"provider": "anthropic", "anthropic_api_key": "k"},
    ],
)
async def test_a_turn_on_a_remote_provider_fails_clearly_in_tests(
    settings: Settings, overrides: dict[str, Any]
) -> None:
    remote = settings.model_copy(update=overrides)
    assert remote.loopback_models_only  # conftest's switch, from the environment
    engine = build_services(remote).engine
    with pytest.raises(ProviderConfigError, match="CLAWLET_LOOPBACK_MODELS_ONLY allows only loopback"):
        await turn(engine, "hello")


def test_loopback_endpoints_and_the_demo_model_are_allowed(settings: Settings) -> None:
    for url in ("http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://[::1]:9/v1"):
        local = settings.model_copy(update={"provider": "openai", "llm_model": "m", "llm_base_url": url})
        assert build_services(local).engine.build_model() is not None
    assert build_services(settings).engine.build_model() is not None  # the demo model

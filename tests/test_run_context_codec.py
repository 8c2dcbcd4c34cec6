"""The one ``RunContext`` codec (:func:`clawlet.engine.context.context_to_json`): a context with every
field set survives the session process's pipe (the bytes the parent writes and the child reads) and,
but for its images, a paused turn's record on disk."""

from __future__ import annotations

import dataclasses
import json

from clawlet.engine.client_tools import ClientTool
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.llm.images import Image
from clawlet.llm.response_format import parse_response_format
from clawlet.llm.sampling import Sampling
from clawlet.runtime.approval_store import PausedTurn
from clawlet.runtime.base import UserMessage
from clawlet.runtime.process_pipe import decode_message, encode_line, encode_message


def every_field() -> RunContext:
    """A context whose every field differs from its default."""
    context = RunContext(
        allowed_tools=frozenset({"read_file", "terminal"}),
        disallowed_tools=frozenset({"python_repl"}),
        extra_system_prompt="Answer in French.",
        approval_mode="ask",
        ask_tools=frozenset({"terminal"}),
        policy_denied=frozenset({"fetch_url"}),
        approval_denied=frozenset({"ask_user"}),
        skipped_approval=frozenset({"save_memory"}),
        resume_call_ids=frozenset({"call_1"}),
        sampling=Sampling(temperature=0.5, top_p=0.9, max_tokens=99, stop=("END",), seed=7),
        response_format=parse_response_format(
            {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}}
        ),
        images=(Image("https://example.com/cat.jpg", "low"),),
        client_tools=(ClientTool("get_weather", "The weather", '{"type": "object", "properties": {}}'),),
        tool_choice="required",
    )
    unset = [
        f.name
        for f in dataclasses.fields(RunContext)
        if getattr(context, f.name) == getattr(DEFAULT_CONTEXT, f.name)
    ]
    assert not unset, f"set these fields too: {unset}"
    return context


def test_a_context_with_every_field_round_trips_through_the_session_process_pipe() -> None:
    context = every_field()
    line = encode_line(encode_message("turn-1", UserMessage("hi", [], context)))
    received = decode_message(json.loads(line))
    assert received.context == context
    assert received.context.approval_mode == "ask"


def test_a_paused_turn_keeps_every_field_of_its_context_but_the_images() -> None:
    context = every_field()
    stored = json.loads(json.dumps(PausedTurn([], context).to_json()))
    assert PausedTurn.from_json(stored).context == dataclasses.replace(context, images=())


def test_a_record_without_a_context_resumes_a_turn_that_could_ask() -> None:
    assert PausedTurn.from_json({"context": None}).context.approval_mode == "ask"
    assert PausedTurn.from_json({"context": {"approval_mode": "bogus"}}).context.approval_mode == "ask"

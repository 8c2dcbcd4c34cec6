"""Consecutive streamed text chunks of a chat completion joined into one, as the dicts they came as.

What relaying a chunk costs is mostly per chunk, whatever its size: LangChain's message chunk and
callbacks, LangGraph's stream, the turn's event, each watcher's frame. When several chunks are
already buffered (a fast model, a burst after a network stall), relaying them as one pays that
once. :func:`join_into` appends a chunk to the one before it when the pair differs only in its
text, so LangChain builds from the joined chunk exactly what adding the two chunks' messages would
give; anything else (a tool call, a finish reason, usage, log probabilities, a role change, any
other field that differs) is not joined and goes on as it came.
"""

from __future__ import annotations

from typing import Any

TEXT_FIELDS = frozenset({"content", "reasoning_content", "reasoning"})
"""Delta fields whose text two chunks concatenate (answer text; DeepSeek's and others' reasoning)."""

PER_CHUNK_FIELDS = frozenset({"obfuscation"})
"""Top-level fields that differ from chunk to chunk and mean nothing once joined (OpenAI's random
padding against length side channels)."""

MAX_JOINED = 32
"""At most this many chunks go out as one: a long burst still streams, in parts of ~1 ms of parsing."""


def only_choice(chunk: Any) -> dict[str, Any] | None:
    """The chunk's single choice if the chunk is an object with exactly one choice (an object)."""
    if type(chunk) is not dict:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
        return None
    return choices[0]


def text_of(chunk: Any) -> bool:
    """Whether the chunk carries any text (answer or reasoning) in its single choice."""
    choice = only_choice(chunk)
    delta = choice.get("delta") if choice is not None else None
    if type(delta) is not dict:
        return False
    return any(type(delta.get(field)) is str and delta[field] for field in TEXT_FIELDS)


def join_into(chunk: dict[str, Any], follower: Any) -> bool:
    """Append ``follower``'s text to ``chunk`` (in place) if the two differ only in their text
    fields (see the module docstring); ``False``, with nothing changed, otherwise."""
    choice, next_choice = only_choice(chunk), only_choice(follower)
    if choice is None or next_choice is None or chunk.keys() != follower.keys():
        return False
    for key, value in chunk.items():
        if key != "choices" and key not in PER_CHUNK_FIELDS and follower[key] != value:
            return False
    if choice.keys() != next_choice.keys():
        return False
    delta, next_delta = choice.get("delta"), next_choice.get("delta")
    if type(delta) is not dict or type(next_delta) is not dict or delta.keys() != next_delta.keys():
        return False
    for key, value in choice.items():
        if key != "delta" and (next_choice[key] != value or (key != "index" and value is not None)):
            return False  # a finish reason or log probabilities end the run
    texts: list[str] = []
    for key, value in delta.items():
        other = next_delta[key]
        if key in TEXT_FIELDS and type(value) is str and type(other) is str:
            texts.append(key)
        elif other != value or not (value is None or type(value) in (str, bool, int)):
            return False  # a role change, a tool call, anything structured
    for key in texts:
        delta[key] += next_delta[key]
    return True

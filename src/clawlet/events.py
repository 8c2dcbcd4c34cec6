"""The typed event model: one vocabulary for everything an agent run produces.

Runtimes yield these events; each protocol edge (workbench SSE, OpenAI chunks, gateway frames)
translates them into its own wire format and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunStarted:
    session_id: str
    run_id: str


@dataclass(frozen=True)
class Retrieval:
    query: str
    results: list[dict[str, Any]]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning the model streams apart from its answer (e.g. DeepSeek's ``reasoning_content``)."""

    text: str


@dataclass(frozen=True)
class ToolStart:
    tool: str
    input: str
    call_id: str


@dataclass(frozen=True)
class ToolEnd:
    tool: str
    output: str
    call_id: str
    is_error: bool = False


@dataclass(frozen=True)
class NewSegment:
    """The model starts a new text segment after tools ran (a new assistant bubble)."""


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class RunFinished:
    content: str
    session_id: str


@dataclass(frozen=True)
class RunCancelled:
    session_id: str
    content: str = ""


@dataclass(frozen=True)
class RunFailed:
    error: str
    session_id: str


@dataclass(frozen=True)
class Title:
    session_id: str
    title: str


Event = (
    RunStarted
    | Retrieval
    | TextDelta
    | Thinking
    | ToolStart
    | ToolEnd
    | NewSegment
    | Usage
    | RunFinished
    | RunCancelled
    | RunFailed
    | Title
)

TERMINAL_EVENTS = (RunFinished, RunCancelled, RunFailed)

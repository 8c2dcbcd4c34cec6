"""The pipe between a session process (:mod:`clawlet.execplane.session_child`) and its parent
(:class:`clawlet.runtime.process.ProcessSessionAdapter`): the line format and what both sides
encode and decode.

**Pipe protocol** (one JSON object per line)::

    parent → child  init      {session_id, session_dir, settings, skills, demo_token_delay,
                               heartbeat_interval, held_secrets}  first line; settings holds API
                                                               keys, held_secrets the parent's
                                                               (see clawlet.secret_env) but the
                                                               VM credentials, for masking
    child → parent  ready     {pid}  |  fatal {error}            the engine is built (or could not be)
    parent → child  message   {turn, text, history, context,   run one turn: everything of the
                               pause, resume}                  SessionManager's UserMessage (pause
                                                               {directory, thread_id}, resume
                                                               {approval_id, decision: {type, args,
                                                               message}}, each or null)
    child → parent  event     {turn, event: {kind, …fields}}   each clawlet event of the turn
                                                               (clawlet.events.event_to_json)
    parent → child  cancel    {turn}                           cancel the running turn
    parent → child  stop      {}                               cancel, then exit 0 (after ``stopped``)
    child → parent  heartbeat {}                               every ``heartbeat_interval`` seconds
    child → parent  request   {id, method, params}             ``load_skill``, ``memory_search``,
    parent → child  response  {id, result} | {id, error}       ``mcp_call`` (the parent holds the
                                                               control-plane connection)

The API keys reach the child only inside ``init`` on the pipe: never in its environment, argv or a
file. EOF on the child's stdin means the parent is gone: the child cancels its turn and exits, so a
killed daemon leaves no session processes behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from clawlet.cluster.protocol import MAX_FRAME_BYTES
from clawlet.engine.approvals import Decision, PausePoint, Resume
from clawlet.engine.client_tools import client_tools_from_json, client_tools_to_json
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.events import Event, NewSegment, TextDelta
from clawlet.llm.images import Image
from clawlet.llm.response_format import ResponseFormat
from clawlet.llm.sampling import Sampling
from clawlet.runtime.base import UserMessage

LINE_LIMIT: Final = MAX_FRAME_BYTES
"""The longest line either side accepts."""
DEFAULT_HEARTBEAT_INTERVAL: Final = 5.0
"""Seconds between a child's heartbeats when ``init`` names none."""
CHECKPOINTS_DIR: Final = "checkpoints"
"""The child's LangGraph checkpoints, in its session directory."""

RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``(method, params) -> result``: how the parent answers a child's request."""


_CONTEXT_SETS: Final = (
    "disallowed_tools",
    "ask_tools",
    "policy_denied",
    "approval_denied",
    "skipped_approval",
    "resume_call_ids",
)
"""The ``frozenset`` fields of ``RunContext`` (``allowed_tools`` may also be ``None``)."""


def encode_context(context: RunContext) -> dict[str, Any]:
    """``context`` as JSON (every field: the child's engine applies the policies itself)."""
    encoded: dict[str, Any] = {name: sorted(getattr(context, name)) for name in _CONTEXT_SETS}
    encoded["allowed_tools"] = None if context.allowed_tools is None else sorted(context.allowed_tools)
    encoded["extra_system_prompt"] = context.extra_system_prompt
    encoded["approval_mode"] = context.approval_mode
    encoded["sampling"] = context.sampling.to_json()
    encoded["client_tools"] = client_tools_to_json(context.client_tools)
    encoded["tool_choice"] = context.tool_choice
    encoded["response_format"] = (
        None if context.response_format is None else context.response_format.to_json()
    )
    encoded["images"] = [image.to_json() for image in context.images]
    return encoded


def decode_context(data: Any) -> RunContext:
    if not isinstance(data, Mapping):
        return DEFAULT_CONTEXT
    allowed = data.get("allowed_tools")
    mode = data.get("approval_mode")
    sets = {name: frozenset(map(str, data.get(name) or ())) for name in _CONTEXT_SETS}
    return RunContext(
        allowed_tools=None if allowed is None else frozenset(map(str, allowed)),
        extra_system_prompt=str(data.get("extra_system_prompt") or ""),
        approval_mode=mode if mode in ("ask", "deny", "allow") else DEFAULT_CONTEXT.approval_mode,
        sampling=Sampling.from_json(data.get("sampling")),
        client_tools=client_tools_from_json(data.get("client_tools")),
        tool_choice=str(data.get("tool_choice") or "auto"),
        response_format=ResponseFormat.from_json(data.get("response_format")),
        images=tuple(image for image in map(Image.from_json, data.get("images") or ()) if image is not None),
        **sets,
    )


def encode_message(turn_id: str, data: UserMessage) -> dict[str, Any]:
    """The pipe's ``message`` line for one turn: everything of ``data``."""
    pause = data.pause
    resume = data.resume
    return {
        "type": "message",
        "turn": turn_id,
        "text": data.text,
        "history": list(data.history),
        "context": encode_context(data.context),
        "pause": None if pause is None else {"directory": str(pause.directory), "thread_id": pause.thread_id},
        "resume": None
        if resume is None
        else {"approval_id": resume.approval_id, "decision": dataclasses.asdict(resume.decision)},
    }


def decode_message(message: Mapping[str, Any]) -> UserMessage:
    """The ``UserMessage`` of a ``message`` line; ``ValueError`` for one that is malformed."""
    history = message.get("history") or []
    if not isinstance(history, list) or not all(isinstance(item, Mapping) for item in history):
        raise ValueError("history must be a list of messages")
    pause_data, resume_data = message.get("pause"), message.get("resume")
    pause = resume = None
    if isinstance(pause_data, Mapping):
        pause = PausePoint(Path(str(pause_data["directory"])), str(pause_data["thread_id"]))
    if isinstance(resume_data, Mapping):
        decision = dict(resume_data.get("decision") or {})
        args = decision.get("args")
        resume = Resume(
            str(resume_data["approval_id"]),
            Decision(
                decision.get("type") or "reject",
                dict(args) if isinstance(args, Mapping) else None,
                None if decision.get("message") is None else str(decision["message"]),
            ),
        )
    return UserMessage(
        str(message.get("text") or ""),
        [{str(k): str(v) for k, v in item.items()} for item in history],
        decode_context(message.get("context")),
        pause=pause,
        resume=resume,
    )


def encode_line(message: Mapping[str, Any]) -> bytes:
    """One line of the pipe."""
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


@dataclass(frozen=True)
class SkillRef:
    """A skill the session's ``load_skill`` tool may load (from the session's skill index)."""

    skill_id: str
    name: str
    version: str = "latest"


@dataclass
class ReplyText:
    """The text a turn has streamed so far, segment by segment (as the transcript keeps it)."""

    segments: list[str] = field(default_factory=list)
    current: str = ""

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.current += event.text
        elif isinstance(event, NewSegment) and self.current:
            self.segments.append(self.current)
            self.current = ""

    @property
    def text(self) -> str:
        return "\n\n".join(part for part in [*self.segments, self.current] if part)


async def pipe_streams(
    read_fd: int, write_fd: int, limit: int = LINE_LIMIT
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Asyncio streams over two pipe descriptors (both taken over: closed with the streams)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def private_pipe_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over the pipe a child process was given as its fd 0 and 1, moved to private
    descriptors first: fd 0 becomes /dev/null and fd 1 stderr, so a stray ``print()`` or a
    subprocess that inherits them can never read or corrupt a protocol line."""
    pipe_in, pipe_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return await pipe_streams(pipe_in, pipe_out)

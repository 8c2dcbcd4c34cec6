"""The pipe between a session process (:mod:`clawlet.execplane.session_child`) and its parent
(:class:`clawlet.execplane.session_process.ProcessSessionAdapter`), and between an engine worker and
the engine pool (:mod:`clawlet.runtime.engine_pool`): the line format, what both sides encode and
decode, and the environment a child starts with (:func:`child_environment`).

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
from clawlet.engine.context import context_from_json, context_to_json
from clawlet.engine.tool_approvals import Decision, PausePoint, Resume
from clawlet.events import Event, NewSegment, TextDelta
from clawlet.runtime.base import UserMessage
from clawlet.secret_env import is_secret_name

LINE_LIMIT: Final = MAX_FRAME_BYTES
"""The longest line either side accepts."""
DEFAULT_HEARTBEAT_INTERVAL: Final = 5.0
"""Seconds between a child's heartbeats when ``init`` names none."""
CHECKPOINTS_DIR: Final = "checkpoints"
"""The child's LangGraph checkpoints, in its session directory."""

RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``(method, params) -> result``: how the parent answers a child's request."""


def child_environment() -> dict[str, str]:
    """The parent's environment without any secret (the VM credentials, API keys: its tools could
    read them; the keys it needs arrive in ``init``), with clawlet importable."""
    env = {key: value for key, value in os.environ.items() if not is_secret_name(key)}
    package_root = str(Path(__file__).resolve().parents[2])
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root + (os.pathsep + existing if existing else "")
    return env


def encode_message(turn_id: str, data: UserMessage) -> dict[str, Any]:
    """The pipe's ``message`` line for one turn: everything of ``data``."""
    pause = data.pause
    resume = data.resume
    return {
        "type": "message",
        "turn": turn_id,
        "text": data.text,
        "history": list(data.history),
        "context": context_to_json(data.context),
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
        context_from_json(message.get("context")),
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

"""Client-side ``tools`` / ``tool_choice`` on ``POST /v1/chat/completions``: the OpenAI edge.

The engine side (how they are offered, how a call pauses the run) is
:mod:`clawlet.engine.client_tools`. Here:

- **The request.** ``tools`` are OpenAI function tools (``{"type": "function", "function":
  {"name", "description", "parameters"}}``); a name must match ``^[A-Za-z0-9_-]{1,64}$``, be unique
  and not be one of clawlet's own tools (400, ``param: tools``). ``tool_choice`` is ``auto`` (the
  default), ``none``, ``required`` or ``{"type": "function", "function": {"name": ...}}`` naming one
  of ``tools`` (400, ``param: tool_choice`` otherwise); ``parallel_tool_calls`` is accepted (the
  model may call several; all of them are returned).
- **The answer.** A run paused on client calls answers ``finish_reason: "tool_calls"`` with the
  calls in ``message.tool_calls`` (streamed: ``delta.tool_calls`` chunks, a first one per call
  with ``index``, ``id``, ``type`` and ``function.name``, then its ``function.arguments``). A call's
  id is ``call_`` + the pause's approval id (LangGraph's interrupt id, unique per pause), and
  :class:`ClientCallIndex` remembers which session issued it.
- **The client's next request** ends with the assistant message carrying those ``tool_calls`` and
  one ``role: "tool"`` message per call (``tool_call_id``, ``content``). The paused session is the
  one the ``X-Session-ID`` header (or ``session_id``) names, else the one that issued the ids. Every
  call the run waits for needs a result (400 naming the missing ids); an id the run does not wait
  for is a 400 too. The results continue the same run (one decision ``result`` per call, in the
  order the run paused), and the answer is that run's continuation, streamed or not. A new user
  message instead drops the paused run (the client moved on; its calls are marked not run).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from clawlet.engine.client_tools import CLIENT_TOOL_DECISIONS, ClientTool
from clawlet.engine.tool_approvals import Decision
from clawlet.events import ApprovalRequested, Event, Pending, RunWaiting
from clawlet.runtime.manager import Run, SessionManager
from clawlet.storage import atomic_write_text

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
CALL_ID = re.compile(r"^call_[A-Za-z0-9_-]{1,128}$")
CALL_PREFIX = "call_"
CALL_KEPT_SECONDS = 7 * 24 * 3600
"""How long an unanswered client tool call is remembered."""


class ToolsError(ValueError):
    """A request's ``tools`` / ``tool_choice`` / tool messages that cannot be used (a 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def parse_tools(tools: Sequence[Any] | None, clawlet_tools: Sequence[str]) -> tuple[ClientTool, ...]:
    """The client's function tools; raises :class:`ToolsError`."""
    parsed: list[ClientTool] = []
    for index, tool in enumerate(tools or ()):
        where = f"tools[{index}]"
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(function, Mapping)
        ):
            raise ToolsError(f"{where} must be {{'type': 'function', 'function': {{...}}}}", "tools")
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ToolsError(f"{where}.function.name must match ^[A-Za-z0-9_-]{{1,64}}$", "tools")
        if name in clawlet_tools:
            raise ToolsError(
                f"{where}: {name!r} is the name of one of clawlet's own tools; rename yours", "tools"
            )
        if any(known.name == name for known in parsed):
            raise ToolsError(f"{where}: the tool name {name!r} is given twice", "tools")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, Mapping):
            raise ToolsError(f"{where}.function.parameters must be a JSON schema object", "tools")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise ToolsError(f"{where}.function.description must be a string", "tools")
        parsed.append(ClientTool(name, description, json.dumps(parameters, ensure_ascii=False)))
    return tuple(parsed)


def parse_tool_choice(choice: str | Mapping[str, Any] | None, tools: Sequence[ClientTool]) -> str:
    """``auto``, ``none``, ``required`` or the forced function's name; raises :class:`ToolsError`."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise ToolsError("tool_choice must be 'auto', 'none', 'required' or a function", "tool_choice")
        if choice == "required" and not tools:
            raise ToolsError("tool_choice 'required' needs tools", "tool_choice")
        return choice
    function = choice.get("function") if choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str):
        raise ToolsError("tool_choice must be {'type': 'function', 'function': {'name': ...}}", "tool_choice")
    if all(tool.name != name for tool in tools):
        raise ToolsError(f"tool_choice names {name!r}, which is not one of tools", "tool_choice")
    return name


def is_client_call(item: Pending) -> TypeGuard[ApprovalRequested]:
    """Whether a pending item is a client tool call (answered by its result)."""
    return isinstance(item, ApprovalRequested) and item.allowed_decisions == CLIENT_TOOL_DECISIONS


def client_call_id(item: ApprovalRequested) -> str:
    """The id the client sees for a paused client tool call."""
    return CALL_PREFIX + item.approval_id


@dataclass(frozen=True)
class ClientCall:
    """A client tool call as the client sees it."""

    id: str
    name: str
    arguments: str

    @classmethod
    def of(cls, item: ApprovalRequested) -> ClientCall:
        return cls(client_call_id(item), item.tool, json.dumps(item.args, ensure_ascii=False))

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def tool_results(messages: Sequence[Any], text_of: Callable[[Any], str]) -> dict[str, str] | None:
    """The results of the trailing ``role: "tool"`` messages by ``tool_call_id`` (None when the
    conversation does not end with them); raises :class:`ToolsError` for one without an id."""
    results: dict[str, str] = {}
    for message in reversed(messages):
        if message.role != "tool":
            break
        call_id = message.tool_call_id
        if not isinstance(call_id, str) or not call_id:
            raise ToolsError("a message with role 'tool' needs its tool_call_id", "messages")
        results[call_id] = text_of(message)
    return dict(reversed(results.items())) if results else None


class ClientCallIndex:
    """Which session issued a client tool call id: one small file per call, written (atomically)
    when a run pauses on it, removed when its result arrives (or the client moves on), so a client
    that sends no session header is still found (after a restart too). Files of calls never
    answered (a session cancelled or deleted elsewhere) are removed after :data:`CALL_KEPT_SECONDS`."""

    def __init__(self, directory: Path, root: Path) -> None:
        self.directory = directory
        self.root = root

    def remember(self, call_id: str, session_id: str) -> None:
        self.prune()
        atomic_write_text(self.directory / call_id, session_id, root=self.root)

    def prune(self, now: float | None = None) -> None:
        """Remove the files of calls older than :data:`CALL_KEPT_SECONDS`."""
        cutoff = (time.time() if now is None else now) - CALL_KEPT_SECONDS
        for path in self.directory.glob(f"{CALL_PREFIX}*"):
            with suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()

    def session_of(self, call_id: str) -> str | None:
        if not CALL_ID.match(call_id):
            return None
        try:
            return (self.directory / call_id).read_text(encoding="utf-8").strip() or None
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def forget(self, call_id: str) -> None:
        if CALL_ID.match(call_id):
            (self.directory / call_id).unlink(missing_ok=True)


def call_index(sessions: SessionManager) -> ClientCallIndex:
    """The index of a session manager's home (next to its approval records)."""
    approvals = sessions.approvals
    return ClientCallIndex(approvals.records / "client-calls", approvals.home)


async def remembering_calls(
    events: AsyncIterator[Event | None], index: ClientCallIndex, session_id: str
) -> AsyncIterator[Event | None]:
    """``events`` as they are; the client calls a pause waits for are put in ``index`` before the
    pause reaches the client (so its next request finds them)."""
    async for event in events:
        if isinstance(event, RunWaiting):
            for item in event.pending:
                if is_client_call(item):
                    await asyncio.to_thread(index.remember, client_call_id(item), session_id)
        yield event


def match_results(
    waiting: Sequence[Pending], results: Mapping[str, str]
) -> list[tuple[ApprovalRequested, str]]:
    """The pending client calls with their results, in the order the run paused; raises
    :class:`ToolsError` naming unknown ids or calls without a result."""
    calls = {client_call_id(item): item for item in waiting if is_client_call(item)}
    unknown = [call_id for call_id in results if call_id not in calls]
    if unknown:
        raise ToolsError(
            f"unknown tool call id(s) {', '.join(unknown)}: the session waits for no such client tool call",
            "messages",
        )
    missing = [call_id for call_id in calls if call_id not in results]
    if missing:
        raise ToolsError(
            f"missing results for tool call(s) {', '.join(missing)}: send the result of each",
            "messages",
        )
    return [(item, results[call_id]) for call_id, item in calls.items()]


async def drop_unanswered_calls(sessions: SessionManager, session_id: str) -> None:
    """A new user message to a session that waits only for client tool results: the client moved
    on without them, so the paused run is dropped (its calls are marked not run) and the message
    starts a new turn. A session waiting for the user's approvals is left waiting (409)."""
    waiting = sessions.waiting_for(session_id)
    if waiting and all(is_client_call(item) for item in waiting):
        await sessions.cancel(session_id)
        index = call_index(sessions)
        for item in waiting:
            if is_client_call(item):
                await asyncio.to_thread(index.forget, client_call_id(item))


async def continue_with_results(
    sessions: SessionManager, session_id: str, answered: Sequence[tuple[ApprovalRequested, str]]
) -> Run:
    """Continue the paused run with every result; the run of the last one (the others continue
    it to the next still-waiting call, which nobody needs to watch)."""
    index = call_index(sessions)
    run: Run | None = None
    for item, output in answered:
        if run is not None:
            await run.wait()
        run = await sessions.resume(session_id, item.approval_id, Decision("result", message=output))
        await asyncio.to_thread(index.forget, client_call_id(item))
    assert run is not None
    return run

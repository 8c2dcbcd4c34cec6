"""The program a session process runs (``python -m clawlet.execplane.session_child``, or forked from
the session template, :mod:`clawlet.execplane.session_template`): clawlet's engine for one exec-plane
session, on the pipe of :mod:`clawlet.runtime.process_pipe` to its parent
(:class:`clawlet.execplane.session_process.ProcessSessionAdapter`, where the process model is described).

The child builds clawlet's engine for the clawlet home shared by the user's sessions and runs
each turn it is sent on it (:class:`~clawlet.runtime.engine_adapter.EngineAdapter`) with the
history, context, pause point and decision the exec plane's ``SessionManager`` gave the turn: it is
a pure runtime and keeps no transcript (the one transcript is the exec plane's, in the home's
``sessions/``), so a turn that pauses for an approval is continued by whichever process gets the
decision. The session's short-term memory
(:class:`~clawlet.execplane.session_memory.SessionMemory`, ``<session dir>/memory/``) gets the user
message before the turn and the assistant's reply (also a partial one) before the turn's final
event goes out. The state of each turn that cannot pause is checkpointed when the turn ends (one
checkpoint, not one per LangGraph step: per-step checkpoints cost about 20 ms of CPU per turn and
nothing resumes a turn from them) by :class:`~clawlet.engine.checkpointer.LocalCheckpointer` under
``<session dir>/checkpoints/``: the agent graph gets the saver and a thread per turn, and older
turns' threads are deleted when a turn ends, so the newest checkpoint is always the last turn's
state (what the snapshot sync sends); a
turn that may pause keeps its state at its pause point instead. The model's input comes from the
history the turn was sent, as in local mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet import aio
from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.agent import Agent, AgentEngine
from clawlet.engine.checkpointer import LocalCheckpointer
from clawlet.events import (
    Event,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunWaiting,
    event_to_json,
)
from clawlet.execplane.session_memory import SessionMemory
from clawlet.logs import swallowed
from clawlet.runtime.base import UserMessage
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.runtime.process_pipe import (
    CHECKPOINTS_DIR,
    DEFAULT_HEARTBEAT_INTERVAL,
    ReplyText,
    RequestHandler,
    SkillRef,
    decode_message,
    encode_line,
    private_pipe_streams,
)
from clawlet.secret_env import hold_secrets
from clawlet.tools.base import ToolError

CHILD_MODULE: Final = "clawlet.execplane.session_child"
"""What the parent runs (``python -m``)."""
log = logging.getLogger(CHILD_MODULE)  # not __name__: the child runs this module as __main__
MEMORY_ROLE_USER: Final = "user"
MEMORY_ROLE_ASSISTANT: Final = "assistant"
CHILD_REQUEST_TIMEOUT: Final = 120.0
"""How long a child waits for the parent's answer to a request (a skill package fetch)."""


class LoadSkillInput(BaseModel):
    name: str = Field(description="The skill's name or id, as listed in <available_skills>.")


def make_load_skill_tool(skills: Sequence[SkillRef], request: RequestHandler) -> BaseTool:
    """``load_skill``: make a skill of the session's index available (fetching its whole package
    into the shared cache on a miss) and return its ``SKILL.md`` and directory."""
    by_key: dict[str, SkillRef] = {}
    for skill in skills:
        by_key.setdefault(skill.skill_id.lower(), skill)
        by_key.setdefault(skill.name.lower(), skill)

    async def load_skill(name: str) -> str:
        key = name.strip().strip("/").rsplit("/", 1)[-1].lower()
        skill = by_key.get(name.strip().lower()) or by_key.get(key)
        if skill is None:
            known = ", ".join(sorted(ref.name for ref in skills)) or "none"
            raise ToolError(f"unknown skill {name!r}; the available skills are: {known}")
        try:
            result = await request("load_skill", {"skill_id": skill.skill_id, "version": skill.version})
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"skill {skill.name!r} is unavailable: {exc}") from exc
        if not isinstance(result, Mapping):
            raise ToolError(f"skill {skill.name!r}: unexpected answer")
        return f"Skill directory: {result.get('path')}\n\n{result.get('skill_md', '')}"

    return StructuredTool.from_function(
        coroutine=load_skill,
        name="load_skill",
        description=(
            "Load a skill listed in <available_skills>: returns its SKILL.md (the full instructions) "
            "and the directory holding its files and scripts/."
        ),
        args_schema=LoadSkillInput,
    )


class MemorySearchInput(BaseModel):
    query: str = Field(description="What to look for in the user's long-term memory.")
    top_k: int = Field(default=5, ge=1, le=20, description="How many memories to return at most.")


def make_long_term_memory_tool(request: RequestHandler) -> BaseTool:
    """``long_term_memory``: search the user's long-term memory, kept by the control plane
    (``memory_search``; empty while the control plane is unreachable — degraded mode)."""

    async def long_term_memory(query: str, top_k: int = 5) -> str:
        try:
            found = await request("memory_search", {"query": query, "top_k": top_k})
        except Exception as exc:
            raise ToolError(f"long-term memory is unavailable: {exc}") from exc
        items = found if isinstance(found, list) else []
        if not items:
            return (
                "No long-term memories matched. (While the control plane is unreachable, long-term "
                "memory returns nothing; session memory and local files still work.)"
            )
        lines = []
        for item in items:
            text = item.get("text") or item.get("content") if isinstance(item, Mapping) else item
            lines.append(f"- {text}")
        return "\n".join(lines)

    return StructuredTool.from_function(
        coroutine=long_term_memory,
        name="long_term_memory",
        description=(
            "Search the user's long-term memory (facts and preferences kept across sessions and "
            "machines). Returns the best-matching entries, or none."
        ),
        args_schema=MemorySearchInput,
    )


class RemoteMcpInput(BaseModel):
    server: str = Field(description="The MCP server's name.")
    tool: str = Field(description="The tool to call on that server.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments.")


def make_remote_mcp_tool(servers: Sequence[str], request: RequestHandler) -> BaseTool:
    """``remote_mcp``: call a tool of one of the user's MCP servers, run by the control plane
    (``mcp_call``). Failures — the control plane unreachable included — come back as tool errors
    the agent can plan around."""
    known = sorted(set(servers))

    async def remote_mcp(server: str, tool: str, arguments: dict[str, Any] | None = None) -> str:
        if server not in known:
            raise ToolError(f"unknown MCP server {server!r}; the user's servers are: {', '.join(known)}")
        try:
            result = await request("mcp_call", {"server": server, "tool": tool, "arguments": arguments or {}})
        except Exception as exc:
            raise ToolError(f"remote MCP call failed: {exc}") from exc
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    return StructuredTool.from_function(
        coroutine=remote_mcp,
        name="remote_mcp",
        description=(
            "Call a tool on one of the user's remote MCP servers ("
            + ", ".join(known)
            + "). Unavailable while the control plane is unreachable: plan around an error."
        ),
        args_schema=RemoteMcpInput,
    )


async def no_requests(method: str, params: dict[str, Any]) -> Any:
    raise LookupError(f"{method!r} cannot be asked here")


def session_tools(
    skills: Sequence[SkillRef], mcp_servers: Sequence[str], request: RequestHandler
) -> list[BaseTool]:
    """The tools a session process adds to clawlet's own: ``long_term_memory``, and ``load_skill``
    and ``remote_mcp`` when the session has skills and MCP servers."""
    tools = [make_long_term_memory_tool(request)]
    if skills:
        tools.append(make_load_skill_tool(skills, request))
    if mcp_servers:
        tools.append(make_remote_mcp_tool(mcp_servers, request))
    return tools


class SessionEngine(AgentEngine):
    """clawlet's engine with a checkpointed agent graph (one thread per turn) and extra tools.

    A turn that may pause runs on the pause point it was given instead (the ``SessionManager``'s,
    in the home: :meth:`AgentEngine.pausable_agent`), so another process can continue it."""

    def __init__(
        self,
        *args: Any,
        checkpointer: LocalCheckpointer,
        extra_tools: Sequence[BaseTool] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.checkpointer = checkpointer
        self.extra_tools = list(extra_tools)
        self.thread_id = "initial"
        self._base_agent: Agent | None = None
        self._saving_agent: Agent | None = None

    def build_tools(self) -> list[BaseTool]:
        return [*super().build_tools(), *self.extra_tools]

    def build_agent(self) -> Agent:
        base = super().build_agent()
        saving = self._saving_agent
        if saving is None or base is not self._base_agent:  # built anew (first turn, or MCP tools changed)
            self._base_agent = base
            saving = self._saving_agent = base.copy({"checkpointer": self.checkpointer})
        return saving.with_config({"configurable": {"thread_id": self.thread_id}})


class SessionChild:
    """The child's side of the pipe protocol (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.session_id = ""
        self.engine: SessionEngine | None = None
        self.runtime: EngineAdapter | None = None
        self.memory: SessionMemory | None = None
        self.checkpointer: LocalCheckpointer | None = None
        self._send_lock = asyncio.Lock()
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._turn: asyncio.Task[None] | None = None
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def send(self, message: Mapping[str, Any]) -> None:
        async with self._send_lock:
            self.writer.write(encode_line(message))
            await self.writer.drain()

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Ask the parent (which holds the control-plane connection) and wait for its answer."""
        request_id = uuid.uuid4().hex
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.send({"type": "request", "id": request_id, "method": method, "params": params})
            return await asyncio.wait_for(future, CHILD_REQUEST_TIMEOUT)
        finally:
            self._pending.pop(request_id, None)

    def setup(self, init: Mapping[str, Any]) -> float:
        """Build the engine from ``init``; returns the heartbeat interval."""
        from clawlet.memory.stores import open_indexes

        self.session_id = str(init["session_id"])
        session_dir = Path(str(init["session_dir"]))
        hold_secrets(dict(init.get("held_secrets") or {}))  # masked in tool output, like the parent's
        settings = Settings(**dict(init["settings"]))
        skills = [SkillRef(**dict(item)) for item in init.get("skills") or []]
        mcp_servers = [str(name) for name in init.get("mcp_servers") or [] if isinstance(name, str)]
        self.memory = SessionMemory(session_dir)
        self.checkpointer = LocalCheckpointer(session_dir / CHECKPOINTS_DIR)
        memory_index, knowledge = open_indexes(settings)
        engine = SessionEngine(
            settings,
            RuntimeConfig(settings.paths.config_file),
            memory_index,
            knowledge,
            demo_token_delay=float(init.get("demo_token_delay") or 0.0),
            checkpointer=self.checkpointer,
            extra_tools=session_tools(skills, mcp_servers, self.request),
        )
        engine.build_model()
        self.engine = engine
        self.runtime = EngineAdapter(engine)
        return float(init.get("heartbeat_interval") or DEFAULT_HEARTBEAT_INTERVAL)

    async def serve(self) -> int:
        raw = await self.reader.readline()
        try:
            init = json.loads(raw) if raw else None
        except ValueError:
            init = None
        if not isinstance(init, dict) or init.get("type") != "init":
            log.error("the first line on the pipe was not init; exiting")
            return 2
        try:
            interval = self.setup(init)
        except Exception as exc:
            log.exception("could not build the session's engine")
            await self.send({"type": "fatal", "error": f"{type(exc).__name__}: {exc}"})
            return 1
        del init  # it holds the API keys; the settings object keeps what the engine needs
        log.info("session %s: ready (pid %d)", self.session_id, os.getpid())
        await self.send({"type": "ready", "pid": os.getpid()})
        heartbeats = asyncio.create_task(self._heartbeats(interval))
        try:
            await self._read_loop()
        finally:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)
            await self._shutdown()
        return 0

    async def _read_loop(self) -> None:
        while True:
            raw = await self.reader.readline()
            if not raw:
                log.info("session %s: the parent closed the pipe; exiting", self.session_id)
                return
            try:
                message = json.loads(raw)
            except ValueError:
                log.warning("ignoring a line that is not JSON")
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "message":  # after the previous turn's task (it may still be finishing)
                self._turn = asyncio.create_task(self._run_turn(message, self._turn), name="session-turn")
            elif kind == "cancel":
                self._cancel(str(message.get("turn") or ""))
            elif kind == "response":
                future = self._pending.get(str(message.get("id")))
                if future is not None and not future.done():
                    if message.get("error") is not None:
                        future.set_exception(ToolError(str(message["error"])))
                    else:
                        future.set_result(message.get("result"))
            elif kind == "stop":
                log.info("session %s: stopping", self.session_id)
                return

    def _cancel(self, turn_id: str) -> None:
        # a turn cancelled before its run started is cancelled by _run_turn once it starts; once
        # only (a second cancel would interrupt the cancelled turn's last writes)
        if turn_id in self._cancelled:
            return
        self._cancelled.add(turn_id)
        stream = self._streams.get(turn_id)
        if stream is not None:
            stream.cancel()

    async def _shutdown(self) -> None:
        for turn_id in list(self._streams):  # a running turn ends with RunCancelled
            self._cancel(turn_id)
        if self._turn is not None:
            with swallowed(log, "the running turn did not end cleanly"):
                await asyncio.wait_for(self._turn, 10)
        for future in self._pending.values():
            future.cancel()
        with contextlib.suppress(ConnectionError):
            await self.send({"type": "stopped"})

    async def _heartbeats(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.send({"type": "heartbeat"})

    async def _send_event(self, turn_id: str, event: Event) -> None:
        await self.send({"type": "event", "turn": turn_id, "event": event_to_json(event)})

    async def _run_turn(self, message: Mapping[str, Any], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        turn_id = str(message.get("turn"))
        if turn_id in self._cancelled:  # cancelled while it waited for the previous turn
            self._cancelled.discard(turn_id)
            await self._send_event(turn_id, RunCancelled(self.session_id, ""))
            return
        try:
            data = decode_message(message)
        except (KeyError, TypeError, ValueError) as exc:
            await self._send_event(turn_id, RunFailed(f"a malformed message: {exc}", self.session_id))
            return
        stream = asyncio.create_task(self._stream(turn_id, data), name="session-turn-stream")
        self._streams[turn_id] = stream
        try:
            await asyncio.gather(stream, return_exceptions=True)
            if stream.cancelled():  # cancelled before it began: nothing ran
                await self._send_event(turn_id, RunCancelled(self.session_id, ""))
        finally:
            del self._streams[turn_id]
            self._cancelled.discard(turn_id)

    async def _stream(self, turn_id: str, data: UserMessage) -> None:
        """Run the turn on the engine and send its events, then exactly one final event (the files
        first: on disk when the final event arrives)."""
        assert self.runtime is not None and self.engine is not None and self.memory is not None
        thread_id = f"{self.session_id}:{turn_id}"
        reply = ReplyText()
        final: Event | None = None
        try:
            if data.resume is None:
                await asyncio.to_thread(self.memory.append_message, MEMORY_ROLE_USER, data.text)
            self.engine.thread_id = thread_id
            async with contextlib.aclosing(self.runtime.send_message(data)) as events:
                async for event in events:
                    reply.observe(event)
                    if isinstance(event, RunWaiting):
                        final = RunWaiting(self.session_id, reply.text, event.pending)
                        break
                    await self._send_event(turn_id, event)
            final = final or RunFinished(reply.text, self.session_id)
        except asyncio.CancelledError:
            final = RunCancelled(self.session_id, reply.text)
        except Exception as exc:
            log.exception("session %s: the turn failed", self.session_id)
            final = RunFailed(f"{type(exc).__name__}: {exc}", self.session_id)
        await self._finish_turn(reply.text, thread_id if data.pause is None else None)
        await self._send_event(turn_id, final)

    async def _finish_turn(self, reply: str, thread_id: str | None) -> None:
        await asyncio.to_thread(self._save_turn_end, reply, thread_id)  # one trip to a worker thread

    def _save_turn_end(self, reply: str, thread_id: str | None) -> None:
        """Save the reply to ``conversation.md`` and (``thread_id`` not ``None``) keep only that
        turn's checkpoints."""
        assert self.memory is not None
        if reply:
            try:
                self.memory.append_message(MEMORY_ROLE_ASSISTANT, reply)
            except OSError:
                log.exception("session %s: could not save the reply to conversation.md", self.session_id)
        if thread_id is not None:
            self._drop_older_threads(thread_id)

    def _drop_older_threads(self, keep: str) -> None:
        """Delete the checkpoints of earlier turns: the newest checkpoint is the last turn's state."""
        assert self.checkpointer is not None
        try:
            self.checkpointer.delete_other_threads(keep)
        except Exception:
            log.exception("session %s: could not prune old checkpoints", self.session_id)


async def _child_main() -> int:
    reader, writer = await private_pipe_streams()
    try:
        return await SessionChild(reader, writer).serve()
    except (BrokenPipeError, ConnectionResetError):
        log.info("the parent went away; exiting")
        return 0


def run_child() -> int:
    """The session process, on fd 0/1 (the pipe) and 2 (its log): spawned (:func:`main`) or forked
    from the session template; returns the exit code."""
    from clawlet.config import LogSettings
    from clawlet.logs import configure_logging

    logging_settings = LogSettings()
    configure_logging(logging_settings.log_format, logging_settings.log_level)
    return aio.run(_child_main())


def main() -> None:
    raise SystemExit(run_child())


if __name__ == "__main__":
    main()

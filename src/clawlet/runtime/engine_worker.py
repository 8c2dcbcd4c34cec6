"""The program an engine worker runs (``python -m clawlet.runtime.engine_worker``): clawlet's engine
for any number of concurrent turns of any session, on a pipe to ``clawlet serve``
(:class:`clawlet.runtime.engine_pool.EnginePool`, where the process model is described).

**Pipe protocol** (one JSON object per line, :func:`~clawlet.runtime.process_pipe.encode_line`)::

    parent → worker  init    {held_secrets, warm}                first line: the server's secrets
                                                                 (masked in tool output), and the
                                                                 engine_spec of the engine to
                                                                 build at once
    worker → parent  ready   {pid}
    parent → worker  message {turn, settings, demo_token_delay,   one turn: the fields of
                              parent_config, …}                  process_pipe.encode_message, plus
                                                                 the engine_spec of the session's
                                                                 workspace engine
    worker → parent  event   {turn, event}                       each event the engine yields
    worker → parent  end     {turn, error}                       the turn is over (error: null, or
                                                                 what it raised, "Type: message")
    parent → worker  cancel  {turn}                              cancel that turn (no end follows)

The worker keeps no state of its own between turns: the history, the run context and the pause
point come with each message (a paused turn is continued from its checkpoint files by whichever
worker gets the decision), and one engine per home settings is built on first use and kept. EOF on
stdin means the parent is gone: the worker cancels its turns and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawlet import aio, gcpolicy
from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.agent import AgentEngine
from clawlet.events import event_to_json
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.runtime.process_pipe import decode_message, encode_line, private_pipe_streams
from clawlet.secret_env import hold_secrets

log = logging.getLogger(__name__)


def build_engine(settings: Settings, demo_token_delay: float, parent_config: str | None) -> AgentEngine:
    """The engine of one home, as ``clawlet serve`` builds it (its indexes opened one process at a
    time: opening runs a read-then-write transaction)."""
    from clawlet.memory.stores import open_indexes

    memory, knowledge = open_indexes(settings)
    parent = None if parent_config is None else RuntimeConfig(Path(parent_config))
    engine = AgentEngine(
        settings,
        RuntimeConfig(settings.paths.config_file, parent),
        memory,
        knowledge,
        demo_token_delay=demo_token_delay,
    )
    engine.build_model()
    return engine


class EngineWorker:
    """The worker's side of the pipe (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.engines: dict[str, AgentEngine] = {}
        self.turns: dict[str, asyncio.Task[None]] = {}

    async def send(self, message: Mapping[str, Any]) -> None:
        self.writer.write(encode_line(message))
        await self.writer.drain()

    def engine_for(self, spec: Mapping[str, Any]) -> AgentEngine:
        """The engine of an :func:`~clawlet.runtime.engine_pool.engine_spec`, built on first use."""
        key = json.dumps(spec, sort_keys=True)
        engine = self.engines.get(key)
        if engine is None:
            parent = spec.get("parent_config")
            engine = self.engines[key] = build_engine(
                Settings(**dict(spec["settings"])),
                float(spec.get("demo_token_delay") or 0.0),
                None if parent is None else str(parent),
            )
        return engine

    async def serve(self) -> int:
        raw = await self.reader.readline()
        init = json.loads(raw) if raw.startswith(b"{") else None
        if not isinstance(init, dict) or init.get("type") != "init":
            log.error("the first line on the pipe was not init; exiting")
            return 2
        hold_secrets(dict(init.get("held_secrets") or {}))  # masked in tool output, as in the server
        warm = init.get("warm")
        if isinstance(warm, dict):  # the server's default home: built before the first turn needs it
            await asyncio.to_thread(self.engine_for, warm)
        gc.collect()
        gc.freeze()  # what is loaded now lives as long as the process: full collections skip it
        await self.send({"type": "ready", "pid": os.getpid()})
        try:
            while raw := await self.reader.readline():
                try:
                    message = json.loads(raw)
                except ValueError:
                    log.warning("ignoring a line that is not JSON")
                    continue
                kind = message.get("type") if isinstance(message, dict) else None
                turn_id = str(message.get("turn") or "") if isinstance(message, dict) else ""
                if kind == "message" and turn_id not in self.turns:
                    task = asyncio.create_task(self._run_turn(turn_id, message), name=f"turn-{turn_id}")
                    self.turns[turn_id] = task
                    task.add_done_callback(functools.partial(self._forget, turn_id))
                elif kind == "cancel" and turn_id in self.turns:
                    self.turns[turn_id].cancel()
        finally:
            for task in list(self.turns.values()):
                task.cancel()
            await asyncio.gather(*self.turns.values(), return_exceptions=True)
        return 0

    def _forget(self, turn_id: str, _task: asyncio.Task[None]) -> None:
        self.turns.pop(turn_id, None)

    async def _run_turn(self, turn_id: str, message: Mapping[str, Any]) -> None:
        gcpolicy.turn_started()
        try:
            await self._turn(turn_id, message)
        finally:
            gcpolicy.after_turn()  # once idle: what the turns loaded is frozen, memory released

    async def _turn(self, turn_id: str, message: Mapping[str, Any]) -> None:
        error: str | None = None
        try:
            data = decode_message(message)
            spec = {key: message.get(key) for key in ("settings", "demo_token_delay", "parent_config")}
            engine = await asyncio.to_thread(self.engine_for, spec)
            events = EngineAdapter(engine).send_message(data)
            async with contextlib.aclosing(events):
                async for event in events:
                    await self.send({"type": "event", "turn": turn_id, "event": event_to_json(event)})
        except asyncio.CancelledError:
            return  # the parent cancelled it and waits for nothing more
        except Exception as exc:
            log.exception("turn %s failed", turn_id)
            error = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(ConnectionError):
            await self.send({"type": "end", "turn": turn_id, "error": error})


async def _worker_main() -> int:
    reader, writer = await private_pipe_streams()
    try:
        return await EngineWorker(reader, writer).serve()
    except (BrokenPipeError, ConnectionResetError):
        return 0


def main() -> None:
    from clawlet.config import LogSettings
    from clawlet.logs import configure_logging

    logging_settings = LogSettings()
    configure_logging(logging_settings.log_format, logging_settings.log_level)
    raise SystemExit(aio.run(_worker_main()))


if __name__ == "__main__":
    main()

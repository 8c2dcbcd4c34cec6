"""``SessionManager``: starts turns through runtime adapters, records transcripts, fans out events.

A turn runs in its own task, independent of whoever is watching: a client that disconnects does
not stop the run, and everything generated is saved. The user message is saved before the run
starts; each assistant segment is saved as soon as it is complete.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, suppress
from typing import Any

from clawlet.config import Settings
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.titles import generate_title
from clawlet.events import (
    Event,
    NewSegment,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    TextDelta,
    Title,
    ToolEnd,
    ToolStart,
)
from clawlet.runtime.base import RunConfig, RuntimeAdapter, RuntimeError_, UserMessage
from clawlet.sessions.store import ToolCallRecord, TranscriptStore

log = logging.getLogger(__name__)

AdapterFactory = Callable[[], RuntimeAdapter]


class SessionBusy(Exception):
    """The session already has a turn running."""


class SegmentRecorder:
    """Builds assistant segments from events and appends each finished one to the transcript."""

    def __init__(self, store: TranscriptStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.content = ""
        self.tool_calls: list[ToolCallRecord] = []
        self._by_call_id: dict[str, ToolCallRecord] = {}
        self.segments: list[str] = []

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.content += event.text
        elif isinstance(event, ToolStart):
            record: ToolCallRecord = {"tool": event.tool, "input": event.input, "output": ""}
            self.tool_calls.append(record)
            self._by_call_id[event.call_id] = record
        elif isinstance(event, ToolEnd):
            found = self._by_call_id.get(event.call_id)
            if found is None:
                found = {"tool": event.tool, "input": "", "output": ""}
                self.tool_calls.append(found)
            found["output"] = event.output
        elif isinstance(event, NewSegment):
            self.flush()

    def flush(self) -> None:
        if not self.content and not self.tool_calls:
            return
        self.store.append(self.session_id, "assistant", self.content, self.tool_calls or None)
        self.segments.append(self.content)
        self.content = ""
        self.tool_calls = []
        self._by_call_id = {}

    @property
    def full_text(self) -> str:
        return "\n\n".join(part for part in [*self.segments, self.content] if part)


class Run:
    """One turn in progress: an event log that any number of watchers can follow from the start."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.run_id = uuid.uuid4().hex
        self.log: list[Event] = []
        self.closed = False
        self._changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def publish(self, event: Event) -> None:
        async with self._changed:
            self.log.append(event)
            self._changed.notify_all()

    async def close(self) -> None:
        async with self._changed:
            self.closed = True
            self._changed.notify_all()

    async def events(self, keepalive: float | None = None) -> AsyncIterator[Event | None]:
        """Every event from the first; ``None`` is yielded after ``keepalive`` seconds of silence."""
        index = 0
        while True:
            async with self._changed:
                if index >= len(self.log) and not self.closed:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), timeout=keepalive)
                pending = self.log[index:]
                done = self.closed
            if not pending and not done:
                yield None
                continue
            for event in pending:
                yield event
            index += len(pending)
            if done and index >= len(self.log):
                return

    async def wait(self) -> None:
        if self.task is not None:
            await asyncio.shield(self.task)


class SessionManager:
    """Routes turns to runtime adapters, one running turn per session, failures isolated."""

    def __init__(
        self,
        settings: Settings,
        store: TranscriptStore,
        adapter_factories: dict[str, AdapterFactory],
    ) -> None:
        self.settings = settings
        self.store = store
        self.adapter_factories = adapter_factories
        self.adapters: dict[str, RuntimeAdapter] = {}
        self.runs: dict[str, Run] = {}

    def is_running(self, session_id: str) -> bool:
        run = self.runs.get(session_id)
        return run is not None and not run.closed

    async def _adapter(self, session_id: str, config: RunConfig) -> RuntimeAdapter:
        adapter = self.adapters.get(session_id)
        if adapter is None:
            factory = self.adapter_factories.get(config.runtime_type)
            if factory is None:
                known = ", ".join(sorted(self.adapter_factories))
                raise RuntimeError_(f"unknown runtime type {config.runtime_type!r} (known: {known})")
            adapter = factory()
            await adapter.start(session_id, config)
            self.adapters[session_id] = adapter
        return adapter

    async def start_turn(
        self,
        session_id: str,
        text: str,
        config: RunConfig | None = None,
        *,
        prior: list[dict[str, str]] | None = None,
        title: bool = True,
        context: RunContext = DEFAULT_CONTEXT,
    ) -> Run:
        """Save the user message and start the turn in the background; raise SessionBusy if one runs.

        ``prior`` (from clients that send the whole conversation, like OpenAI's) seeds the history of
        a session that has none stored yet; a stored history always wins. ``title=False`` skips the
        title generated after a session's first exchange."""
        if self.is_running(session_id):
            raise SessionBusy(session_id)
        config = config or RunConfig()
        adapter = await self._adapter(session_id, config)
        history = await asyncio.to_thread(self.store.load_for_agent, session_id)
        seed = prior if prior and not history else []
        history = history or list(seed)
        is_first = title and not any(item["role"] == "user" for item in history)
        run = Run(session_id)
        self.runs[session_id] = run
        try:
            for item in seed:
                await asyncio.to_thread(self.store.append, session_id, item["role"], item["content"])
            await asyncio.to_thread(self.store.append, session_id, "user", text)
        except BaseException:
            self.runs.pop(session_id, None)
            raise
        run.task = asyncio.create_task(
            self._drive(run, adapter, UserMessage(text, history, context), is_first),
            name=f"turn-{session_id}",
        )
        return run

    async def _drive(self, run: Run, adapter: RuntimeAdapter, message: UserMessage, is_first: bool) -> None:
        recorder = SegmentRecorder(self.store, run.session_id)
        await run.publish(RunStarted(run.session_id, run.run_id))
        outcome: Event
        try:
            async with aclosing(adapter.send_message(message)) as events:
                async for event in events:
                    recorder.observe(event)
                    await run.publish(event)
            recorder.flush()
            outcome = RunFinished(recorder.full_text, run.session_id)
        except asyncio.CancelledError:
            recorder.flush()
            outcome = RunCancelled(run.session_id, recorder.full_text)
        except Exception as exc:
            log.exception("turn failed in session %s", run.session_id)
            recorder.flush()
            outcome = RunFailed(f"{type(exc).__name__}: {exc}", run.session_id)
        try:
            await run.publish(outcome)
            if isinstance(outcome, RunFinished) and is_first:
                title = await self._title_if_missing(run.session_id, message.text, outcome.content)
                if title:
                    await run.publish(Title(run.session_id, title))
        finally:
            await run.close()
            # Watchers keep their own reference; the manager forgets finished runs.
            if self.runs.get(run.session_id) is run:
                del self.runs[run.session_id]

    async def _title_if_missing(self, session_id: str, user_text: str, reply: str) -> str | None:
        data = await asyncio.to_thread(self.store.load, session_id)
        if data["title"]:
            return None
        title = await generate_title(self.settings, user_text, reply)
        await asyncio.to_thread(self.store.rename, session_id, title)
        return title

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn; False if nothing was running."""
        run = self.runs.get(session_id)
        if run is None or run.closed or run.task is None:
            return False
        adapter = self.adapters.get(session_id)
        if adapter is not None:
            await adapter.cancel()
        run.task.cancel()
        with suppress(asyncio.CancelledError):
            await asyncio.shield(run.task)
        if not run.closed:
            # cancelled before its first step: _drive never ran, so close the run here
            await run.publish(RunCancelled(run.session_id, ""))
            await run.close()
            if self.runs.get(session_id) is run:
                del self.runs[session_id]
        return True

    async def forget(self, session_id: str) -> None:
        """Stop and drop the session's adapter (after the session is deleted)."""
        await self.cancel(session_id)
        adapter = self.adapters.pop(session_id, None)
        self.runs.pop(session_id, None)
        if adapter is not None:
            await adapter.stop()

    def snapshot(self) -> dict[str, Any]:
        return {sid: adapter.get_snapshot() for sid, adapter in self.adapters.items()}

    async def shutdown(self) -> None:
        """Cancel running turns (their partial output is saved) and stop every adapter."""
        for session_id in list(self.runs):
            await self.cancel(session_id)
        for adapter in self.adapters.values():
            await adapter.stop()
        self.adapters.clear()

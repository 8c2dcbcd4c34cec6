"""The ``engine`` runtime: clawlet's own engine (the seed's "SemiGraph" runtime) on a workspace's
:class:`EngineHandle`, in-process (:class:`EngineAdapter`) or on engine workers
(:class:`~clawlet.runtime.engine_pool.PooledEngineAdapter`), both on :class:`EngineTurns`' bookkeeping."""

from __future__ import annotations

import contextlib
import threading
from abc import abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.tool_approvals import Decision
from clawlet.events import Event, Pending
from clawlet.memory.stores import KnowledgeBase, MemoryIndex
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from clawlet.engine.agent import AgentEngine


@dataclass
class EngineHandle:
    """A workspace's agent engine, built (and LangChain imported) the first time it is asked for."""

    settings: Settings
    runtime_config: RuntimeConfig
    memory: MemoryIndex
    knowledge: KnowledgeBase
    demo_token_delay: float = 0.0
    model: BaseChatModel | None = None
    """The chat model the engine uses instead of the configured provider's (a test's in-process model)."""
    _engine: AgentEngine | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def get(self) -> AgentEngine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from clawlet.engine.agent import AgentEngine

                    self._engine = AgentEngine(
                        self.settings,
                        self.runtime_config,
                        self.memory,
                        self.knowledge,
                        demo_token_delay=self.demo_token_delay,
                        model=self.model,
                    )
        return self._engine


class EngineTurns(RuntimeAdapter):
    """One session's turns on clawlet's engine, wherever it runs (:meth:`turn_events`): the session's
    id, how many turns it ran and whether one runs now (its snapshot)."""

    supports_approvals = True

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.turns = 0
        self.running = False

    @abstractmethod
    def turn_events(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        """The engine's events of one turn."""

    async def start(self, session_id: str, config: RunConfig) -> None:
        self.session_id = session_id

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        self.turns += 1
        self.running = True
        events = self.turn_events(data)
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        finally:
            self.running = False

    async def cancel(self) -> None:
        # Cancellation is delivered by cancelling the task that iterates send_message(): it closes
        # the turn (the engine's subprocesses are killed by their own cancellation handlers, a
        # worker's turn is cancelled in the worker).
        return None

    async def stop(self) -> None:
        self.session_id = None

    def get_snapshot(self) -> dict[str, Any]:
        return {
            "runtime_type": "engine",
            "session_id": self.session_id,
            "turns": self.turns,
            "running": self.running,
        }


class EngineAdapter(EngineTurns):
    """A turn at a time on the workspace's engine in this process; the session's state is its
    transcript and (when paused) its approvals on disk, so the manager drops the adapter between
    turns."""

    keeps_state = False
    turns_on_this_loop = True

    def __init__(self, engine: AgentEngine) -> None:
        super().__init__()
        self.engine = engine

    @property
    def writes_while_model_thinks(self) -> bool:
        return self.engine.traces_model_requests

    def turn_events(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        return self.engine.stream(data.text, data.history, data.context, pause=data.pause, resume=data.resume)

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        return self.engine.check_decision(pending, decision)

"""``RuntimeAdapter``: the interface every runtime (in-process engine, bridge, remote) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.events import Event


@dataclass(frozen=True)
class RunConfig:
    """Per-session options a runtime is started with."""

    runtime_type: str = "engine"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UserMessage:
    """One user turn: the text plus the history (oldest first) the runtime should continue from."""

    text: str
    history: list[dict[str, str]] = field(default_factory=list)
    context: RunContext = DEFAULT_CONTEXT


class RuntimeError_(Exception):
    """A runtime could not be created or started (unknown type, missing dependency)."""


class RuntimeAdapter(ABC):
    """Runs agent turns for one session and yields clawlet events."""

    @abstractmethod
    async def start(self, session_id: str, config: RunConfig) -> None: ...

    @abstractmethod
    def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        """Yield the events of one turn (text, tools, segments, usage); the caller adds run
        lifecycle events (started, finished, cancelled, failed)."""

    @abstractmethod
    async def cancel(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    def get_snapshot(self) -> dict[str, Any]: ...

"""``RuntimeAdapter``: the interface every runtime (in-process engine, bridge, remote) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.tool_approvals import Decision, PausePoint, Resume
from clawlet.events import Event, Pending


@dataclass(frozen=True)
class RunConfig:
    """Per-session options a runtime is started with."""

    runtime_type: str = "engine"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UserMessage:
    """One user turn: the text plus the history (oldest first) the runtime should continue from.

    ``pause`` is where a turn that may wait for the user keeps its state (given by the manager to
    runtimes with ``supports_approvals``); ``resume`` continues the turn paused there instead of
    starting one (``text`` and ``history`` are then unused)."""

    text: str
    history: list[dict[str, str]] = field(default_factory=list)
    context: RunContext = DEFAULT_CONTEXT
    pause: PausePoint | None = None
    resume: Resume | None = None


class RuntimeFailure(Exception):
    """A runtime could not be created or started (unknown type, missing dependency)."""


class RuntimeAdapter(ABC):
    """Runs agent turns for one session and yields clawlet events.

    A runtime with ``supports_approvals`` can pause a turn before a tool runs (it then yields
    ``ApprovalRequested`` / ``QuestionAsked`` and ends with ``RunWaiting``) and continue it from a
    :class:`UserMessage` with ``resume``; other runtimes get turns that never ask (``ask`` tools
    are denied)."""

    supports_approvals: bool = False
    turns_on_this_loop: bool = False
    """Whether the runtime runs its turns on this process's event loop (the in-process engine):
    such a turn's user message is written on the loop, or starts once a worker thread wrote it,
    since a write beside it waits for the busy loop at every system call; another runtime's turn
    starts while the message is written (:mod:`clawlet.runtime.user_message`)."""

    @property
    def writes_while_model_thinks(self) -> bool:
        """Whether a lone turn on this loop may write a stored session's user message once its
        model request is out (:mod:`clawlet.llm.request_sent`) rather than before it starts."""
        return False

    keeps_state: bool = True
    """Whether the adapter holds something of the session between turns (a process, a memory, a
    connection). One that does not (``False``) is dropped by the manager once a turn ends without
    waiting for a decision, and made again for the session's next turn: a server that served many
    sessions keeps no object per session (each one would pin a block of memory)."""

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        """Raise :class:`~clawlet.engine.tool_approvals.InvalidDecision` if ``decision`` cannot answer
        ``pending``; runtimes that can resume check the arguments of an edit too."""
        from clawlet.engine.tool_approvals import check_decision

        return check_decision(pending, decision, None)

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

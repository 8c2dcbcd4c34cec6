"""Where inbox tasks run: clawlet's own engine (``local``) or an OpenClaw gateway (``gateway``).

Both give every task its own conversation: the session is ``inbox-<task id>`` (lower-cased) of
the task's agent, so a follow-up message continues that task and tasks never share context. For the
gateway that is the session key ``agent:<agentId>:inbox-<task id>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from clawlet.events import NewSegment, RunCancelled, RunFailed, RunFinished, TextDelta
from clawlet.gateway.protocol import GatewayError, session_key
from clawlet.inbox.models import Task
from clawlet.runtime.manager import SessionBusy

if TYPE_CHECKING:
    from clawlet.gateway.client import GatewayClient
    from clawlet.services import Services, Workspaces

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str], None]
"""Called with the reply's cumulative text while it streams."""


@dataclass(frozen=True)
class Outcome:
    """How one run ended: ``final`` (the reply), ``error`` (with a reason) or ``aborted``."""

    state: Literal["final", "error", "aborted"]
    text: str
    error: str | None = None


def task_session_name(task_id: str) -> str:
    return f"inbox-{task_id.lower()}"


def task_session_key(task: Task) -> str:
    return session_key(task.agent_id, task_session_name(task.id))


class ExecutionBackend(Protocol):
    name: str

    async def run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        """Send ``content`` to the task's conversation and wait for the reply."""
        ...

    async def abort(self, task: Task) -> None:
        """Stop the task's running reply; its ``run`` then returns ``aborted``."""
        ...

    async def close(self) -> None: ...


class LocalBackend:
    """Runs tasks on clawlet's engine through the runtime layer; agent ``main`` is the main home,
    any other agent the clawlet workspace of the same name."""

    name = "local"

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        # an abort can arrive before the run has started: remembered until the run ends
        self._abort_requested: set[str] = set()

    def _services(self, agent_id: str) -> Services:
        return self.workspaces.get(None if agent_id == "main" else agent_id)

    async def run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        try:
            return await self._run(task, content, on_text)
        finally:
            self._abort_requested.discard(task.id)

    async def _run(self, task: Task, content: str, on_text: ProgressCallback) -> Outcome:
        services = self._services(task.agent_id)
        session = task_session_name(task.id)
        try:
            run = await services.sessions.start_turn(session, content, title=False)
        except SessionBusy:
            return Outcome("error", "", "the agent is still answering an earlier message in this task")
        if task.id in self._abort_requested:
            await services.sessions.cancel(session)
        segments: list[str] = []
        current = ""
        async for event in run.events():
            if isinstance(event, TextDelta):
                current += event.text
                on_text("\n\n".join([*segments, current]))
            elif isinstance(event, NewSegment):
                if current:
                    segments.append(current)
                current = ""
            elif isinstance(event, RunFinished):
                return Outcome("final", event.content)
            elif isinstance(event, RunCancelled):
                return Outcome("aborted", event.content)
            elif isinstance(event, RunFailed):
                return Outcome("error", "\n\n".join([*segments, current]), event.error)
        return Outcome("error", "", "the run ended without a result")

    async def abort(self, task: Task) -> None:
        self._abort_requested.add(task.id)
        await self._services(task.agent_id).sessions.cancel(task_session_name(task.id))

    async def close(self) -> None:
        return None


class GatewayBackend:
    """Passes each message unchanged to an OpenClaw gateway (the seed's transparent channel)."""

    name = "gateway"

    def __init__(self, client: GatewayClient, timeout_seconds: float) -> None:
        self.client = client
        self.timeout_seconds = timeout_seconds
        self._abort_requested: set[str] = set()

    async def run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        try:
            return await self._run(task, content, message_id, on_text)
        finally:
            self._abort_requested.discard(task.id)

    async def _run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        from clawlet.gateway.client import GatewayUnavailable

        text = ""
        abort_sent = False
        try:
            if not self.client.connected:
                await self.client.start()
            updates = self.client.chat(
                task_session_key(task), content, message_id, timeout=self.timeout_seconds
            )
            async for update in updates:
                text = update.text
                if task.id in self._abort_requested and not abort_sent:
                    abort_sent = True  # the abort came before the gateway knew the run
                    await self.abort(task)
                if update.state == "delta":
                    on_text(text)
                elif update.state == "final":
                    return Outcome("final", text)
                elif update.state == "error":
                    return Outcome("error", text, update.error or "the gateway reported an error")
                else:
                    return Outcome("aborted", text, update.error)
        except GatewayError as exc:
            return Outcome("error", text, f"the OpenClaw gateway refused the message: {exc}")
        except GatewayUnavailable as exc:
            return Outcome("error", text, f"OpenClaw gateway unavailable: {exc}")
        except TimeoutError:
            return Outcome(
                "error",
                text,
                f"no reply from the OpenClaw gateway within {self.timeout_seconds:g} s; the run was aborted",
            )
        return Outcome("error", text, "the gateway ended the run without a result")

    async def abort(self, task: Task) -> None:
        from clawlet.gateway.client import GatewayUnavailable

        self._abort_requested.add(task.id)
        try:
            await self.client.abort(task_session_key(task))
        except (GatewayError, GatewayUnavailable) as exc:
            log.warning("chat.abort for task %s failed: %s", task.id, exc)

    async def close(self) -> None:
        await self.client.close()

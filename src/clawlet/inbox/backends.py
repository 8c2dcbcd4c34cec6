"""Where inbox tasks run: clawlet's own engine (``local``) or an OpenClaw gateway (``gateway``).

Both give every task its own conversation: the session is ``inbox-<task id>`` (lower-cased) of
the task's agent, so a follow-up message continues that task and tasks never share context. For the
gateway that is the session key ``agent:<agentId>:inbox-<task id>``.

The local backend runs turns that may ask (``RunContext(approval_mode="ask")``): a run can end
``waiting`` (a tool whose policy is ``ask``, or the agent's ``ask_user`` question); what it waits for
is kept on disk by the runtime (it survives a restart) and :meth:`LocalBackend.resume` continues it
with the user's decision. The gateway backend cannot pause (an OpenClaw gateway's runs never wait
for the inbox), so its tasks never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import Decision, InvalidDecision
from clawlet.event_stream import EventStream
from clawlet.events import (
    ApprovalRequested,
    NewSegment,
    Pending,
    QuestionAsked,
    Retrieval,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    TextDelta,
    Thinking,
    Title,
    ToolEnd,
    ToolStart,
    Usage,
)
from clawlet.gateway.protocol import GatewayError, session_key
from clawlet.inbox.models import Task
from clawlet.inbox.reconcile import reply_after
from clawlet.inbox.waiting import InvalidInboxDecision
from clawlet.runtime.manager import Run, SessionWaiting
from clawlet.runtime.session_errors import SESSION_ERRORS, session_error

if TYPE_CHECKING:
    from clawlet.gateway.client import GatewayClient
    from clawlet.services import Services, Workspaces

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str], None]
"""Called with the reply's cumulative text while it streams."""


RECONCILE_POLL = 2.0
"""While a reply is awaited in the transcript, it is read again at least this often (seconds),
besides after every run of the session that ends and every reconnect."""

INBOX_CONTEXT = RunContext.for_edge(can_ask=True)
"""Inbox turns may pause: the inbox shows the question and the user's reply resumes the run."""


@dataclass(frozen=True)
class Outcome:
    """How one run ended: ``final`` (the reply), ``error`` (with a reason), ``aborted``, or
    ``waiting`` for the user (``pending``: what it waits for)."""

    state: Literal["final", "error", "aborted", "waiting"]
    text: str
    error: str | None = None
    pending: tuple[Pending, ...] = ()


def task_session_name(task_id: str) -> str:
    return f"inbox-{task_id.lower()}"


def task_session_key(task: Task) -> str:
    return session_key(task.agent_id, task_session_name(task.id))


def refused(exc: Exception, task: Task, approval_id: str = "") -> Outcome:
    """The failed run a refusal of the session manager (one of
    :data:`~clawlet.runtime.session_errors.SESSION_ERRORS`) is to the task: the one mapping's message
    (:func:`~clawlet.runtime.session_errors.session_error`)."""
    decide = f"decide it (POST /api/v1/tasks/{task.id}/approvals/<approvalId>) or cancel the task first"
    error = session_error(exc, task_session_name(task.id), approval_id, decide=decide)
    return Outcome("error", "", error.message)


class ExecutionBackend(Protocol):
    name: str

    async def run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        """Send ``content`` to the task's conversation and wait for the reply."""
        ...

    async def resume(
        self, task: Task, approval_id: str, decision: Decision, on_text: ProgressCallback
    ) -> Outcome:
        """Continue the task's paused run with the user's decision and wait for the reply."""
        ...

    async def check_decision(self, task: Task, approval_id: str, decision: Decision) -> Decision:
        """``decision`` checked against what it answers, as :meth:`resume` will check it (raises
        :class:`~clawlet.inbox.waiting.InvalidInboxDecision`); nothing is decided."""
        ...

    def waiting_for(self, task: Task) -> list[Pending]:
        """What the task's conversation waits for (blocking: read from disk); [] if nothing."""
        ...

    def decision_of(self, task: Task, approval_id: str) -> str | None:
        """How an approval of the task's conversation was decided, or None (blocking)."""
        ...

    async def drop_pending(self, task: Task) -> None:
        """Forget what the task's conversation waits for (its paused tool calls never run)."""
        ...

    async def abort(self, task: Task) -> None:
        """Stop the task's running reply; its ``run`` then returns ``aborted``."""
        ...

    async def close(self) -> None: ...


class RunWatch(EventStream[None]):
    """Follows a local run for the inbox: its answer so far goes to ``on_text`` as it grows, and
    :meth:`outcome` is how the run ended. Nothing goes on a wire, so every handler yields nothing."""

    def __init__(self, on_text: ProgressCallback) -> None:
        super().__init__()
        self.on_progress = on_text

    def outcome(self) -> Outcome:
        match self.end:
            case RunFinished(content=content):
                return Outcome("final", content)
            case RunWaiting(content=content, pending=pending):
                return Outcome("waiting", content, pending=tuple(pending))
            case RunCancelled(content=content):
                return Outcome("aborted", content)
            case RunFailed(error=error):
                return Outcome("error", self.answer.text, error)
        return Outcome("error", "", "the run ended without a result")

    def on_text(self, event: TextDelta) -> Iterable[None]:
        if self.end is None:
            self.on_progress(self.answer.text)
        return ()

    def on_run_started(self, event: RunStarted) -> Iterable[None]:
        return ()

    def on_retrieval(self, event: Retrieval) -> Iterable[None]:
        return ()

    def on_thinking(self, event: Thinking) -> Iterable[None]:
        return ()

    def on_tool_start(self, event: ToolStart) -> Iterable[None]:
        return ()

    def on_tool_end(self, event: ToolEnd) -> Iterable[None]:
        return ()

    def on_new_segment(self, event: NewSegment) -> Iterable[None]:
        return ()

    def on_usage(self, event: Usage) -> Iterable[None]:
        return ()

    def on_approval(self, event: ApprovalRequested) -> Iterable[None]:
        return ()

    def on_question(self, event: QuestionAsked) -> Iterable[None]:
        return ()

    def on_title(self, event: Title) -> Iterable[None]:
        return ()

    def on_finished(self, event: RunFinished) -> Iterable[None]:
        return ()

    def on_cancelled(self, event: RunCancelled) -> Iterable[None]:
        return ()

    def on_failed(self, event: RunFailed) -> Iterable[None]:
        return ()

    def on_waiting(self, event: RunWaiting) -> Iterable[None]:
        return ()


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
            run = await services.sessions.start_turn(session, content, title=False, context=INBOX_CONTEXT)
        except SessionWaiting as exc:
            # the conversation waits already (decided elsewhere than the inbox knew): ask again
            return Outcome("waiting", "", pending=tuple(exc.pending))
        except SESSION_ERRORS as exc:
            return refused(exc, task)
        return await self._watch(task, run, on_text)

    async def resume(
        self, task: Task, approval_id: str, decision: Decision, on_text: ProgressCallback
    ) -> Outcome:
        try:
            return await self._resume(task, approval_id, decision, on_text)
        finally:
            self._abort_requested.discard(task.id)

    async def _resume(
        self, task: Task, approval_id: str, decision: Decision, on_text: ProgressCallback
    ) -> Outcome:
        services = self._services(task.agent_id)
        try:
            run = await services.sessions.resume(task_session_name(task.id), approval_id, decision)
        except SESSION_ERRORS as exc:
            return refused(exc, task, approval_id)
        return await self._watch(task, run, on_text)

    async def check_decision(self, task: Task, approval_id: str, decision: Decision) -> Decision:
        sessions = self._services(task.agent_id).sessions
        try:
            return await sessions.check_decision(task_session_name(task.id), approval_id, decision)
        except InvalidDecision as exc:
            raise InvalidInboxDecision(str(exc)) from exc
        except SESSION_ERRORS:
            return decision  # refused again by resume, which fails the task saying why

    async def _watch(self, task: Task, run: Run, on_text: ProgressCallback) -> Outcome:
        """Follow the run to its end (the run is closed when this returns, so the session takes
        the next message or decision at once)."""
        if task.id in self._abort_requested:
            await self._services(task.agent_id).sessions.cancel(task_session_name(task.id))
        watch = RunWatch(on_text)
        await watch.consume(run.events())
        return watch.outcome()

    def waiting_for(self, task: Task) -> list[Pending]:
        return self._services(task.agent_id).sessions.waiting_for(task_session_name(task.id))

    def decision_of(self, task: Task, approval_id: str) -> str | None:
        return self._services(task.agent_id).sessions.decision_of(task_session_name(task.id), approval_id)

    async def drop_pending(self, task: Task) -> None:
        sessions = self._services(task.agent_id).sessions
        session = task_session_name(task.id)
        if not sessions.is_running(session) and await asyncio.to_thread(sessions.is_waiting, session):
            await sessions.cancel(session)

    async def abort(self, task: Task) -> None:
        self._abort_requested.add(task.id)
        await self._services(task.agent_id).sessions.cancel(task_session_name(task.id))

    async def close(self) -> None:
        return None


class GatewayBackend:
    """Passes each message unchanged to an OpenClaw gateway (the seed's transparent channel).

    A run never ends ``final`` without text: when the gateway's ``final`` is empty (the session was
    busy and the message is answered by a run of its own) or the connection is lost mid-run (the
    gateway may finish or replay the turn after a restart), the reply is looked up in the session's
    ``chat.history`` (:mod:`clawlet.inbox.reconcile`) after every reconnect and every run of the
    session that ends, until it is there or the run timeout passes (then the task fails saying why).
    Waiting for a connection is bounded by the same timeout; while runs wait, the client keeps
    reconnecting (every ``backoff_max`` s once its regular attempts are spent)."""

    name = "gateway"

    def __init__(self, client: GatewayClient, timeout_seconds: float) -> None:
        self.client = client
        self.timeout_seconds = timeout_seconds
        self._abort_requested: set[str] = set()
        self._wake: dict[str, asyncio.Event] = {}
        """Per running task: set when a chat event of its session ends a run, or on abort."""
        client.keep_reconnecting = lambda: bool(self._wake)

    async def run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        self._wake[task.id] = asyncio.Event()
        try:
            return await self._run(task, content, message_id, on_text)
        finally:
            self._abort_requested.discard(task.id)
            del self._wake[task.id]

    async def _run(self, task: Task, content: str, message_id: str, on_text: ProgressCallback) -> Outcome:
        from clawlet.gateway.client import GatewayUnavailable

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_seconds
        text = ""
        abort_sent = False
        try:
            await self.client.connect_by(deadline)
        except GatewayError as exc:
            return Outcome("error", text, f"the OpenClaw gateway refused the connection: {exc}")
        except GatewayUnavailable as exc:
            return self._unreachable(text, exc)
        updates = self.client.chat(
            task_session_key(task), content, message_id, timeout=max(0.0, deadline - loop.time())
        )
        try:
            async with contextlib.aclosing(updates):
                async for update in updates:
                    text = update.text
                    if task.id in self._abort_requested and not abort_sent:
                        abort_sent = True  # the abort came before the gateway knew the run
                        await self.abort(task)
                    if update.state == "delta":
                        on_text(text)
                    elif update.state == "final":
                        if text.strip():
                            return Outcome("final", text)
                        log.info("task %s: empty final from the gateway; reading the transcript", task.id)
                        break
                    elif update.state == "error":
                        return Outcome("error", text, update.error or "the gateway reported an error")
                    else:
                        return Outcome("aborted", text, update.error)
        except GatewayError as exc:
            return Outcome("error", text, f"the OpenClaw gateway refused the message: {exc}")
        except GatewayUnavailable as exc:
            log.info("task %s: %s; waiting to read the transcript", task.id, exc)
            return await self._reconcile(task, content, message_id, on_text, deadline, text, lost=True)
        except TimeoutError:
            return Outcome(
                "error",
                text,
                f"no reply from the OpenClaw gateway within {self.timeout_seconds:g} s; the run was aborted",
            )
        return await self._reconcile(task, content, message_id, on_text, deadline, text, lost=False)

    def _unreachable(self, text: str, exc: Exception) -> Outcome:
        reason = self.client.last_error or exc
        return Outcome(
            "error",
            text,
            f"the OpenClaw gateway could not be reached within {self.timeout_seconds:g} s: {reason}",
        )

    async def _reconcile(
        self,
        task: Task,
        content: str,
        message_id: str,
        on_text: ProgressCallback,
        deadline: float,
        text: str,
        *,
        lost: bool,
    ) -> Outcome:
        """Read the reply from the session's transcript once it is there (see the class docstring).
        ``lost``: the connection dropped during the run; if the message is not in the transcript
        then, it never reached the gateway and is sent again (once, with the same idempotency key,
        so a gateway that has it ignores the copy)."""
        from clawlet.gateway.client import GatewayUnavailable

        loop = asyncio.get_running_loop()
        key = task_session_key(task).lower()
        resend = lost
        wake = self._wake[task.id]

        def on_chat(payload: dict[str, Any]) -> None:
            if payload.get("state") in ("final", "aborted", "error"):
                wake.set()

        remove = self.client.on_chat_event(key, on_chat)
        seen = False
        try:
            while task.id not in self._abort_requested:
                try:
                    await self.client.connect_by(deadline)
                    wake.clear()
                    limit = max(0.0, min(self.client.request_timeout, deadline - loop.time()))
                    history = await self.client.history(key, timeout=limit)
                    found = reply_after(history, message_id, content)
                    if not found.seen and resend:
                        log.info("task %s: the message is not in the transcript; sending it again", task.id)
                        await self.client.send(key, content, message_id, timeout=limit)
                        resend = False
                except GatewayError as exc:
                    return Outcome("error", text, f"the OpenClaw gateway refused the message: {exc}")
                except GatewayUnavailable as exc:
                    if loop.time() < deadline:
                        continue
                    if self.client.connected:
                        break
                    reason = self.client.last_error or exc
                    return Outcome(
                        "error",
                        text,
                        f"the connection to the OpenClaw gateway was lost and not back within"
                        f" {self.timeout_seconds:g} s ({reason}); OpenClaw may still have the reply",
                    )
                if found.reply is not None:
                    log.info("task %s: reply %s read from the transcript", task.id, found.reply.message_id)
                    on_text(found.reply.text)
                    return Outcome("final", found.reply.text)
                seen = seen or found.seen
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), min(RECONCILE_POLL, remaining))
        finally:
            remove()
        if task.id in self._abort_requested:
            return Outcome("aborted", text)
        where = (
            "its transcript has the message but no reply" if seen else "the message is not in its transcript"
        )
        if self.client.connected:
            await self.abort(task)
        return Outcome(
            "error", text, f"no reply from the OpenClaw gateway within {self.timeout_seconds:g} s ({where})"
        )

    async def resume(
        self, task: Task, approval_id: str, decision: Decision, on_text: ProgressCallback
    ) -> Outcome:
        return Outcome("error", "", "tasks on an OpenClaw gateway never wait, so there is nothing to resume")

    async def check_decision(self, task: Task, approval_id: str, decision: Decision) -> Decision:
        raise InvalidInboxDecision("tasks on an OpenClaw gateway never wait, so there is nothing to decide")

    def waiting_for(self, task: Task) -> list[Pending]:
        return []  # the gateway's runs never pause for the inbox

    def decision_of(self, task: Task, approval_id: str) -> str | None:
        return None

    async def drop_pending(self, task: Task) -> None:
        return None

    async def abort(self, task: Task) -> None:
        from clawlet.gateway.client import GatewayUnavailable

        self._abort_requested.add(task.id)
        if (wake := self._wake.get(task.id)) is not None:
            wake.set()
        try:
            await self.client.abort(task_session_key(task))
        except (GatewayError, GatewayUnavailable) as exc:
            log.warning("chat.abort for task %s failed: %s", task.id, exc)

    async def close(self) -> None:
        await self.client.close()

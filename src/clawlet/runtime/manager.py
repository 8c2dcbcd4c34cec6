"""``SessionManager``: starts turns through runtime adapters, records transcripts, fans out events.

A turn runs in its own task, independent of whoever is watching: a client that disconnects does
not stop the run, and everything generated is saved. The user message is on disk before anything
of the answer goes out or is written (when it is written: :mod:`clawlet.runtime.user_message`);
each assistant segment is saved as soon as it is complete.

**Approvals.** A turn started with ``RunContext(approval_mode="ask")`` on a runtime that supports
approvals may pause before a tool runs: its run then ends with ``RunWaiting`` (after
``ApprovalRequested`` / ``QuestionAsked`` events), the session is not busy, and what it waits for
is kept on disk (:class:`~clawlet.runtime.approval_store.ApprovalStore`) so a restarted server lists it
(:meth:`SessionManager.waiting_for`) and continues it. :meth:`SessionManager.resume` decides one
pending item and continues the turn as a new :class:`Run` of the same session, streamed like any
run (``ToolEnd`` of the decided call first, then the model's answer; it may end waiting again).
While a session waits, :meth:`start_turn` raises :class:`SessionWaiting`; :meth:`cancel` drops
what it waits for. The segment holding the paused tool calls is saved when the run pauses and
completed in place (not duplicated) when it continues.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager, nullcontext, suppress
from dataclasses import replace
from typing import Any

from clawlet import gcpolicy
from clawlet.config import Settings
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.titles import GeneratedTitle, TitleWriter
from clawlet.engine.tool_approvals import Decision, Resume
from clawlet.events import (
    ApprovalRequested,
    Event,
    NewSegment,
    Pending,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    RunText,
    RunWaiting,
    TextDelta,
    Title,
    ToolEnd,
    ToolStart,
    merge_text_deltas,
    render_tool_input,
)
from clawlet.llm.request_sent import while_the_model_thinks
from clawlet.runtime.approval_store import ApprovalStore, PausedTurn
from clawlet.runtime.base import RunConfig, RuntimeAdapter, RuntimeFailure, UserMessage
from clawlet.runtime.user_message import UserMessageWrite
from clawlet.sessions.store import (
    SessionCorrupt,
    SessionNotFound,
    StoredMessage,
    ToolCallRecord,
    TranscriptStore,
)
from clawlet.tools.ask_user import ASK_USER_TOOL

log = logging.getLogger(__name__)

AdapterFactory = Callable[[], RuntimeAdapter]
RunObserver = Callable[["Run"], None]
"""Called with every run a ``SessionManager`` starts (a turn or a continuation), as it is
registered: follow it with :meth:`Run.events` (e.g. to forward its events elsewhere)."""


class SessionBusy(Exception):
    """The session already has a turn running or starting (or is being compressed or deleted)."""


class SessionWaiting(SessionBusy):
    """The session waits for the user's decisions (``pending``): decide them or cancel first."""

    def __init__(self, session_id: str, pending: list[Pending]) -> None:
        super().__init__(session_id)
        self.session_id = session_id
        self.pending = pending


class ApprovalNotFound(LookupError):
    """The session waits for no approval (or question) with this id."""


class ApprovalDecided(Exception):
    """This approval (or question) was already decided."""

    def __init__(self, approval_id: str, decision: str) -> None:
        super().__init__(approval_id)
        self.approval_id = approval_id
        self.decision = decision


CANCELLED_OUTPUT = "[not run: the user cancelled while it waited for approval]"


class SegmentRecorder:
    """Builds assistant segments from events and appends each finished one to the transcript."""

    def __init__(self, store: TranscriptStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.content = ""
        self.tool_calls: list[ToolCallRecord] = []
        self._by_call_id: dict[str, ToolCallRecord] = {}
        self.segments: list[str] = []
        self._reopened: StoredMessage | None = None  # the stored segment this one continues
        self._carried = 0  # characters of ``content`` that came from that segment

    def reopen(
        self, waiting: list[Pending], decided: Pending | None = None, decision: Decision | None = None
    ) -> None:
        """Continue the last stored segment, which holds the paused tool calls (``waiting``): their
        results fill it in place when they arrive. If it is not there any more (edited, compressed),
        the calls get a new segment. An edit shows the arguments the tool ran with."""
        try:
            messages = self.store.load(self.session_id)["messages"]
        except SessionNotFound:
            messages = []
        last = messages[-1] if messages else None
        matched: dict[str, ToolCallRecord] = {}
        if last is not None and last["role"] == "assistant":
            records: list[ToolCallRecord] = [r.copy() for r in last.get("tool_calls", [])]
            used: set[int] = set()
            for item in waiting:
                for index, record in enumerate(records):
                    if index not in used and not record["output"] and _same_call(record, item):
                        matched[item.call_id] = record
                        used.add(index)
                        break
            if matched:
                self._reopened = last
                self.content = last["content"]
                self._carried = len(self.content)
                self.tool_calls = records
                self._by_call_id = matched
        if not matched:
            for item in waiting:
                record = _record_for(item)
                self.tool_calls.append(record)
                self._by_call_id[item.call_id] = record
        if (
            decided is not None
            and decision is not None
            and decision.type == "edit"
            and decision.args is not None
        ):
            found = self._by_call_id.get(decided.call_id)
            if found is not None:
                found["input"] = render_tool_input(decision.args)

    @property
    def reopened(self) -> bool:
        """Whether this recorder continues a stored segment (see :meth:`reopen`)."""
        return self._reopened is not None

    def mark(self, call_id: str, output: str) -> None:
        """Set the output of a call this segment holds (e.g. a cancelled approval)."""
        found = self._by_call_id.get(call_id)
        if found is not None:
            found["output"] = output

    def observe(self, event: Event) -> None:
        """Add ``event`` to the current segment (the caller flushes it at a ``NewSegment``: a file
        write, done off the event loop)."""
        if isinstance(event, TextDelta):
            self.content += event.text
        elif isinstance(event, ToolStart):
            record = _record(event.tool, event.input, event.call_id)
            self.tool_calls.append(record)
            self._by_call_id[event.call_id] = record
        elif isinstance(event, ToolEnd):
            found = self._by_call_id.get(event.call_id)
            if found is None:
                found = _record(event.tool, "", event.call_id)
                self.tool_calls.append(found)
            found["output"] = event.output
            found["is_error"] = event.is_error

    def flush(self) -> None:
        if not self.content and not self.tool_calls:
            return
        if self._reopened is not None:
            message: StoredMessage = {"role": "assistant", "content": self.content}
            if self.tool_calls:
                message["tool_calls"] = self.tool_calls
            self.store.replace_last(self.session_id, self._reopened, message)
            self._reopened = None
        else:
            self.store.append(self.session_id, "assistant", self.content, self.tool_calls or None)
        self.segments.append(self.content[self._carried :])
        self._carried = 0
        self.content = ""
        self.tool_calls = []
        self._by_call_id = {}

    @property
    def full_text(self) -> str:
        """The text this run produced (a continued segment's earlier text is not repeated)."""
        return "\n\n".join(part for part in [*self.segments, self.content[self._carried :]] if part)


def _record(tool: str, tool_input: str, call_id: str) -> ToolCallRecord:
    """A tool call that has not returned yet."""
    return {"tool": tool, "input": tool_input, "output": "", "call_id": call_id, "is_error": False}


def _record_for(item: Pending) -> ToolCallRecord:
    if isinstance(item, ApprovalRequested):
        return _record(item.tool, item.input, item.call_id)
    return _record(ASK_USER_TOOL, item.question, item.call_id)


def _same_call(record: ToolCallRecord, item: Pending) -> bool:
    """Whether ``record`` is the call ``item`` waits for: the same ``call_id``; a record stored
    without one (an older transcript) by its tool and input."""
    if record.get("call_id") and item.call_id:
        return record.get("call_id") == item.call_id
    expected = _record_for(item)
    return record["tool"] == expected["tool"] and record["input"] == expected["input"]


class SessionClaim:
    """A session taken, before anything awaits, by a turn that is starting (``starting``) or by
    an operation that must not overlap a turn (compression, deletion); ``released`` is set when
    the claim ends."""

    def __init__(self, *, starting: bool) -> None:
        self.starting = starting
        self.released = asyncio.Event()


class Run:
    """One turn in progress: an event log that any number of watchers can follow from the start."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.run_id = uuid.uuid4().hex
        self.log: list[Event] = []
        self.answer = RunText()
        """The run's answer text so far (its segments, joined by the one rule)."""
        self.closed = False
        self._changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None
        self.user_message: UserMessageWrite | None = None
        """The write of the turn's user message (none: a resumed turn)."""

    async def publish(self, event: Event) -> None:
        async with self._changed:
            self.log.append(event)
            self.answer.observe(event)
            self._changed.notify_all()

    async def close(self) -> None:
        async with self._changed:
            self.closed = True
            self._changed.notify_all()

    async def events(
        self, keepalive: float | None = None, *, merge_text: bool = False
    ) -> AsyncIterator[Event | None]:
        """Every event from the first; ``None`` is yielded after ``keepalive`` seconds of silence.

        With ``merge_text``, the text chunks that piled up while the watcher was busy come as one
        event (:func:`~clawlet.events.merge_text_deltas`): a watcher that relays each event as a
        frame sends fewer, larger frames under load and the same ones otherwise."""
        index = 0
        while True:
            async with self._changed:
                if index >= len(self.log) and not self.closed:
                    with suppress(TimeoutError):
                        async with asyncio.timeout(keepalive):  # no task per wait (wait_for's)
                            await self._changed.wait()
                pending = self.log[index:]
                done = self.closed
            if not pending and not done:
                yield None
                continue
            for event in merge_text_deltas(pending) if merge_text and len(pending) > 1 else pending:
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
        on_run: RunObserver | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.adapter_factories = adapter_factories
        self.on_run = on_run
        self.adapters: dict[str, RuntimeAdapter] = {}
        self.runs: dict[str, Run] = {}
        self._claims: dict[str, SessionClaim] = {}
        self.approvals = ApprovalStore(store.directory, store.home)
        self.titles = TitleWriter()

    def is_running(self, session_id: str) -> bool:
        run = self.runs.get(session_id)
        return run is not None and not run.closed

    def is_busy(self, session_id: str) -> bool:
        """A turn runs or is starting on the session, or an operation holds it: a new turn (or a
        decision, a compression) would be refused with :class:`SessionBusy`."""
        return self.is_running(session_id) or session_id in self._claims

    @contextmanager
    def _claim(self, session_id: str, *, starting: bool, over_a_run: bool = False) -> Iterator[None]:
        """Take the session for the block, which may await: the check and the claim are one step
        with no await between, so of two simultaneous callers exactly one gets the session and the
        other gets :class:`SessionBusy`. Freed however the block ends. ``over_a_run``: take it even
        while a turn runs (deletion stops that turn)."""
        if session_id in self._claims or (not over_a_run and self.is_running(session_id)):
            raise SessionBusy(session_id)
        claim = SessionClaim(starting=starting)
        self._claims[session_id] = claim
        try:
            yield
        finally:
            if self._claims.get(session_id) is claim:
                del self._claims[session_id]
            claim.released.set()

    @contextmanager
    def hold(self, session_id: str) -> Iterator[None]:
        """Keep turns off the session while the block runs (e.g. a compression): a turn or a
        decision meanwhile gets :class:`SessionBusy`; so does ``hold`` itself if a turn runs or
        starts, or another operation holds the session."""
        with self._claim(session_id, starting=False):
            yield

    async def _wait_for_claims(self, session_id: str, *, starting_only: bool = False) -> None:
        """Wait until nothing (``starting_only``: no starting turn) claims the session."""
        while (claim := self._claims.get(session_id)) is not None and (claim.starting or not starting_only):
            await claim.released.wait()

    def waiting_for(self, session_id: str) -> list[Pending]:
        """What the session waits for (approvals and questions, oldest first); [] if nothing.
        Read from disk, so it survives a restart."""
        return self.approvals.waiting_for(session_id)

    def is_waiting(self, session_id: str) -> bool:
        return bool(self.waiting_for(session_id))

    def mark_interrupted_turns(self) -> list[str]:
        """Mark every session whose last turn a stopped server cut before any answer (its last
        message is the user's; it neither runs here nor waits for a decision) with the interrupted
        marker (``TranscriptStore.mark_interrupted``); returns their ids. Run when this process
        starts serving the sessions, before any turn starts."""
        marked: list[str] = []
        for item in self.store.list_sessions():
            session_id = item["id"]
            if self.is_running(session_id) or self.is_waiting(session_id):
                continue
            try:
                if self.store.mark_interrupted(session_id):
                    marked.append(session_id)
            except (SessionNotFound, SessionCorrupt, OSError):
                continue  # deleted or damaged meanwhile: nothing to mark
        if marked:
            log.info("marked %d turn(s) a stopped server left unanswered: %s", len(marked), marked)
        return marked

    def decision_of(self, session_id: str, approval_id: str) -> str | None:
        """How an approval of the session was decided (``approve``, ``reject``, ``answer``,
        ``cancelled``, …), or ``None`` if it was not. Read from disk."""
        return self.approvals.load(session_id).decision_of(approval_id)

    async def _adapter(self, session_id: str, config: RunConfig) -> RuntimeAdapter:
        adapter = self.adapters.get(session_id)
        if adapter is None:
            factory = self.adapter_factories.get(config.runtime_type)
            if factory is None:
                known = ", ".join(sorted(self.adapter_factories))
                raise RuntimeFailure(f"unknown runtime type {config.runtime_type!r} (known: {known})")
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
        """Save the user message and start the turn in the background; raise SessionBusy if one runs
        (SessionWaiting if the session waits for decisions).

        ``prior`` (from clients that send the whole conversation, like OpenAI's) seeds the history of
        a session that has none stored yet; a stored history always wins. ``title=False`` skips the
        title generated after a session's first exchange. ``context.approval_mode == "ask"`` lets
        the turn pause for approvals (on a runtime that cannot, such tools are denied instead);
        ``context.client_tools`` pause it for the client's results (a runtime that cannot pause
        raises ``RuntimeFailure``).

        The session is claimed before the first await, so of two simultaneous turns exactly one
        starts; the claim ends when the run is registered (or the start fails)."""
        with self._claim(session_id, starting=True):
            waiting = self.waiting_for(session_id)
            if waiting:
                raise SessionWaiting(session_id, waiting)
            config = config or RunConfig()
            adapter = await self._adapter(session_id, config)
            pause = None
            if context.may_pause:
                if adapter.supports_approvals:
                    pause = self.approvals.pause_point(session_id)
                elif context.client_tools:
                    raise RuntimeFailure(
                        f"the {config.runtime_type!r} runtime cannot pause a turn for client tools"
                    )
                else:
                    context = replace(context, approval_mode="deny")
            history = self.store.kept_for_agent(session_id)  # a new or a kept session: no thread hop
            if history is None:
                history = await asyncio.to_thread(self.store.load_for_agent, session_id)
            stored = bool(history)  # the session's file exists
            seed = prior if prior and not history else []
            history = history or list(seed)
            is_first = title and not any(item["role"] == "user" for item in history)

            def save_user_message() -> None:
                for item in seed:
                    self.store.append(session_id, item["role"], item["content"])
                self.store.append(session_id, "user", text)

            # when the message is written: clawlet.runtime.user_message
            paused = PausedTurn([], context, config.runtime_type, text if is_first else None)
            run = Run(session_id)
            run.user_message = UserMessageWrite(
                save_user_message,
                on_the_loop=adapter.turns_on_this_loop and not self.runs,
                when_needed=stored and adapter.writes_while_model_thinks,
            ).start()
            run.task = asyncio.create_task(
                self._drive(
                    run,
                    adapter,
                    UserMessage(text, history, context, pause=pause),
                    SegmentRecorder(self.store, session_id),
                    paused,
                ),
                name=f"turn-{session_id}",
            )
            self._register(run)
        return run

    async def check_decision(self, session_id: str, approval_id: str, decision: Decision) -> Decision:
        """``decision`` checked exactly as :meth:`resume` checks it (the same refusals), deciding
        nothing: for a surface that saves something of its own before it resumes (the inbox)."""
        return (await self._checked(session_id, approval_id, decision))[-1]

    async def _checked(
        self, session_id: str, approval_id: str, decision: Decision
    ) -> tuple[RuntimeAdapter, list[Pending], Pending, PausedTurn, Decision]:
        """What deciding ``approval_id`` continues (the adapter, everything the session waits for,
        the item, the paused turn) and ``decision`` checked against the item."""
        record = await asyncio.to_thread(self.approvals.load, session_id)
        decided = record.decision_of(approval_id)
        if decided is not None:
            raise ApprovalDecided(approval_id, decided)
        waiting = record.waiting_for()
        item = next((found for found in waiting if found.approval_id == approval_id), None)
        paused = record.pending
        if item is None or paused is None:
            raise ApprovalNotFound(approval_id)
        adapter = await self._adapter(session_id, RunConfig(runtime_type=paused.runtime_type))
        if not adapter.supports_approvals:
            raise RuntimeFailure(f"the {paused.runtime_type!r} runtime cannot continue a paused turn")
        return adapter, waiting, item, paused, adapter.check_decision(item, decision)

    async def resume(self, session_id: str, approval_id: str, decision: Decision) -> Run:
        """Decide one pending approval or question and continue the paused turn in a new run.

        Raises SessionBusy (a run is going on), ApprovalDecided, ApprovalNotFound, and
        :class:`~clawlet.engine.tool_approvals.InvalidDecision` (checked before anything is saved).
        The decision is recorded before the tool runs; the other pending items (if any) stay
        pending and the continuation ends with ``RunWaiting`` again. Claimed at once like
        :meth:`start_turn`: a second decision (or a turn) meanwhile is refused."""
        with self._claim(session_id, starting=True):
            adapter, waiting, item, paused, decision = await self._checked(session_id, approval_id, decision)
            recorder = SegmentRecorder(self.store, session_id)
            await asyncio.to_thread(recorder.reopen, waiting, item, decision)
            await asyncio.to_thread(self.approvals.mark_decided, session_id, approval_id, decision.type)
            message = UserMessage(
                "",
                [],
                paused.context,
                pause=self.approvals.pause_point(session_id),
                resume=Resume(approval_id, decision),
            )
            run = Run(session_id)
            run.task = asyncio.create_task(
                self._drive(run, adapter, message, recorder, paused), name=f"turn-{session_id}"
            )
            self._register(run)
        return run

    def _register(self, run: Run) -> None:
        self.runs[run.session_id] = run
        if self.on_run is not None:
            self.on_run(run)

    async def _drive(
        self,
        run: Run,
        adapter: RuntimeAdapter,
        message: UserMessage,
        recorder: SegmentRecorder,
        paused: PausedTurn,
    ) -> None:
        """Run the turn to its end. ``run.user_message`` is the write of the user's message (none:
        a resumed turn): the turn's first runtime event goes out, and anything of the answer is written,
        only once the message is on disk (a failed write fails the run and no answer is written),
        so a client never sees an answer to a message a crash could lose. When it is written
        (while the model thinks, or before the turn starts): :mod:`clawlet.runtime.user_message`."""
        gcpolicy.turn_started()
        outcome: Event
        saved = run.user_message
        try:
            await run.publish(RunStarted(run.session_id, run.run_id))
            if saved is not None and adapter.turns_on_this_loop and not saved.waits_to_be_needed:
                await saved.wait()  # an in-process turn starts once written (unless it writes when needed)
                saved = None
            waiting: RunWaiting | None = None
            thinking = (
                while_the_model_thinks(saved.run_now)
                if saved is not None and not saved.done
                else nullcontext()
            )
            with thinking:
                async with aclosing(adapter.send_message(message)) as events:
                    async for event in events:
                        if isinstance(event, RunWaiting):  # the runtime paused: the run ends here
                            waiting = event
                            break
                        waited = saved is not None and not saved.done
                        if saved is not None:  # nothing of the answer goes out before the message is on disk
                            await saved.wait()
                            saved = None
                        if isinstance(event, NewSegment):
                            await asyncio.to_thread(recorder.flush)
                        recorder.observe(event)
                        await run.publish(event)
                        if waited:
                            # What the runtime sent while the message was being written is queued
                            # and comes without a pause: the watchers send the first event before it.
                            await asyncio.sleep(0)
            if saved is not None:
                await saved.wait()
            await asyncio.to_thread(recorder.flush)
            if waiting is not None and message.pause is not None:
                paused.approvals = list(waiting.pending)
                await asyncio.to_thread(self.approvals.save_paused, run.session_id, paused)
                outcome = RunWaiting(run.session_id, recorder.full_text, list(waiting.pending))
            else:
                outcome = RunFinished(recorder.full_text, run.session_id)
        except asyncio.CancelledError:
            if saved is None or await saved.wait(raising=False):
                await asyncio.shield(asyncio.to_thread(recorder.flush))
            outcome = RunCancelled(run.session_id, recorder.full_text)
        except Exception as exc:
            log.exception("turn failed in session %s", run.session_id)
            if saved is None or await saved.wait(raising=False):
                await asyncio.to_thread(recorder.flush)
            outcome = RunFailed(f"{type(exc).__name__}: {exc}", run.session_id)
        try:
            if message.pause is not None and not isinstance(outcome, RunWaiting):
                # the turn is over: its paused state (if any) can never be continued
                decision = {RunCancelled: "cancelled", RunFailed: "failed"}.get(type(outcome))
                try:
                    if self.approvals.holds_state(run.session_id):  # else nothing to clear: no hop
                        await asyncio.to_thread(self.approvals.clear, run.session_id, decision=decision)
                except OSError:
                    log.exception("could not clear the paused state of session %s", run.session_id)
            await run.publish(outcome)
            if isinstance(outcome, RunFinished) and paused.title_text is not None:
                made = await self._title_if_missing(run.session_id, paused.title_text, outcome.content)
                if made is not None:
                    await run.publish(
                        Title(run.session_id, made.title, made.input_tokens, made.output_tokens)
                    )
        finally:
            self._forget_stateless(run.session_id, adapter, waiting=isinstance(outcome, RunWaiting))
            try:
                await run.close()
            finally:
                # Watchers keep their own reference; the manager forgets finished runs.
                if self.runs.get(run.session_id) is run:
                    del self.runs[run.session_id]
                gcpolicy.after_turn()  # paired with turn_started() above, however the turn ended

    def _forget_stateless(self, session_id: str, adapter: RuntimeAdapter, *, waiting: bool) -> None:
        """Drop the session's adapter when its turn is over if it keeps no state between turns
        (:attr:`RuntimeAdapter.keeps_state`) and the session does not wait for a decision: the next
        turn makes another. Called before the run closes, so no other turn of the session has it."""
        if not adapter.keeps_state and not waiting and self.adapters.get(session_id) is adapter:
            del self.adapters[session_id]

    async def _title_if_missing(self, session_id: str, user_text: str, reply: str) -> GeneratedTitle | None:
        data = await asyncio.to_thread(self.store.load, session_id)
        if data["title"]:
            return None
        made = await self.titles.title(self.settings, user_text, reply)
        await asyncio.to_thread(self.store.rename, session_id, made.title)
        return made

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn, or drop what a waiting session waits for (its paused tool
        calls never run); False if nothing was running or waiting. A turn that is starting is
        cancelled once it has started."""
        await self._wait_for_claims(session_id, starting_only=True)
        run = self.runs.get(session_id)
        if run is None or run.closed or run.task is None:
            if run is None and self.is_waiting(session_id):
                await self._cancel_waiting(session_id)
                return True
            return False
        adapter = self.adapters.get(session_id)
        if adapter is not None:
            await adapter.cancel()
        run.task.cancel()
        with suppress(asyncio.CancelledError):
            await asyncio.shield(run.task)
        if not run.closed:
            # cancelled before its first step: _drive never ran, so close the run here (its user
            # message written first, as _drive does when cancelled)
            if run.user_message is not None:
                await run.user_message.wait(raising=False)
            await run.publish(RunCancelled(run.session_id, ""))
            await run.close()
            if self.runs.get(session_id) is run:
                del self.runs[session_id]
        return True

    async def _cancel_waiting(self, session_id: str) -> None:
        left = await asyncio.to_thread(self.approvals.clear, session_id, decision="cancelled")

        def mark_transcript() -> None:
            recorder = SegmentRecorder(self.store, session_id)
            recorder.reopen(left)
            if not recorder.reopened:
                return  # the paused calls are not in the transcript any more: nothing to mark
            for item in left:
                recorder.mark(item.call_id, CANCELLED_OUTPUT)
            recorder.flush()

        await asyncio.to_thread(mark_transcript)

    async def delete(self, session_id: str) -> None:
        """Delete the session: stop its turn, drop its adapter and paused state, then its
        transcript (:class:`SessionNotFound` if there is none). A turn starting or a compression
        going on is let finish first; no turn starts while the session is being deleted."""
        await self._wait_for_claims(session_id)
        with self._claim(session_id, starting=False, over_a_run=True):
            await self.cancel(session_id)
            adapter = self.adapters.pop(session_id, None)
            await asyncio.to_thread(self.approvals.delete, session_id)
            if adapter is not None:
                await adapter.stop()
            await asyncio.to_thread(self.store.delete, session_id)

    async def release(self, session_id: str) -> None:
        """Stop the session's runtime (a running turn is cancelled first; what a waiting session
        waits for is kept); its next turn starts a new one. The transcript stays."""
        await self._wait_for_claims(session_id, starting_only=True)
        if self.is_running(session_id):
            await self.cancel(session_id)
        adapter = self.adapters.pop(session_id, None)
        if adapter is not None:
            await adapter.stop()

    def snapshot(self) -> dict[str, Any]:
        return {sid: adapter.get_snapshot() for sid, adapter in self.adapters.items()}

    async def shutdown(self) -> None:
        """Cancel running turns (their partial output is saved) and stop every adapter. Waiting
        sessions keep waiting: a restarted server continues them."""
        for session_id in list(self.runs):
            await self.cancel(session_id)
        for adapter in self.adapters.values():
            await adapter.stop()
        self.adapters.clear()

"""One OS process per exec-plane session (seed 001 §1, §4.3, §4.10): :class:`ProcessSessionAdapter`,
the parent's ``RuntimeAdapter`` for it. The program the process runs is
:mod:`clawlet.execplane.session_child`; the lines they exchange are :mod:`clawlet.runtime.process_pipe`.

**Process model.** The parent starts ``<python> -m clawlet.execplane.session_child`` with
``asyncio.create_subprocess_exec`` and talks to it in JSON lines over the child's stdin and stdout.
A fresh interpreter rather than ``multiprocessing``: nothing of the daemon (its event loop, its
WebSocket, the JWT in its memory and environment) is inherited, the child is an ordinary process the
parent can watch, signal and reap with asyncio alone, and its exit code and signal say why it ended.
The child starts in a session of its own (a terminal's Ctrl+C reaches only the daemon, which stops
its sessions in order) with ``VM_TOKEN``/``VM_TICKET`` and every other secret
(:func:`clawlet.secret_env.is_secret_name`) removed from its environment; its stderr (its
logs, a traceback if it crashes) goes to ``<session dir>/process.log``. The child moves the pipe to
private descriptors first and points fd 0 at ``/dev/null`` and fd 1 at stderr, so nothing a library
prints can corrupt the protocol.

**The parent** (:class:`ProcessSessionAdapter`) turns every way a child can fail into the end of the
running turn: EOF on its stdout or a non-zero exit (a crash, ``kill -9``) → ``RunFailed`` naming the
exit code or signal; no line (heartbeats included) for ``heartbeat_timeout`` seconds → the process is
killed as hung → ``RunFailed``; a turn that has not ended ``cancel_grace`` seconds after ``cancel`` →
the process is killed → ``RunCancelled`` with the text streamed so far. A dead child is started
again for the session's next message (its memory and checkpoints are on disk). The adapter is a
``SessionManager``'s runtime: it yields the turn's events and ends as such runtimes do (see
:class:`ProcessSessionAdapter`); it supports approvals, and checks a decision with the same rules
as local mode (the engine's tools' schemas, :attr:`SessionProcessSpec.base_tools`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from langchain_core.tools import BaseTool

from clawlet.config import Settings
from clawlet.engine.checkpointer import LocalCheckpointer
from clawlet.engine.tool_approvals import Decision, check_decision
from clawlet.events import (
    TERMINAL_EVENTS,
    ApprovalRequested,
    Event,
    Pending,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunWaiting,
    event_from_json,
)
from clawlet.execplane.session_child import CHILD_MODULE, no_requests, session_tools
from clawlet.execplane.session_memory import SessionMemory
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage
from clawlet.runtime.process_pipe import (
    CHECKPOINTS_DIR,
    DEFAULT_HEARTBEAT_INTERVAL,
    LINE_LIMIT,
    ReplyText,
    RequestHandler,
    SkillRef,
    child_environment,
    encode_line,
    encode_message,
)
from clawlet.secret_env import held_secrets

if TYPE_CHECKING:
    from clawlet.execplane.session_template import SessionTemplate

log = logging.getLogger(__name__)
PROCESS_LOG: Final = "process.log"
"""The child's stderr, in its session directory."""
VM_CREDENTIALS: Final = frozenset({"VM_TOKEN", "VM_TICKET"})
"""Never passed on to a session process, not even for masking (its tools could reach them)."""


class SessionProcessError(Exception):
    """A session process could not be started or is not usable."""


EXIT_UNKNOWN: Final = 256
"""The ``returncode`` of a process whose exit status could not be learnt (not an exit code: those are
0–255): a session process whose template died before it (:mod:`clawlet.execplane.session_template`)."""


def describe_exit(returncode: int | None) -> str:
    """How a process ended, for an ``execution_error``: ``was killed by signal SIGKILL``, ``exited with
    code 1``."""
    if returncode is None:
        return "is still running"
    if returncode == EXIT_UNKNOWN:
        return "ended (its exit status is unknown: the session template that started it is gone)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"was killed by signal {name}"
    return f"exited with code {returncode}"


# -- the parent side -----------------------------------------------------------------------------


# -- the parent side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionProcessSpec:
    """What a session process is started with."""

    session_dir: Path
    settings: Settings
    """The session's settings (its clawlet home, provider, API keys): sent over the pipe only."""
    skills: tuple[SkillRef, ...] = ()
    on_request: RequestHandler | None = None
    demo_token_delay: float = 0.0
    mcp_servers: tuple[str, ...] = ()
    """The user's remote MCP servers (by name): the session gets a ``remote_mcp`` tool for them."""
    base_tools: Callable[[], Sequence[BaseTool]] | None = None
    """The tools of the workspace's engine (the child has the same ones and :func:`session_tools`):
    their schemas check an edited tool call's arguments (:meth:`ProcessSessionAdapter.check_decision`)."""


@dataclass(frozen=True)
class ProcessOptions:
    """Timing of a session process (seconds)."""

    python: str = sys.executable
    start_timeout: float = 60.0
    """From spawning to ``ready`` (importing LangChain and building the engine)."""
    start_concurrency: int = max(2, os.cpu_count() or 2)
    """Session processes starting at once (each start takes about a CPU-second of imports; more
    at once only slows every one of them down — past ``start_timeout`` with ~80 on 2 cores). The
    rest wait their turn; ``start_timeout`` counts from the spawn."""
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    heartbeat_timeout: float = 30.0
    """Silence after which the process counts as hung and is killed."""
    cancel_grace: float = 5.0
    """How long a cancelled turn may take to end before the process is killed."""
    stop_grace: float = 5.0
    """How long ``stop`` waits for the process to exit before killing it."""


class ChildProcess(Protocol):
    """What :class:`ProcessSessionAdapter` uses of its child: an ``asyncio.subprocess.Process`` (a
    spawned child) or a :class:`~clawlet.execplane.session_template.TemplateChild` (a forked one)."""

    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


@dataclass(eq=False)
class _Turn:
    turn_id: str
    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    finished: bool = False
    cancel_requested: bool = False
    reply: ReplyText = field(default_factory=ReplyText)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    grace: asyncio.Task[None] | None = None

    def deliver(self, event: Event) -> None:
        if self.finished:
            return
        self.reply.observe(event)
        if isinstance(event, TERMINAL_EVENTS):
            self.finished = True
            self.ended.set()
        self.queue.put_nowait(event)

    @property
    def partial_text(self) -> str:
        return self.reply.text


@contextlib.contextmanager
def _start_errors() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise SessionProcessError(f"cannot start the session process: {exc}") from exc


def _descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (Linux ``/proc``; elsewhere none are found)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


class ProcessSessionAdapter(RuntimeAdapter):
    """Runs one session's turns in a child process (see the module docstring): a pure runtime under
    a ``SessionManager``, which keeps the transcript and the paused turns.

    Like an in-process adapter, :meth:`send_message` yields the turn's events without the run's
    lifecycle: it returns when the turn is finished, yields ``RunWaiting`` last when the turn
    paused, raises ``asyncio.CancelledError`` when it was cancelled (also by :meth:`stop`) and
    :class:`SessionProcessError` when it failed (the process crashed, hung or could not start).
    """

    supports_approvals = True

    def __init__(
        self,
        spec: SessionProcessSpec,
        options: ProcessOptions | None = None,
        template: SessionTemplate | None = None,
    ) -> None:
        self.spec = spec
        self.options = options or ProcessOptions()
        self.template = template
        """Forks the session's processes when it is up (else they are spawned)."""
        self.forked = 0
        """Of :attr:`starts`, the processes the template forked."""
        self.session_id: str | None = None
        self.runtime_type = "engine"
        self.turns = 0
        self.starts = 0
        """Processes started so far (more than one after a crash)."""
        self.last_exit: str | None = None
        """How the previous process ended (``exited with code 0``, ``was killed by signal SIGKILL``)."""
        self._process: ChildProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._turn: _Turn | None = None
        self._last_seen = time.monotonic()
        self._kill_reason: str | None = None
        self._stopped = False
        self._start_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._memory = SessionMemory(spec.session_dir)
        self._checkpointer = LocalCheckpointer(spec.session_dir / CHECKPOINTS_DIR)

    # -- state ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The running child's process id (``None`` when no child runs)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    @property
    def alive(self) -> bool:
        return self.pid is not None

    @property
    def ready(self) -> bool:
        """The child runs and has built its engine."""
        ready = self._ready
        return self.alive and ready is not None and ready.done() and ready.exception() is None

    @property
    def running(self) -> bool:
        """A turn is in progress."""
        return self._turn is not None and not self._turn.finished

    # -- RuntimeAdapter ------------------------------------------------------------------------

    async def start(self, session_id: str, config: RunConfig) -> None:
        """Start the child and wait until its engine is built; ``SessionProcessError`` if it fails."""
        self.session_id = session_id
        self.runtime_type = config.runtime_type
        await self._ensure_process()

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        """Run one turn in the child (started first if it is not running) and yield its events."""
        session_id = self.session_id or ""
        previous = self._turn
        if previous is not None and not previous.finished and previous.cancel_requested:
            await previous.ended.wait()  # a cancelled turn ends within cancel_grace (or is killed)
        if self.running:
            raise SessionProcessError("a turn is already running in this session")
        turn = _Turn(uuid.uuid4().hex)
        self.turns += 1
        try:
            try:
                await self._ensure_process()
            except SessionProcessError as exc:
                turn.deliver(RunFailed(str(exc), session_id))
            else:
                self._turn = turn  # only now: the end of an earlier process must not end this turn
                if not await self._write(encode_message(turn.turn_id, data)):
                    log.info("session %s: the process went away before the turn was sent", session_id)
                    # the reader sees EOF and ends the turn with RunFailed
            while True:
                event = await turn.queue.get()
                if isinstance(event, RunFinished):
                    return
                if isinstance(event, RunCancelled):
                    raise asyncio.CancelledError("the turn was cancelled in the session process")
                if isinstance(event, RunFailed):
                    raise SessionProcessError(event.error)
                yield event
                if isinstance(event, RunWaiting):
                    return
        finally:
            if self._turn is turn:
                if turn.finished:
                    self._turn = None
                else:  # the consumer went away mid-turn: do not leave it running
                    self._spawn(self._cancel_turn(turn), f"cancel-abandoned-turn-{session_id}")
            if turn.grace is not None and turn.finished:
                turn.grace.cancel()

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        """The engine's check (:func:`clawlet.engine.tool_approvals.check_decision`) against the schema
        of the tool the child's engine has under that name."""
        tools = self.spec.base_tools() if self.spec.base_tools is not None else []
        extra = session_tools(self.spec.skills, self.spec.mcp_servers, no_requests)
        name = pending.tool if isinstance(pending, ApprovalRequested) else None
        tool = next((found for found in [*tools, *extra] if found.name == name), None)
        return check_decision(pending, decision, tool)

    async def cancel(self) -> None:
        """Cancel the running turn; the process is killed if the turn has not ended after
        ``cancel_grace`` seconds (the turn then ends with ``RunCancelled`` all the same)."""
        turn = self._turn
        if turn is not None and not turn.finished:
            await self._cancel_turn(turn)

    async def stop(self) -> None:
        """Stop the child: a running turn is cancelled, then it exits; killed after ``stop_grace``."""
        self._stopped = True
        process = self._process
        if process is not None and process.returncode is None:
            turn = self._turn
            if turn is not None:
                turn.cancel_requested = True
            await self._write({"type": "stop"})
            try:
                await asyncio.wait_for(process.wait(), self.options.stop_grace)
            except TimeoutError:
                self._kill(process, f"did not exit within {self.options.stop_grace:g}s of stop")
                await process.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        tasks = [task for task in (self._watchdog, *self._tasks) if task is not None and not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def get_snapshot(self) -> dict[str, Any]:
        """The session's short-term memory and newest checkpoint, read from disk (blocking I/O; so it
        works whatever state the child is in)."""
        checkpoints = self._checkpointer.get_all_for_snapshot()["checkpoints"]
        newest = max(checkpoints, key=lambda entry: str(entry["checkpoint_id"]), default=None)
        return {
            "runtime_type": self.runtime_type,
            "turns": self.turns,
            "running": self.running,
            "process_alive": self.alive,
            "short_term_memory": self._memory.snapshot(),
            "checkpoint": newest,
        }

    # -- the child process ---------------------------------------------------------------------

    async def _ensure_process(self) -> None:
        async with self._start_lock:
            if self._stopped:
                raise SessionProcessError("the session was stopped")
            if self.ready:
                return
            process = self._process
            if process is not None and process.returncode is None:  # a start that failed: replace it
                self._kill(process, "never became ready")
                if self._reader is not None:
                    await asyncio.gather(self._reader, return_exceptions=True)
            await self._spawn_process()

    async def _spawn_process(self) -> None:
        async with start_slots(self.options.start_concurrency).slot():
            await self._spawn_and_wait_ready()

    async def _spawn_and_wait_ready(self) -> None:
        spec, options = self.spec, self.options
        session_id = self.session_id or ""
        spec.session_dir.mkdir(parents=True, exist_ok=True)
        home = spec.settings.paths.root
        home.mkdir(parents=True, exist_ok=True)
        stderr = await asyncio.to_thread(open, spec.session_dir / PROCESS_LOG, "ab")
        with stderr, _start_errors():  # the child has its own copy of the descriptor
            process: ChildProcess | None = None
            if self.template is not None:
                process = await self.template.spawn(home, stderr.fileno())
            if process is None:
                process = await asyncio.create_subprocess_exec(
                    options.python,
                    "-m",
                    CHILD_MODULE,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    env=child_environment(),
                    cwd=str(home),
                    start_new_session=True,
                    limit=LINE_LIMIT,
                )
            else:
                self.forked += 1
        self.starts += 1
        self._process = process
        self._kill_reason = None
        self._last_seen = time.monotonic()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready
        self._reader = asyncio.create_task(self._read(process), name=f"session-process-reader-{session_id}")
        init = {
            "type": "init",
            "session_id": session_id,
            "session_dir": str(spec.session_dir),
            "settings": spec.settings.model_dump(mode="json"),
            "skills": [dataclasses.asdict(skill) for skill in spec.skills],
            "mcp_servers": list(spec.mcp_servers),
            "demo_token_delay": spec.demo_token_delay,
            "heartbeat_interval": options.heartbeat_interval,
            "held_secrets": {
                name: value for name, value in held_secrets().items() if name not in VM_CREDENTIALS
            },
        }
        await self._write(init)
        try:
            await asyncio.wait_for(asyncio.shield(ready), options.start_timeout)
        except TimeoutError:
            self._kill(process, f"was not ready within {options.start_timeout:g}s")
            with contextlib.suppress(SessionProcessError):
                await ready
            raise SessionProcessError(
                f"the session process was not ready within {options.start_timeout:g}s"
            ) from None
        log.info("session %s: process %d ready", session_id, process.pid)
        self._watchdog = asyncio.create_task(
            self._watch(process), name=f"session-process-watchdog-{session_id}"
        )

    async def _write(self, message: Mapping[str, Any]) -> bool:
        """Send one line to the child; False when it is gone."""
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            return False
        async with self._write_lock:
            try:
                process.stdin.write(encode_line(message))
                await process.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    async def _read(self, process: ChildProcess) -> None:
        assert process.stdout is not None
        try:
            while True:
                try:
                    raw = await process.stdout.readline()
                except ValueError:  # a line over LINE_LIMIT
                    self._kill(process, "sent a message over the size limit")
                    break
                if not raw:
                    break
                self._last_seen = time.monotonic()
                try:
                    message = json.loads(raw)
                except ValueError:
                    log.warning("session %s: ignoring a line that is not JSON", self.session_id)
                    continue
                if isinstance(message, dict):
                    self._dispatch(message)
        finally:
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), self.options.stop_grace)
            except TimeoutError:  # closed its stdout but lives on: it is of no use any more
                self._kill(process, "closed its pipe")
                await process.wait()
            self._exited(process)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "event":
            turn = self._turn
            if turn is None or message.get("turn") != turn.turn_id:
                return  # a late event of a turn that already ended here
            try:
                event = event_from_json(message.get("event") or {})
            except ValueError as exc:
                log.warning("session %s: ignoring a bad event: %s", self.session_id, exc)
                return
            turn.deliver(event)
        elif kind == "heartbeat":
            pass
        elif kind == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif kind == "fatal":
            error = str(message.get("error") or "unknown error")
            log.error("session %s: the session process failed to start: %s", self.session_id, error)
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(
                    SessionProcessError(f"the session process failed to start: {error}")
                )
        elif kind == "request":
            self._spawn(self._answer(message), f"session-request-{self.session_id}")
        elif kind != "stopped":
            log.debug("session %s: ignoring a %r message", self.session_id, kind)

    async def _answer(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        method = str(message.get("method") or "")
        params = message.get("params")
        reply: dict[str, Any] = {"type": "response", "id": request_id}
        handler = self.spec.on_request
        try:
            if handler is None:
                raise LookupError(f"no handler for {method!r} requests")
            reply["result"] = await handler(method, params if isinstance(params, dict) else {})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reply["error"] = str(exc) or type(exc).__name__
        await self._write(reply)

    def _exited(self, process: ChildProcess) -> None:
        """The child is gone: settle whatever waited for it."""
        how = describe_exit(process.returncode)
        reason = self._kill_reason or how
        self.last_exit = how
        session_id = self.session_id or ""
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(SessionProcessError(f"the session process {reason} during start-up"))
        turn = self._turn
        if turn is not None and not turn.finished:
            if turn.cancel_requested:
                log.warning(
                    "session %s: the session process %s; the turn counts as cancelled", session_id, reason
                )
                turn.deliver(RunCancelled(session_id, turn.partial_text))
            else:
                log.error("session %s: the session process %s during a turn", session_id, reason)
                turn.deliver(RunFailed(f"the session process {reason}", session_id))
        elif process.returncode not in (0, None) and not self._stopped:
            log.warning("session %s: the idle session process %s", session_id, reason)
        if self._watchdog is not None and self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()

    async def _watch(self, process: ChildProcess) -> None:
        """Kill the child when it has been silent (no heartbeat) for ``heartbeat_timeout`` seconds."""
        interval = min(self.options.heartbeat_interval, self.options.heartbeat_timeout / 2)
        while process.returncode is None:
            await asyncio.sleep(interval)
            silent = time.monotonic() - self._last_seen
            if process.returncode is None and silent > self.options.heartbeat_timeout:
                self._kill(process, f"hung (no heartbeat for {silent:.0f}s) and was killed")
                return

    async def _cancel_turn(self, turn: _Turn) -> None:
        turn.cancel_requested = True
        await self._write({"type": "cancel", "turn": turn.turn_id})
        if turn.grace is None and not turn.finished:
            turn.grace = self._spawn(self._enforce_cancel(turn), f"cancel-grace-{self.session_id}")

    async def _enforce_cancel(self, turn: _Turn) -> None:
        await asyncio.sleep(self.options.cancel_grace)
        process = self._process
        if not turn.finished and process is not None and process.returncode is None:
            self._kill(
                process, f"did not stop within {self.options.cancel_grace:g}s of cancel and was killed"
            )

    def _kill(self, process: ChildProcess, reason: str) -> None:
        """SIGKILL the child, its process group, and the process groups of its descendants (tool
        subprocesses run in sessions of their own)."""
        if process.returncode is not None:
            return
        self._kill_reason = self._kill_reason or reason
        log.warning("session %s: the session process %s", self.session_id, reason)
        descendants = _descendants(process.pid)
        for pid in (process.pid, *descendants):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


class _StartSlots:
    """At most ``limit`` session processes starting at once (per event loop)."""

    def __init__(self, limit: int) -> None:
        self.semaphore = asyncio.Semaphore(max(1, limit))
        self.starting = 0
        self.most = 0
        """The most that were starting at the same time."""

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.semaphore:
            self.starting += 1
            self.most = max(self.most, self.starting)
            try:
                yield
            finally:
                self.starting -= 1


_START_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _StartSlots] = weakref.WeakKeyDictionary()


def start_slots(limit: int = 0) -> _StartSlots:
    """The running loop's limit on session processes starting at once (made with ``limit``)."""
    loop = asyncio.get_running_loop()
    slots = _START_SLOTS.get(loop)
    if slots is None:
        slots = _START_SLOTS[loop] = _StartSlots(limit or ProcessOptions.start_concurrency)
    return slots

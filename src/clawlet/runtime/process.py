"""One OS process per exec-plane session (seed 001 §1, §4.3, §4.10): the child that runs clawlet's
engine for the session, and :class:`ProcessSessionAdapter`, the parent's ``RuntimeAdapter`` for it.

**Process model.** The parent starts ``<python> -m clawlet.runtime.process`` with
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

**Pipe protocol** (one JSON object per line)::

    parent → child  init      {session_id, session_dir, settings, skills, demo_token_delay,
                               heartbeat_interval, held_secrets}  first line; settings holds API
                                                               keys, held_secrets the parent's
                                                               (see clawlet.secret_env) but the
                                                               VM credentials, for masking
    child → parent  ready     {pid}  |  fatal {error}            the engine is built (or could not be)
    parent → child  message   {turn, text, history, context,   run one turn: everything of the
                               pause, resume}                  SessionManager's UserMessage (pause
                                                               {directory, thread_id}, resume
                                                               {approval_id, decision: {type, args,
                                                               message}}, each or null)
    child → parent  event     {turn, event: {kind, …fields}}   each clawlet event of the turn
                                                               (clawlet.events.event_to_json)
    parent → child  cancel    {turn}                           cancel the running turn
    parent → child  stop      {}                               cancel, then exit 0 (after ``stopped``)
    child → parent  heartbeat {}                               every ``heartbeat_interval`` seconds
    child → parent  request   {id, method, params}             ``load_skill``, ``memory_search``,
    parent → child  response  {id, result} | {id, error}       ``mcp_call`` (the parent holds the
                                                               control-plane connection)

The API keys reach the child only inside ``init`` on the pipe: never in its environment, argv or a
file. EOF on the child's stdin means the parent is gone: the child cancels its turn and exits, so a
killed daemon leaves no session processes behind.

**The child** builds clawlet's engine for the clawlet home shared by the user's sessions and runs
each turn it is sent on it (:class:`~clawlet.runtime.engine_adapter.EngineAdapter`) with the
history, context, pause point and decision the exec plane's ``SessionManager`` gave the turn: it is
a pure runtime and keeps no transcript (the one transcript is the exec plane's, in the home's
``sessions/``), so a turn that pauses for an approval is continued by whichever process gets the
decision. The session's short-term memory
(:class:`~clawlet.execplane.session_memory.SessionMemory`, ``<session dir>/memory/``) gets the user
message before the turn and the assistant's reply (also a partial one) before the turn's final
event goes out. Every LangGraph step of a turn that cannot pause is checkpointed by
:class:`~clawlet.runtime.checkpointer.LocalCheckpointer` under ``<session dir>/checkpoints/``: the
agent graph gets the saver and a thread per turn, and older turns' threads are deleted when a turn
ends, so the newest checkpoint is always the last turn's state (what the snapshot sync sends); a
turn that may pause keeps its state at its pause point instead. The model's input comes from the
history the turn was sent, as in local mode.

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

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.cluster.protocol import MAX_FRAME_BYTES
from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.agent import AgentEngine
from clawlet.engine.approvals import Decision, PausePoint, Resume, check_decision
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.events import (
    TERMINAL_EVENTS,
    ApprovalRequested,
    Event,
    NewSegment,
    Pending,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunWaiting,
    TextDelta,
    event_from_json,
    event_to_json,
)
from clawlet.execplane.session_memory import SessionMemory
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage
from clawlet.runtime.checkpointer import LocalCheckpointer
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.secret_env import held_secrets, hold_secrets, is_secret_name
from clawlet.tools.base import ToolError

if TYPE_CHECKING:
    from clawlet.execplane.session_template import SessionTemplate

CHILD_MODULE: Final = "clawlet.runtime.process"
log = logging.getLogger(CHILD_MODULE)  # not __name__: the child runs this module as __main__
LINE_LIMIT: Final = MAX_FRAME_BYTES
"""The longest line either side accepts."""
PROCESS_LOG: Final = "process.log"
"""The child's stderr, in its session directory."""
MEMORY_ROLE_USER: Final = "user"
MEMORY_ROLE_ASSISTANT: Final = "assistant"
CHECKPOINTS_DIR: Final = "checkpoints"
VM_CREDENTIALS: Final = frozenset({"VM_TOKEN", "VM_TICKET"})
"""Never passed on to a session process, not even for masking (its tools could reach them)."""
INDEX_LOCK: Final = ".exec-plane-index.lock"
"""Under the home's ``storage/``: session processes open the shared SQLite indexes one at a time
(opening runs a read-then-write transaction that fails at once with ``database is locked`` when two
processes run it together)."""
CHILD_REQUEST_TIMEOUT: Final = 120.0
"""How long a child waits for the parent's answer to a request (a skill package fetch)."""

RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``(method, params) -> result``: how the parent answers a child's request."""


class SessionProcessError(Exception):
    """A session process could not be started or is not usable."""


# -- events and contexts on the pipe -------------------------------------------------------------


_CONTEXT_SETS: Final = (
    "disallowed_tools",
    "ask_tools",
    "policy_denied",
    "approval_denied",
    "skipped_approval",
    "resume_call_ids",
)
"""The ``frozenset`` fields of ``RunContext`` (``allowed_tools`` may also be ``None``)."""


def encode_context(context: RunContext) -> dict[str, Any]:
    """``context`` as JSON (every field: the child's engine applies the policies itself)."""
    encoded: dict[str, Any] = {name: sorted(getattr(context, name)) for name in _CONTEXT_SETS}
    encoded["allowed_tools"] = None if context.allowed_tools is None else sorted(context.allowed_tools)
    encoded["extra_system_prompt"] = context.extra_system_prompt
    encoded["approval_mode"] = context.approval_mode
    return encoded


def decode_context(data: Any) -> RunContext:
    if not isinstance(data, Mapping):
        return DEFAULT_CONTEXT
    allowed = data.get("allowed_tools")
    mode = data.get("approval_mode")
    sets = {name: frozenset(map(str, data.get(name) or ())) for name in _CONTEXT_SETS}
    return RunContext(
        allowed_tools=None if allowed is None else frozenset(map(str, allowed)),
        extra_system_prompt=str(data.get("extra_system_prompt") or ""),
        approval_mode=mode if mode in ("ask", "deny", "allow") else DEFAULT_CONTEXT.approval_mode,
        **sets,
    )


def encode_message(turn_id: str, data: UserMessage) -> dict[str, Any]:
    """The pipe's ``message`` line for one turn: everything of ``data``."""
    pause = data.pause
    resume = data.resume
    return {
        "type": "message",
        "turn": turn_id,
        "text": data.text,
        "history": list(data.history),
        "context": encode_context(data.context),
        "pause": None if pause is None else {"directory": str(pause.directory), "thread_id": pause.thread_id},
        "resume": None
        if resume is None
        else {"approval_id": resume.approval_id, "decision": dataclasses.asdict(resume.decision)},
    }


def decode_message(message: Mapping[str, Any]) -> UserMessage:
    """The ``UserMessage`` of a ``message`` line; ``ValueError`` for one that is malformed."""
    history = message.get("history") or []
    if not isinstance(history, list) or not all(isinstance(item, Mapping) for item in history):
        raise ValueError("history must be a list of messages")
    pause_data, resume_data = message.get("pause"), message.get("resume")
    pause = resume = None
    if isinstance(pause_data, Mapping):
        pause = PausePoint(Path(str(pause_data["directory"])), str(pause_data["thread_id"]))
    if isinstance(resume_data, Mapping):
        decision = dict(resume_data.get("decision") or {})
        args = decision.get("args")
        resume = Resume(
            str(resume_data["approval_id"]),
            Decision(
                decision.get("type") or "reject",
                dict(args) if isinstance(args, Mapping) else None,
                None if decision.get("message") is None else str(decision["message"]),
            ),
        )
    return UserMessage(
        str(message.get("text") or ""),
        [{str(k): str(v) for k, v in item.items()} for item in history],
        decode_context(message.get("context")),
        pause=pause,
        resume=resume,
    )


def _line(message: Mapping[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


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


@dataclass(frozen=True)
class SkillRef:
    """A skill the session's ``load_skill`` tool may load (from the session's skill index)."""

    skill_id: str
    name: str
    version: str = "latest"


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
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 30.0
    """Silence after which the process counts as hung and is killed."""
    cancel_grace: float = 5.0
    """How long a cancelled turn may take to end before the process is killed."""
    stop_grace: float = 5.0
    """How long ``stop`` waits for the process to exit before killing it."""


@dataclass
class ReplyText:
    """The text a turn has streamed so far, segment by segment (as the transcript keeps it)."""

    segments: list[str] = field(default_factory=list)
    current: str = ""

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.current += event.text
        elif isinstance(event, NewSegment) and self.current:
            self.segments.append(self.current)
            self.current = ""

    @property
    def text(self) -> str:
        return "\n\n".join(part for part in [*self.segments, self.current] if part)


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


def child_environment() -> dict[str, str]:
    """The parent's environment without any secret (the VM credentials, API keys: its tools could
    read them; the keys it needs arrive in ``init``), with clawlet importable."""
    env = {key: value for key, value in os.environ.items() if not is_secret_name(key)}
    package_root = str(Path(__file__).resolve().parents[2])
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root + (os.pathsep + existing if existing else "")
    return env


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


async def pipe_streams(
    read_fd: int, write_fd: int, limit: int = LINE_LIMIT
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Asyncio streams over two pipe descriptors (both taken over: closed with the streams)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


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
        """The engine's check (:func:`clawlet.engine.approvals.check_decision`) against the schema
        of the tool the child's engine has under that name."""
        tools = self.spec.base_tools() if self.spec.base_tools is not None else []
        extra = session_tools(self.spec.skills, self.spec.mcp_servers, _no_requests)
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
                process.stdin.write(_line(message))
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


# -- the child side ------------------------------------------------------------------------------


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


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (POSIX; elsewhere nothing is locked)."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


async def _no_requests(method: str, params: dict[str, Any]) -> Any:
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
        self._base_agent: Any = None
        self._saving_agent: Any = None
        self._plain = False

    def build_tools(self) -> list[BaseTool]:
        return [*super().build_tools(), *self.extra_tools]

    def build_agent(self) -> Any:
        base = super().build_agent()
        if self._plain:
            return base
        if base is not self._base_agent:  # built anew (first turn, or MCP tools changed)
            self._base_agent = base
            self._saving_agent = base.copy({"checkpointer": self.checkpointer})
        return self._saving_agent.with_config({"configurable": {"thread_id": self.thread_id}})

    def pausable_agent(self, pause: PausePoint) -> Any:
        self._plain = True  # the pause point's checkpointer, on the plain agent
        try:
            return super().pausable_agent(pause)
        finally:
            self._plain = False


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
            self.writer.write(_line(message))
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
        from clawlet.memory.stores import KnowledgeBase, MemoryIndex, build_embedder

        self.session_id = str(init["session_id"])
        session_dir = Path(str(init["session_dir"]))
        hold_secrets(dict(init.get("held_secrets") or {}))  # masked in tool output, like the parent's
        settings = Settings(**dict(init["settings"]))
        skills = [SkillRef(**dict(item)) for item in init.get("skills") or []]
        mcp_servers = [str(name) for name in init.get("mcp_servers") or [] if isinstance(name, str)]
        self.memory = SessionMemory(session_dir)
        self.checkpointer = LocalCheckpointer(session_dir / CHECKPOINTS_DIR)
        embedder = build_embedder(settings)
        with _exclusive(settings.paths.storage / INDEX_LOCK):
            memory_index = MemoryIndex(settings.paths, embedder)
            knowledge = KnowledgeBase(settings.paths, embedder)
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
        return float(init.get("heartbeat_interval") or ProcessOptions.heartbeat_interval)

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
            with contextlib.suppress(Exception):
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
        assert self.memory is not None
        if reply:
            try:
                await asyncio.to_thread(self.memory.append_message, MEMORY_ROLE_ASSISTANT, reply)
            except OSError:
                log.exception("session %s: could not save the reply to conversation.md", self.session_id)
        if thread_id is not None:
            await asyncio.to_thread(self._drop_older_threads, thread_id)

    def _drop_older_threads(self, keep: str) -> None:
        """Delete the checkpoints of earlier turns: the newest checkpoint is the last turn's state."""
        assert self.checkpointer is not None
        try:
            threads = {str(item.config["configurable"]["thread_id"]) for item in self.checkpointer.list(None)}
            for thread_id in threads - {keep}:
                self.checkpointer.delete_thread(thread_id)
        except Exception:
            log.exception("session %s: could not prune old checkpoints", self.session_id)


async def _child_main() -> int:
    # Keep the pipe on private descriptors; fd 0 becomes /dev/null and fd 1 stderr, so a stray
    # print() or a subprocess that inherits them can never read or corrupt protocol lines.
    pipe_in, pipe_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    reader, writer = await pipe_streams(pipe_in, pipe_out)
    try:
        return await SessionChild(reader, writer).serve()
    except (BrokenPipeError, ConnectionResetError):
        log.info("the parent went away; exiting")
        return 0


def run_child() -> int:
    """The session process, on fd 0/1 (the pipe) and 2 (its log): spawned (:func:`main`) or forked
    from the session template; returns the exit code."""
    from clawlet.logs import configure_logging

    configure_logging(
        os.environ.get("CLAWLET_LOG_FORMAT", "json"), os.environ.get("CLAWLET_LOG_LEVEL", "INFO")
    )
    return asyncio.run(_child_main())


def main() -> None:
    raise SystemExit(run_child())


if __name__ == "__main__":
    main()

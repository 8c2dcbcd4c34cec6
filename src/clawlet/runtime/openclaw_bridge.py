"""The ``openclaw`` runtime (seed 001 §4.4–4.6, §4.10): :class:`OpenClawBridgeAdapter` runs one
session's turns on a real OpenClaw through the Node.js bridge in ``bridge/`` (``docs/openclaw-bridge.md``).

**Process model.** ``start`` makes a private directory (mode 0700), listens on ``bridge.sock`` in
it, and starts ``node bridge/src/main.mjs --socket <path>`` in a session of its own with an
environment built from scratch (``PATH``, ``HOME`` = the private directory, locale and ``TMPDIR``):
API keys reach the bridge only inside the ``start`` message. The first connection on the socket is
the bridge (later ones are refused). The bridge then either starts a private ``openclaw gateway`` on
loopback with its own state directory (the default; needs Node ≥ 24.16 and the ``openclaw`` CLI) or,
with ``openclaw_config.gateway_url``, connects to an existing gateway that speaks the same protocol
(clawlet's own ``/gateway`` in tests). ``start`` returns after the bridge's ``ready`` (or raises with
the bridge's error, its exit status and the tail of its log after ``ready_timeout`` at the latest).

**IPC** (JSON lines on the socket; the seed's tables plus the fields clawlet needs)::

    clawlet → bridge  start           {session_id, agent_config, skill_index, api_keys, openclaw_config}
    bridge → clawlet  ready           {session_id, session_key, gateway: {url, spawned, protocol, …},
                                       model, skills: {loaded, unavailable}}
    clawlet → bridge  user_message    {turn, data: {message}}
    bridge → clawlet  sse_event       {turn, data: {type: text_chunk | thinking | tool_call_start |
                                       tool_call_complete | skill_call_start | skill_call_complete |
                                       execution_complete | execution_error, …}}
    clawlet → bridge  cancel          {}
    clawlet → bridge  stop            {}
    bridge → clawlet  request         {id, method, params}     memory_search, get_skill_package, mcp_call
    clawlet → bridge  response        {id, result} | {id, error}
    bridge → clawlet  fire_and_forget {method, params}         usage_report, audit_log
    bridge → clawlet  error           {message, code?, turn?, fatal?}

**Events** (:func:`translate_bridge_event`): ``text_chunk`` → ``TextDelta``, ``thinking`` →
``Thinking``, ``tool_call_start``/``tool_call_complete`` → ``ToolStart``/``ToolEnd`` (skills as tool
``skill:<name>``; a ``NewSegment`` precedes the first text after a tool, as clawlet's engine does),
``execution_complete`` → the end of :meth:`send_message`'s stream (the caller adds ``RunFinished``),
``execution_complete {cancelled: true}`` → ``RunCancelled`` (the exec plane's cancel path waits for
a terminal event), ``execution_error`` → :class:`OpenClawBridgeError` is raised (the caller reports
``RunFailed``).

**Failures.** A bridge that exits or closes the socket (a crash, ``kill -9``, a lost gateway) ends
the running turn with :class:`OpenClawBridgeError` naming its exit status and the tail of its log;
the next message starts a new bridge (the OpenClaw state directory persists when ``state_dir`` is
given). A cancelled turn the bridge has not ended ``cancel_grace`` seconds later ends with
``RunCancelled`` and the bridge is killed. ``stop`` sends ``stop`` (the bridge cancels the turn and
stops its gateway), then SIGTERM/SIGKILL the bridge's process group after ``stop_grace``.
There is no fallback: without Node ≥ 24.16 and OpenClaw, :func:`openclaw_available` says why, and
:meth:`~OpenClawBridgeAdapter.preflight` (which starts nothing) and ``start`` raise
:class:`OpenClawUnavailable` with that reason and how to fix it (:data:`INSTALL_HINT`).

**In the exec plane** (``clawlet exec-plane``, ``runtime_type: "openclaw"``) one adapter serves one
session; :class:`~clawlet.execplane.daemon.ExecPlane` calls ``preflight`` before it starts anything
(a failure refuses the session with that message as its ``execution_error``) and runs the adapter in
its own process, not in a session process: the bridge already is a process of its own (see the exec
plane's docstring). It gives the bridge ``init``'s API keys, the session's ``agent_config``, skill
index and ``openclaw_config`` (without keys that name this machine's programs and directories),
``state_dir`` = ``sessions/<id>/openclaw-memory`` and the shared skill cache as ``skills_cache_dir``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from clawlet.events import (
    Event,
    NewSegment,
    RunCancelled,
    TextDelta,
    Thinking,
    ToolEnd,
    ToolStart,
)
from clawlet.runtime.base import RunConfig, RuntimeAdapter, RuntimeFailure, UserMessage

log = logging.getLogger(__name__)

ENV_NODE: Final = "CLAWLET_OPENCLAW_NODE"
"""A Node.js binary ≥ 24.16 for OpenClaw (default: ``node`` on ``PATH``)."""
ENV_BIN: Final = "CLAWLET_OPENCLAW_BIN"
"""The OpenClaw CLI: ``openclaw.mjs``, the ``node_modules/.bin/openclaw`` symlink or the package
directory (default: ``openclaw`` on ``PATH``)."""
ENV_BRIDGE: Final = "CLAWLET_OPENCLAW_BRIDGE"
"""The bridge directory (default: ``bridge/`` of the source tree this module is in)."""
MIN_NODE: Final = (24, 16, 0)
"""OpenClaw 2026.9.x declares ``engines.node: ">=24.16.0 <25 || >=26.1.0"``."""
NODE_RANGE: Final = ">=24.16.0 <25 || >=26.1.0"
"""That range as text (:func:`node_supported` checks it; ``bridge/src/openclaw-gateway.mjs`` too)."""
PLACEHOLDER_VERSION: Final = "0.0.1"
"""What ``npm install openclaw`` installs on a Node too old for the real package."""
BRIDGE_MAIN: Final = Path("src") / "main.mjs"
BRIDGE_DEPENDENCY: Final = Path("node_modules") / "ws" / "package.json"
SOCKET_NAME: Final = "bridge.sock"
LOG_NAME: Final = "bridge.log"
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
PASSED_ENV: Final = ("LANG", "LC_ALL", "TZ", "TMPDIR")
"""The only variables of clawlet's environment the bridge gets."""
SYSTEM_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
INSTALL_HINT: Final = (
    "install Node >= 24.16 and openclaw (see docs/openclaw-interop.md), or set"
    f" {ENV_NODE}=/path/to/node-24 and {ENV_BIN}=/path/to/openclaw.mjs"
)
"""How to make the ``openclaw`` runtime available (part of :class:`OpenClawUnavailable`'s message)."""

RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Answers a bridge ``request`` (``method``, ``params``) → its ``result``; raising answers ``error``."""
NotifyHandler = Callable[[str, dict[str, Any]], Awaitable[None] | None]
"""Receives a bridge ``fire_and_forget`` (``method``, ``params``)."""


class OpenClawBridgeError(RuntimeFailure):
    """The OpenClaw bridge failed: it did not start, a turn failed, or the process died."""


class OpenClawUnavailable(OpenClawBridgeError):
    """Node.js ≥ 24.16, the ``openclaw`` CLI or the bridge's dependencies are missing."""


# -- availability ----------------------------------------------------------------------------------


def default_bridge_dir() -> Path:
    """``$CLAWLET_OPENCLAW_BRIDGE``, else ``bridge/`` at the root of this source tree."""
    configured = os.environ.get(ENV_BRIDGE, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parents[3] / "bridge"


def version_tuple(text: str) -> tuple[int, ...]:
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(part) for part in match.groups()) if match else ()


def node_supported(version: tuple[int, ...]) -> bool:
    """OpenClaw's ``engines`` range (:data:`NODE_RANGE`): the one rule for the bridge and ``/health``."""
    if not version:
        return False
    return MIN_NODE <= version < (25,) or version >= (26, 1, 0)


def bridge_problem(bridge_dir: Path) -> str | None:
    """Why the bridge in ``bridge_dir`` cannot run, or ``None``."""
    if not (bridge_dir / BRIDGE_MAIN).is_file():
        return f"the OpenClaw bridge is missing ({bridge_dir / BRIDGE_MAIN} not found; set {ENV_BRIDGE})"
    if not (bridge_dir / BRIDGE_DEPENDENCY).is_file():
        return f"the OpenClaw bridge's dependencies are not installed (run `npm ci` in {bridge_dir})"
    return None


def resolve_openclaw_entry(raw: str) -> Path | None:
    """``openclaw.mjs`` for a CLI path, the ``.bin/openclaw`` symlink or the package directory."""
    path = Path(raw).expanduser()
    if path.is_dir():
        path = path / "openclaw.mjs"
    path = path.resolve()
    return path if path.is_file() else None


def node_version(node: Path) -> str:
    """``node --version`` (e.g. ``v24.21.0``); raises ``OSError``/``SubprocessError`` if it fails."""
    done = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=15, check=False)
    if done.returncode != 0:
        raise subprocess.SubprocessError(
            (done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}"
        )
    return done.stdout.strip()


def _find_executable(raw: str | None, fallback: str) -> Path | None:
    candidate = (raw or "").strip() or shutil.which(fallback) or ""
    if not candidate:
        return None
    path = Path(candidate).expanduser()
    return path.resolve() if path.is_file() else None


@dataclass(frozen=True)
class OpenClawProbe:
    """What :func:`probe_openclaw` found (``/health`` shows it: :mod:`clawlet.api.health`)."""

    available: bool
    reason: str
    summary: str = ""
    """``reason`` without paths (what ``/health`` says to callers without the token)."""
    node: Path | None = None
    node_version: str | None = None
    openclaw_entry: Path | None = None
    openclaw_version: str | None = None
    bridge_dir: Path | None = None


def _package_version(entry: Path) -> str | None:
    try:
        data = json.loads((entry.parent / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def probe_openclaw(
    *, node: str | None = None, openclaw_bin: str | None = None, bridge_dir: Path | None = None
) -> OpenClawProbe:
    """Check the bridge, then Node.js and the OpenClaw CLI (:func:`probe_openclaw_install`).
    Runs ``node --version`` (fast); never starts OpenClaw."""
    bridge = bridge_dir or default_bridge_dir()
    problem = bridge_problem(bridge)
    if problem is not None:
        summary = problem.partition(" (")[0]
        return OpenClawProbe(False, problem, summary, bridge_dir=bridge)
    return probe_openclaw_install(node=node, openclaw_bin=openclaw_bin, bridge_dir=bridge)


def probe_openclaw_install(
    *, node: str | None = None, openclaw_bin: str | None = None, bridge_dir: Path | None = None
) -> OpenClawProbe:
    """Check Node.js ≥ 24.16 (``node``, else ``$CLAWLET_OPENCLAW_NODE``, else ``node`` on ``PATH``)
    and the OpenClaw CLI (``openclaw_bin``, else ``$CLAWLET_OPENCLAW_BIN``, else ``openclaw`` on
    ``PATH``), not the bridge: what the real-OpenClaw tests need too. ``bridge_dir`` is only
    recorded in the result."""
    node_raw = node or os.environ.get(ENV_NODE)
    node_path = _find_executable(node_raw, "node")
    if node_path is None:
        where = f"{node_raw!r} is not a file" if node_raw else "there is no node on PATH"
        return OpenClawProbe(
            False,
            f"Node.js >= 24.16 is required for OpenClaw: {where} (set {ENV_NODE})",
            "Node.js is not installed",
            bridge_dir=bridge_dir,
        )
    try:
        found_version = node_version(node_path)
    except (OSError, subprocess.SubprocessError) as exc:
        return OpenClawProbe(
            False,
            f"cannot run {node_path} --version: {exc}",
            "node --version failed",
            node=node_path,
            bridge_dir=bridge_dir,
        )
    if not node_supported(version_tuple(found_version)):
        return OpenClawProbe(
            False,
            f"{node_path} is Node {found_version}; OpenClaw needs >=24.16.0 <25 or >=26.1.0 (set {ENV_NODE})",
            f"Node.js {found_version} is outside OpenClaw's range {NODE_RANGE}",
            node=node_path,
            node_version=found_version,
            bridge_dir=bridge_dir,
        )
    bin_raw = openclaw_bin or os.environ.get(ENV_BIN) or shutil.which("openclaw") or ""
    entry = resolve_openclaw_entry(bin_raw) if bin_raw.strip() else None
    if entry is None:
        where = (
            f"{bin_raw!r} is not an openclaw.mjs file or package directory"
            if bin_raw
            else "not found on PATH"
        )
        return OpenClawProbe(
            False,
            f"the openclaw CLI is missing: {where} (set {ENV_BIN}; see docs/openclaw-interop.md)",
            "the openclaw CLI is not installed",
            node=node_path,
            node_version=found_version,
            bridge_dir=bridge_dir,
        )
    version = _package_version(entry)
    if version == PLACEHOLDER_VERSION:
        return OpenClawProbe(
            False,
            f"{entry} is the empty openclaw {PLACEHOLDER_VERSION} placeholder"
            " (install openclaw@2026.9.6 with Node 24)",
            f"openclaw is the empty {PLACEHOLDER_VERSION} placeholder package",
            node=node_path,
            node_version=found_version,
            openclaw_entry=entry,
            openclaw_version=version,
            bridge_dir=bridge_dir,
        )
    return OpenClawProbe(
        True,
        f"OpenClaw {version or '?'} ({entry}) on Node {found_version} ({node_path})",
        f"OpenClaw {version or '?'} on Node.js {found_version}",
        node=node_path,
        node_version=found_version,
        openclaw_entry=entry,
        openclaw_version=version,
        bridge_dir=bridge_dir,
    )


def openclaw_available(
    *, node: str | None = None, openclaw_bin: str | None = None, bridge_dir: Path | None = None
) -> tuple[bool, str]:
    """``(True, what was found)`` or ``(False, why not)``: see :func:`probe_openclaw`."""
    probe = probe_openclaw(node=node, openclaw_bin=openclaw_bin, bridge_dir=bridge_dir)
    return probe.available, probe.reason


# -- event translation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnEnd:
    """``execution_complete``: the turn is over (``cancelled`` when it was aborted)."""

    content: str
    cancelled: bool = False


@dataclass(frozen=True)
class TurnError:
    """``execution_error``."""

    error: str


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def translate_bridge_event(data: Mapping[str, Any]) -> Event | TurnEnd | TurnError | None:
    """One ``sse_event``'s ``data`` as a clawlet event (``None``: nothing to pass on)."""
    kind = data.get("type")
    if kind == "text_chunk":
        text = _text(data.get("content"))
        return TextDelta(text) if text else None
    if kind == "thinking":
        text = _text(data.get("content"))
        return Thinking(text) if text else None
    if kind == "tool_call_start":
        return ToolStart(
            _text(data.get("tool_name")) or "tool", _text(data.get("tool_input")), _text(data.get("call_id"))
        )
    if kind == "tool_call_complete":
        return ToolEnd(
            _text(data.get("tool_name")) or "tool",
            _text(data.get("result")),
            _text(data.get("call_id")),
            bool(data.get("is_error")),
        )
    if kind in ("skill_call_start", "skill_call_complete"):
        name = f"skill:{_text(data.get('skill_name'))}"
        if kind == "skill_call_start":
            return ToolStart(name, _text(data.get("arguments")), name)
        return ToolEnd(name, _text(data.get("result")), name)
    if kind == "execution_complete":
        return TurnEnd(_text(data.get("content")), bool(data.get("cancelled")))
    if kind == "execution_error":
        return TurnError(_text(data.get("error")) or "the OpenClaw run failed")
    return None


# -- the adapter ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeSpec:
    """What one session's bridge is started with (the seed's ``start`` fields)."""

    agent_config: Mapping[str, Any] = field(default_factory=dict)
    """``model`` (``gpt-4o-mini`` or ``provider/model``), ``provider``, ``base_url``, ``system_prompt``."""
    skill_index: Sequence[Mapping[str, Any]] = ()
    api_keys: Mapping[str, str] = field(default_factory=dict)
    openclaw_config: Mapping[str, Any] = field(default_factory=dict)
    """Passed to the bridge: ``gateway_url`` + ``gateway_token`` (use an existing gateway),
    ``agent_id``, ``session_key``, ``skills_cache_dir``, ``startup_timeout_ms``, ``abort_grace_ms`` …"""
    state_dir: Path | None = None
    """OpenClaw's state for the session (the seed's ``openclaw-memory``), kept across bridge
    restarts; default: inside the private directory, deleted by :meth:`OpenClawBridgeAdapter.stop`."""
    on_request: RequestHandler | None = None
    on_notify: NotifyHandler | None = None


@dataclass(frozen=True)
class BridgeOptions:
    """Where the bridge and OpenClaw are, and the adapter's time limits (seconds)."""

    node: str | None = None
    """Node.js for the bridge when it connects to ``gateway_url`` (any Node ≥ 20; default:
    ``$CLAWLET_OPENCLAW_NODE``, then ``node`` on ``PATH``). With a private gateway the bridge runs
    on OpenClaw's Node."""
    openclaw_node: str | None = None
    openclaw_bin: str | None = None
    bridge_dir: Path | None = None
    ready_timeout: float = 150.0
    cancel_grace: float = 20.0
    stop_grace: float = 20.0


@dataclass(eq=False)
class _Turn:
    turn_id: str
    queue: asyncio.Queue[Event | TurnEnd | TurnError | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    streamed: list[str] = field(default_factory=list)
    after_tool: bool = False
    cancel_deadline: float | None = None
    abandoned: bool = False


def _exit_description(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _BridgeProcess:
    """One bridge process, its socket and its private directory."""

    def __init__(self, directory: Path, log_file: Path) -> None:
        self.directory = directory
        self.log_file = log_file
        self.process: asyncio.subprocess.Process | None = None
        self.server: asyncio.Server | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.reader_task: asyncio.Task[None] | None = None
        self.gone = False
        self.gone_reason = ""
        self.write_lock = asyncio.Lock()

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    @property
    def alive(self) -> bool:
        return not self.gone and self.process is not None and self.process.returncode is None

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connected.done():  # only the bridge we started may talk to us
            writer.close()
            return
        self.reader, self.writer = reader, writer
        self.connected.set_result(None)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    async def send(self, message: Mapping[str, Any]) -> bool:
        """Write one line; ``False`` when the bridge is gone."""
        writer = self.writer
        if writer is None or self.gone or writer.is_closing():
            return False
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self.write_lock:
            try:
                writer.write(line.encode("utf-8"))
                await writer.drain()
            except (ConnectionError, OSError):
                return False
        return True

    def kill_group(self, sig: signal.Signals = signal.SIGKILL) -> None:
        process = self.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)

    async def close(self, remove_directory: bool) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()
        if remove_directory:
            await asyncio.to_thread(shutil.rmtree, self.directory, True)


class OpenClawBridgeAdapter(RuntimeAdapter):
    """Runs a session on OpenClaw through the Node.js bridge (see the module docstring)."""

    def __init__(self, spec: BridgeSpec | None = None, options: BridgeOptions | None = None) -> None:
        self.spec = spec or BridgeSpec()
        self.options = options or BridgeOptions()
        self.session_id: str | None = None
        self.runtime_type = "openclaw"
        self.turns = 0
        self.starts = 0
        """Bridge processes started so far (more than one after a crash)."""
        self.ready_info: dict[str, Any] = {}
        """The bridge's last ``ready`` message (gateway, session key, skills)."""
        self.last_error: str | None = None
        self._config: dict[str, Any] = {}
        self._bridge: _BridgeProcess | None = None
        self._turn: _Turn | None = None
        self._stopped = False
        self._start_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- state ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        bridge = self._bridge
        if bridge is None or not bridge.alive or bridge.process is None:
            return None
        return bridge.process.pid

    @property
    def alive(self) -> bool:
        return self.pid is not None

    @property
    def running(self) -> bool:
        return self._turn is not None and not self._turn.done.is_set()

    # -- RuntimeAdapter ------------------------------------------------------------------------

    async def start(self, session_id: str, config: RunConfig) -> None:
        """Start the bridge and wait for ``ready``. ``config.options`` may carry ``agent_config``,
        ``skill_index``, ``api_keys`` and ``openclaw_config`` (they replace the spec's)."""
        self.session_id = session_id
        self.runtime_type = config.runtime_type or "openclaw"
        self._config = self._start_config(config.options)
        await self._ensure_bridge()

    def preflight(self) -> None:
        """Raise :class:`OpenClawUnavailable` (what is missing and how to fix it) when the bridge
        could not start here with this adapter's configuration. Blocking (it may run
        ``node --version``); starts nothing and creates nothing."""
        self._plan(self._config or self._start_config({}))

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        """Run one turn on OpenClaw. ``data.history`` is not sent: OpenClaw keeps the session's
        history under its session key."""
        session_id = self.session_id or ""
        previous = self._turn
        if previous is not None and not previous.done.is_set():
            if not previous.abandoned:
                raise OpenClawBridgeError("a turn is already running in this session")
            with contextlib.suppress(TimeoutError):  # its consumer went away; it is being cancelled
                await asyncio.wait_for(previous.done.wait(), self.options.cancel_grace)
        bridge = await self._ensure_bridge()
        turn = _Turn(uuid.uuid4().hex)
        self._turn = turn
        self.turns += 1
        try:
            sent = await bridge.send(
                {"type": "user_message", "turn": turn.turn_id, "data": {"message": data.text}}
            )
            if not sent:
                self._finish(turn, TurnError(self._gone_message(bridge)))
            loop = asyncio.get_running_loop()
            while True:
                timeout = (
                    None if turn.cancel_deadline is None else max(0.0, turn.cancel_deadline - loop.time())
                )
                try:
                    item = await asyncio.wait_for(turn.queue.get(), timeout)
                except TimeoutError:
                    reason = f"did not end a cancelled turn within {self.options.cancel_grace:g} s"
                    log.warning("session %s: the OpenClaw bridge %s; killing it", session_id, reason)
                    bridge.kill_group()
                    self._finish(turn, None)
                    yield RunCancelled(session_id, "".join(turn.streamed))
                    return
                if item is None:  # a wake-up after cancel()
                    continue
                if isinstance(item, TurnEnd):
                    if item.cancelled:
                        yield RunCancelled(session_id, item.content or "".join(turn.streamed))
                    return
                if isinstance(item, TurnError):
                    raise OpenClawBridgeError(item.error)
                yield item
        finally:
            if not turn.done.is_set():  # the consumer went away mid-turn: do not leave it running
                turn.abandoned = True
                self._spawn(bridge.send({"type": "cancel"}), f"cancel-abandoned-turn-{session_id}")

    async def cancel(self) -> None:
        """Ask the bridge to abort the running turn; it ends with ``RunCancelled``."""
        turn = self._turn
        bridge = self._bridge
        if turn is None or turn.done.is_set() or turn.cancel_deadline is not None:
            return
        turn.cancel_deadline = asyncio.get_running_loop().time() + self.options.cancel_grace
        turn.queue.put_nowait(None)
        if bridge is not None:
            await bridge.send({"type": "cancel"})

    async def stop(self) -> None:
        """``stop`` the bridge (it cancels the turn and stops its gateway), then end its process
        group after ``stop_grace`` seconds; removes the private directory."""
        self._stopped = True
        bridge = self._bridge
        if bridge is not None:
            await self._shut_down(bridge)
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def get_snapshot(self) -> dict[str, Any]:
        return {
            "runtime_type": self.runtime_type,
            "session_id": self.session_id,
            "turns": self.turns,
            "running": self.running,
            "bridge_alive": self.alive,
            "bridge_starts": self.starts,
            "session_key": self.ready_info.get("session_key"),
            "gateway": self.ready_info.get("gateway"),
            "last_error": self.last_error,
        }

    # -- the bridge process --------------------------------------------------------------------

    async def _ensure_bridge(self) -> _BridgeProcess:
        async with self._start_lock:
            if self._stopped:
                raise OpenClawBridgeError("the session was stopped")
            bridge = self._bridge
            if bridge is not None and bridge.alive:
                return bridge
            if bridge is not None:
                await bridge.close(remove_directory=True)
            return await self._launch()

    def _start_config(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The ``start`` message's fields: ``options`` (``RunConfig.options``) over the spec's."""
        spec = self.spec
        return {
            "agent_config": dict(options.get("agent_config") or spec.agent_config),
            "skill_index": [dict(item) for item in (options.get("skill_index") or spec.skill_index)],
            "api_keys": dict(options.get("api_keys") or spec.api_keys),
            "openclaw_config": dict(options.get("openclaw_config") or spec.openclaw_config),
        }

    def _plan(self, config: Mapping[str, Any] | None = None) -> tuple[Path, Path, dict[str, Any]]:
        """The Node binary, the bridge directory and the ``openclaw_config`` to send; raises
        :class:`OpenClawUnavailable` with the reason when something is missing."""
        options = self.options
        openclaw_config = dict((self._config if config is None else config).get("openclaw_config") or {})
        bridge_dir = (options.bridge_dir or default_bridge_dir()).resolve()
        if openclaw_config.get("gateway_url"):
            problem = bridge_problem(bridge_dir)
            node = _find_executable(options.node or os.environ.get(ENV_NODE), "node")
            if problem is None and node is None:
                problem = "Node.js is required for the OpenClaw bridge: there is no node on PATH"
            if problem is not None:
                raise OpenClawUnavailable(
                    f"OpenClaw is not available: {problem}. The session was not started."
                )
            return node or Path("node"), bridge_dir, openclaw_config
        probe = probe_openclaw(
            node=options.openclaw_node, openclaw_bin=options.openclaw_bin, bridge_dir=bridge_dir
        )
        if not probe.available or probe.node is None or probe.openclaw_entry is None:
            hint = f" To run it, {INSTALL_HINT}." if bridge_problem(bridge_dir) is None else ""
            raise OpenClawUnavailable(
                f"OpenClaw is not available on this machine: {probe.reason}.{hint} The session was not"
                " started (there is no fallback to another runtime)."
            )
        openclaw_config.setdefault("openclaw_bin", str(probe.openclaw_entry))
        openclaw_config.setdefault("node", str(probe.node))
        openclaw_config.setdefault("startup_timeout_ms", int(max(5.0, options.ready_timeout - 10.0) * 1000))
        return probe.node, bridge_dir, openclaw_config

    async def _launch(self) -> _BridgeProcess:
        node, bridge_dir, openclaw_config = await asyncio.to_thread(self._plan)
        directory = Path(tempfile.mkdtemp(prefix="clawlet-oc-"))  # mode 0700
        state_dir = self.spec.state_dir
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        log_file = (state_dir or directory) / LOG_NAME
        openclaw_config.setdefault("state_dir", str(state_dir or directory / "openclaw"))
        bridge = _BridgeProcess(directory, log_file)
        self._bridge = bridge  # stop() can reach it while it starts
        self.starts += 1
        try:
            bridge.server = await asyncio.start_unix_server(
                bridge.accept, path=str(bridge.socket_path), limit=MAX_LINE_BYTES
            )
            os.chmod(bridge.socket_path, 0o600)
            env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
            env.update(
                {"PATH": f"{node.parent}{os.pathsep}{SYSTEM_PATH}", "HOME": str(directory), "NO_COLOR": "1"}
            )
            with log_file.open("ab") as output:
                bridge.process = await asyncio.create_subprocess_exec(
                    str(node),
                    str(bridge_dir / BRIDGE_MAIN),
                    "--socket",
                    str(bridge.socket_path),
                    env=env,
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,  # its own process group: stop() can end all of it
                )
            if self._stopped:
                raise OpenClawBridgeError("the session was stopped while the bridge was starting")
            await self._wait_connected(bridge)
            bridge.reader_task = asyncio.create_task(
                self._read_loop(bridge), name=f"openclaw-bridge-{self.session_id}"
            )
            await bridge.send(
                {
                    "type": "start",
                    "session_id": self.session_id or "",
                    **self._config,
                    "openclaw_config": openclaw_config,
                }
            )
            try:
                self.ready_info = await asyncio.wait_for(
                    asyncio.shield(bridge.ready), self.options.ready_timeout
                )
            except TimeoutError:
                limit = self.options.ready_timeout
                raise OpenClawBridgeError(
                    f"the OpenClaw bridge was not ready within {limit:g} s{self._log_excerpt(bridge)}"
                ) from None
        except BaseException as exc:
            self.last_error = str(exc)
            bridge.gone = True
            bridge.kill_group()
            if bridge.process is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(bridge.process.wait(), 5)
            if bridge.reader_task is not None:
                bridge.reader_task.cancel()
                await asyncio.gather(bridge.reader_task, return_exceptions=True)
            await bridge.close(remove_directory=True)
            raise
        log.info(
            "session %s: OpenClaw bridge pid %s ready (%s)",
            self.session_id,
            bridge.process.pid if bridge.process else "?",
            (self.ready_info.get("gateway") or {}).get("url", "?"),
        )
        return bridge

    async def _wait_connected(self, bridge: _BridgeProcess) -> None:
        assert bridge.process is not None
        exited = asyncio.create_task(bridge.process.wait())
        waiting: set[asyncio.Future[Any]] = {bridge.connected, exited}
        try:
            done, _ = await asyncio.wait(
                waiting,
                timeout=self.options.ready_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if not exited.done():
                exited.cancel()
        if bridge.connected.done():
            return
        if exited in done:
            how = _exit_description(bridge.process.returncode)
            raise OpenClawBridgeError(
                f"the OpenClaw bridge {how} before connecting{self._log_excerpt(bridge)}"
            )
        raise OpenClawBridgeError(
            f"the OpenClaw bridge did not connect within {self.options.ready_timeout:g} s"
        )

    def _log_excerpt(self, bridge: _BridgeProcess) -> str:
        tail = bridge.log_tail()
        return f"\n--- {bridge.log_file} ---\n{tail}" if tail else ""

    def _gone_message(self, bridge: _BridgeProcess) -> str:
        return bridge.gone_reason or "the OpenClaw bridge is not running"

    async def _read_loop(self, bridge: _BridgeProcess) -> None:
        reader = bridge.reader
        assert reader is not None
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    log.error(
                        "session %s: the OpenClaw bridge sent a line over %d bytes",
                        self.session_id,
                        MAX_LINE_BYTES,
                    )
                    bridge.kill_group()
                    break
                except (ConnectionError, OSError):
                    break
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    log.warning(
                        "session %s: the OpenClaw bridge sent a line that is not JSON: %.200r",
                        self.session_id,
                        line,
                    )
                    continue
                if isinstance(message, dict):
                    self._dispatch(bridge, message)
        finally:
            await self._bridge_gone(bridge)

    def _dispatch(self, bridge: _BridgeProcess, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "ready":
            if not bridge.ready.done():
                bridge.ready.set_result(message)
        elif kind == "sse_event":
            turn = self._turn
            data = message.get("data")
            if turn is not None and message.get("turn") == turn.turn_id and isinstance(data, dict):
                self._deliver(turn, data)
        elif kind == "request":
            self._spawn(self._answer(bridge, message), f"openclaw-request-{message.get('method')}")
        elif kind == "fire_and_forget":
            self._notify(message)
        elif kind == "error":
            self._on_error(bridge, message)
        else:
            log.warning(
                "session %s: unknown message from the OpenClaw bridge: %.200r", self.session_id, message
            )

    def _deliver(self, turn: _Turn, data: Mapping[str, Any]) -> None:
        event = translate_bridge_event(data)
        if event is None or turn.done.is_set():
            return
        if isinstance(event, TurnEnd | TurnError):
            self._finish(turn, event)
            return
        if isinstance(event, ToolEnd):
            turn.after_tool = True
        elif isinstance(event, TextDelta):
            if turn.after_tool:
                turn.after_tool = False
                turn.queue.put_nowait(NewSegment())
            turn.streamed.append(event.text)
        turn.queue.put_nowait(event)

    def _finish(self, turn: _Turn, outcome: TurnEnd | TurnError | None) -> None:
        """End ``turn`` (once): its consumer gets ``outcome``; the adapter is free for the next."""
        if turn.done.is_set():
            return
        turn.done.set()
        if outcome is not None:
            turn.queue.put_nowait(outcome)
        if isinstance(outcome, TurnError):
            self.last_error = outcome.error
        if self._turn is turn:
            self._turn = None

    def _on_error(self, bridge: _BridgeProcess, message: Mapping[str, Any]) -> None:
        text = _text(message.get("message")) or "the OpenClaw bridge reported an error"
        fatal = bool(message.get("fatal"))
        self.last_error = text
        if not bridge.ready.done() and fatal:
            bridge.ready.set_exception(OpenClawBridgeError(text))
            return
        turn = self._turn
        if turn is not None and (message.get("turn") == turn.turn_id or fatal):
            self._finish(turn, TurnError(text))
            return
        log.warning("session %s: the OpenClaw bridge: %s", self.session_id, text)

    async def _answer(self, bridge: _BridgeProcess, message: Mapping[str, Any]) -> None:
        request_id = message.get("id")
        method = _text(message.get("method"))
        params = message.get("params")
        handler = self.spec.on_request
        reply: dict[str, Any] = {"type": "response", "id": request_id}
        try:
            if handler is None:
                raise LookupError(f"no handler for the bridge's {method!r} requests")
            result = await handler(method, dict(params) if isinstance(params, dict) else {})
            json.dumps(result)  # not serialisable → an error answer, not a broken line
            reply["result"] = result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("session %s: bridge request %s failed: %s", self.session_id, method, exc)
            reply["error"] = f"{type(exc).__name__}: {exc}"
        await bridge.send(reply)

    def _notify(self, message: Mapping[str, Any]) -> None:
        handler = self.spec.on_notify
        method = _text(message.get("method"))
        params = message.get("params")
        if handler is None:
            log.debug("session %s: bridge %s dropped (no handler)", self.session_id, method)
            return
        try:
            result = handler(method, dict(params) if isinstance(params, dict) else {})
        except Exception:
            log.exception("session %s: handling the bridge's %s failed", self.session_id, method)
            return
        if inspect.isawaitable(result):
            self._spawn(_logged(result, f"the bridge's {method}"), f"openclaw-notify-{method}")

    async def _bridge_gone(self, bridge: _BridgeProcess) -> None:
        """EOF: the bridge exited (or is about to). Fail whatever waited for it."""
        process = bridge.process
        if process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 5)
        code = process.returncode if process is not None else None
        # a private gateway left in the bridge's process group (the bridge was killed) goes too
        bridge.kill_group(signal.SIGKILL)
        if bridge.gone and bridge.gone_reason:
            return
        bridge.gone = True
        reason = f"the OpenClaw bridge {_exit_description(code)}"
        if self.last_error and code not in (0, None):
            reason += f" ({self.last_error})"
        if code not in (0, None):
            reason += self._log_excerpt(bridge)
        bridge.gone_reason = reason
        if not bridge.connected.done():
            bridge.connected.set_exception(OpenClawBridgeError(reason))
        if not bridge.ready.done():
            bridge.ready.set_exception(OpenClawBridgeError(reason))
        turn = self._turn
        if turn is not None:
            outcome = TurnEnd("".join(turn.streamed), cancelled=True) if self._stopped else TurnError(reason)
            self._finish(turn, outcome)
        if not self._stopped:
            log.warning("session %s: %s", self.session_id, reason.splitlines()[0])

    async def _shut_down(self, bridge: _BridgeProcess) -> None:
        process = bridge.process
        if process is not None and process.returncode is None:
            if not await bridge.send({"type": "stop"}):
                bridge.kill_group(signal.SIGTERM)  # not connected (yet): nothing to ask
            try:
                await asyncio.wait_for(process.wait(), self.options.stop_grace)
            except TimeoutError:
                log.warning(
                    "session %s: the OpenClaw bridge did not stop in time; killing it", self.session_id
                )
                bridge.kill_group(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 3)
                except TimeoutError:
                    bridge.kill_group(signal.SIGKILL)
                    await process.wait()
        bridge.kill_group(signal.SIGKILL)  # anything left in its process group
        if bridge.reader_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(bridge.reader_task), 5)
            bridge.reader_task.cancel()
            await asyncio.gather(bridge.reader_task, return_exceptions=True)
        turn = self._turn
        if turn is not None:
            self._finish(turn, TurnEnd("".join(turn.streamed), cancelled=True))
        await bridge.close(remove_directory=True)

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        async def run() -> None:
            await coro

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _logged(awaitable: Awaitable[Any], what: str) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("handling %s failed", what)

"""The session template: a pre-loaded process that forks the exec plane's session processes (a small
fork server; issue 15 §5).

Starting a session process from scratch costs about 1.5 CPU-seconds, most of it importing LangChain,
LangGraph and the provider SDKs. The exec plane therefore starts one **template** process
(``<python> -m clawlet.execplane.session_template``) that imports all of that once (:data:`PRELOAD`),
freezes what it has built out of the garbage collector's reach (``gc.freeze()``, so the collector
never writes to those pages and they stay shared copy-on-write) and then waits, single-threaded and
without an event loop, for fork requests. Each session process is a ``fork()`` of it that runs
exactly what ``python -m clawlet.execplane.session_child`` runs
(:func:`clawlet.execplane.session_child.run_child`: its own logging, its own event loop, the same
pipe protocol), so nothing on the parent's side changes but where the process comes from.

**What a forked session gets** is what a spawned one gets: fd 0/1 are pipes to the exec plane (the
pipe protocol), fd 2 is ``<session dir>/process.log``, the working directory is the home, it runs
in a session of its own (``setsid``), and its environment is the template's, which the exec plane
started with :func:`~clawlet.runtime.process_pipe.child_environment` (no secret: the process's
``/proc/<pid>/environ`` is the template's environment block). The template holds no control-plane
connection, no API key (those travel in each session's ``init`` on its pipe) and no other
session's descriptors (it closes each request's descriptors right after forking). A forked session
exits as an interpreter would (``atexit`` handlers run, output is flushed) but with ``os._exit``:
tearing down the modules the template loaded would only cost CPU.

**Control socket** (``AF_UNIX``/``SOCK_SEQPACKET``, one JSON object per packet; its descriptor number
is the template's only argument)::

    template → exec plane  ready   {pid, modules}          preloaded, forks from now on
    exec plane → template  fork    {id, cwd} + 3 fds        the child's stdin, stdout, stderr
    template → exec plane  forked  {id, pid}                (or failed {id, error})
    template → exec plane  exit    {pid, returncode}        a child ended (returncode as subprocess)

**Failures.** A forked session is watched exactly like a spawned one (heartbeats, EOF, its exit as
reported by the template: ``kill -9`` of it reads ``was killed by signal SIGKILL`` and fails only its
turn). EOF on the control socket means the template is gone: the exec plane logs it, starts a new
template in the background (after 0.5 s, then longer delays while it keeps failing) and starts
session processes the plain way (``create_subprocess_exec``) until the new one is ready. Sessions
the dead template had forked keep running; the exec plane learns of their end through a pidfd, their
exit status then being unknown (:data:`EXIT_UNKNOWN`). EOF on the control socket is also how the
template learns the exec plane has gone: it exits (its sessions see EOF on their own pipes and end).

The template needs ``fork``, ``socket.send_fds`` and ``os.pidfd_open`` (Linux); elsewhere
:func:`template_supported` is false and every session process is spawned.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import importlib
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NoReturn

from clawlet.execplane.session_process import EXIT_UNKNOWN, describe_exit
from clawlet.logs import swallowed
from clawlet.runtime.process_pipe import LINE_LIMIT, child_environment, pipe_streams

TEMPLATE_MODULE: Final = "clawlet.execplane.session_template"
log = logging.getLogger(TEMPLATE_MODULE)  # not __name__: the template runs this module as __main__
PACKET_LIMIT: Final = 64 * 1024
PRELOAD: Final = (
    "clawlet.execplane.session_child",
    "uvloop",
    "clawlet.logs",
    "clawlet.memory.stores",
    "clawlet.runtime.engine_adapter",
    "clawlet.sessions.store",
    "langchain_openai",
    "langchain_anthropic",
    "langchain_deepseek",
    "langchain_core.tracers.stdout",
    "langchain_core.tracers.run_collector",
    "langchain_core.messages.block_translators.langchain_v0",
)
"""What the template imports before it forks: the session process's module and what building the
engine and running a turn import lazily (the providers that are installed)."""
RESTART_DELAYS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds before restarting a template that died (or did not start), growing while it keeps
failing; back to the first after it has been up for :data:`STABLE_AFTER` seconds."""
STABLE_AFTER: Final = 60.0


def template_supported() -> bool:
    """Whether this platform can run the template (``fork``, fd passing, pidfds)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and hasattr(os, "pidfd_open")
        and hasattr(socket, "send_fds")
    )


# -- the template process ------------------------------------------------------------------------


def preload() -> int:
    """Import :data:`PRELOAD` (skipping providers that are not installed) and build the chat model
    of the exec plane's own settings once (:func:`warm_up`); the number of modules loaded."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            log.info("not preloading %s: %s", name, exc)
    warm_up()
    return len(sys.modules)


def warm_up() -> None:
    """Build, and drop, the chat model the template's environment names (the exec plane's
    ``CLAWLET_PROVIDER``, ``CLAWLET_LLM_*``; no API key, which the template never has): that imports
    what the provider imports lazily (its SDK's resources, its HTTP stack), and the HTTP clients the
    provider's integration caches per endpoint (langchain-openai's; no connection is opened) are
    inherited by the sessions, which then need not load the CA certificates again. A session with
    other settings builds its own, as it would anyway."""
    from clawlet.config import Settings
    from clawlet.llm.providers import build_chat_model

    try:
        settings = Settings(_env_file=None)
        if settings.resolved_provider != "demo":
            build_chat_model(settings)
    except Exception as exc:  # e.g. an incomplete provider: the sessions will say so themselves
        log.info("session template: no chat model warmed up: %s", exc)


def _send_packet(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.send(json.dumps(message, separators=(",", ":")).encode("utf-8"))


def _become_session(fds: list[int], cwd: str, closing: list[int]) -> NoReturn:
    """In the forked child: take the request's descriptors as fd 0/1/2 and run the session process."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(cwd)
        from clawlet.execplane.session_child import run_child

        code = run_child()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the child must never return into the template's loop
        import traceback

        traceback.print_exc()
    finally:  # exit as an interpreter does, but without tearing down what the template built
        with contextlib.suppress(Exception):  # the child is exiting: its log may be gone
            atexit._run_exitfuncs()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class TemplateServer:
    """The template's loop: fork on request, report each child's exit (see the module docstring)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: set[int] = set()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)

    def serve(self) -> int:
        modules = preload()
        gc.collect()
        gc.freeze()  # the collector leaves the preloaded objects (their pages stay shared) alone
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self._wake_w)
        _send_packet(self.sock, {"type": "ready", "pid": os.getpid(), "modules": modules})
        log.info("session template %d ready: %d modules preloaded", os.getpid(), modules)
        while True:
            try:
                readable, _, _ = select.select([self.sock.fileno(), self._wake_r], [], [])
            except InterruptedError:
                continue
            if self._wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_r, 512):
                        pass
            self._reap()
            if self.sock.fileno() in readable:
                try:
                    data, fds, _, _ = socket.recv_fds(self.sock, PACKET_LIMIT, 3)
                except ConnectionError:
                    data, fds = b"", []
                if not data:
                    log.info("session template %d: the exec plane went away; exiting", os.getpid())
                    return 0
                self._request(data, fds)

    def _request(self, data: bytes, fds: list[int]) -> None:
        try:
            message = json.loads(data)
            if not isinstance(message, dict) or message.get("type") != "fork" or len(fds) != 3:
                raise ValueError(f"not a fork request with 3 descriptors: {data[:200]!r}")
            request_id, cwd = message.get("id"), str(message.get("cwd") or "/")
            if threading.active_count() > 1:  # forking with threads is unsafe: say so
                log.warning("session template: forking with %d threads", threading.active_count())
            pid = os.fork()
            if pid == 0:
                _become_session(fds, cwd, [self.sock.fileno(), self._wake_r, self._wake_w])
            self.children.add(pid)
            _send_packet(self.sock, {"type": "forked", "id": request_id, "pid": pid})
        except Exception as exc:  # a bad request or a failed fork: answered, the template goes on
            log.exception("session template: fork request failed")
            with swallowed(log, "session template: could not answer the failed fork request"):
                request_id = json.loads(data).get("id")
                _send_packet(self.sock, {"type": "failed", "id": request_id, "error": str(exc)})
        finally:
            for fd in fds:
                os.close(fd)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            returncode = os.waitstatus_to_exitcode(status)
            _send_packet(self.sock, {"type": "exit", "pid": pid, "returncode": returncode})


def main() -> None:
    from clawlet.config import LogSettings
    from clawlet.logs import configure_logging

    logging_settings = LogSettings()
    configure_logging(logging_settings.log_format, logging_settings.log_level)
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    try:
        code = TemplateServer(sock).serve()
    except (BrokenPipeError, ConnectionResetError):
        code = 0
    raise SystemExit(code)


# -- the exec plane's side -----------------------------------------------------------------------


class TemplateChild:
    """A session process the template forked, for :class:`~clawlet.execplane.session_process.
    ProcessSessionAdapter` (what it uses of ``asyncio.subprocess.Process``: ``pid``,
    ``returncode``, ``stdin``, ``stdout``, ``wait()``). Not the exec plane's child: its exit status
    comes from the template (:data:`EXIT_UNKNOWN` if the template died first)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):  # gone already: its exit report is on its way
            self._pidfd = os.pidfd_open(pid)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def set_exited(self, returncode: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = returncode
        if not self._exited.done():
            self._exited.set_result(returncode)
        if self.stdin is not None:
            self.stdin.close()
        self._close_pidfd()

    def orphaned(self) -> None:
        """The template is gone: learn of this process's end from its pidfd."""
        if self.returncode is not None:
            return
        if self._pidfd is None:
            self.set_exited(EXIT_UNKNOWN)
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(self._pidfd, self.set_exited, EXIT_UNKNOWN)

    def _close_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with swallowed(log, "session template: removing the pidfd reader failed"):
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)


class SessionTemplate:
    """The exec plane's template process: started by :meth:`start`, restarted when it dies,
    asked for session processes by :meth:`spawn` (see the module docstring)."""

    def __init__(self, python: str, cwd: Path, log_path: Path, *, start_timeout: float = 60.0) -> None:
        self.python = python
        self.cwd = cwd
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.pid: int | None = None
        self.starts = 0
        """Template processes started so far."""
        self.forks = 0
        """Session processes forked so far."""
        self._sock: socket.socket | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Event = asyncio.Event()
        self._first: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        """True once the first template is ready, False if it could not start."""
        self._pending: dict[int, asyncio.Future[TemplateChild | None]] = {}
        self._children: dict[int, TemplateChild] = {}
        self._next_id = 0
        self._send_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def ready(self) -> bool:
        """A template is up and forks."""
        return self._ready.is_set()

    def start(self) -> None:
        """Start the template (in the background; :meth:`spawn` waits for the first one)."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="session-template")

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until a template is up (False after ``timeout`` seconds)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self.ready

    async def close(self) -> None:
        """Stop the template (EOF on its socket) and stop restarting it. Sessions it forked are not
        touched (the exec plane stops them itself)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def spawn(self, cwd: Path, stderr: int) -> TemplateChild | None:
        """A new session process forked from the template, or ``None`` (logged) when no template is
        up: the caller starts one the plain way. Only the first template is waited for."""
        if not self.ready and not self._first.done():
            await asyncio.wait({self._first}, timeout=self.start_timeout)
        sock = self._sock
        if not self.ready or sock is None:
            log.info("the session template is not running; starting a session process the plain way")
            return None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        child: TemplateChild | None = None
        try:
            self._next_id += 1
            request_id = self._next_id
            answer: asyncio.Future[TemplateChild | None] = asyncio.get_running_loop().create_future()
            self._pending[request_id] = answer
            try:
                request = json.dumps({"type": "fork", "id": request_id, "cwd": str(cwd)}).encode()
                await self._send(sock, request, [in_r, out_w, stderr])
                child = await answer
            except OSError as exc:
                log.warning("the session template did not take a fork request: %s", exc)
            finally:
                self._pending.pop(request_id, None)
        finally:
            os.close(in_r)
            os.close(out_w)
            if child is None:
                os.close(in_w)
                os.close(out_r)
        if child is None:
            log.info("the session template could not fork; starting a session process the plain way")
            return None
        child.stdout, child.stdin = await pipe_streams(out_r, in_w, LINE_LIMIT)
        if child.returncode is not None:
            child.stdin.close()
        self.forks += 1
        return child

    # -- internals -----------------------------------------------------------------------------

    async def _send(self, sock: socket.socket, data: bytes, fds: list[int]) -> None:
        loop = asyncio.get_running_loop()
        async with self._send_lock:
            while True:
                try:
                    socket.send_fds(sock, [data], fds)
                    return
                except BlockingIOError:
                    writable = loop.create_future()
                    loop.add_writer(sock.fileno(), writable.set_result, None)
                    try:
                        await writable
                    finally:
                        loop.remove_writer(sock.fileno())

    async def _run(self) -> None:
        attempt = 0
        try:
            while not self._closed:
                started = time.monotonic()
                try:
                    await self._run_once()
                except Exception:
                    log.exception("the session template failed")
                if not self._first.done():
                    self._first.set_result(False)
                if self._closed:
                    return
                attempt = 0 if time.monotonic() - started > STABLE_AFTER else attempt + 1
                delay = RESTART_DELAYS[min(max(attempt - 1, 0), len(RESTART_DELAYS) - 1)]
                log.warning(
                    "restarting the session template in %gs; session processes start the plain way meanwhile",
                    delay,
                )
                await asyncio.sleep(delay)
        finally:
            await self._shut_process()

    async def _run_once(self) -> None:
        """Start one template, serve its reports until it is gone."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)
        try:
            stderr = await asyncio.to_thread(open, self.log_path, "ab")
            with stderr:
                process = await asyncio.create_subprocess_exec(
                    self.python,
                    "-m",
                    TEMPLATE_MODULE,
                    str(theirs.fileno()),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=stderr,
                    pass_fds=(theirs.fileno(),),
                    env=child_environment(),
                    cwd=str(self.cwd),
                    start_new_session=True,
                )
        finally:
            theirs.close()
        ours.setblocking(False)
        self._process = process
        self.starts += 1
        try:
            await self._serve(process, ours)
        finally:
            self._ready.clear()
            self._sock = None
            ours.close()
            for answer in self._pending.values():
                if not answer.done():
                    answer.set_result(None)
            for child in list(self._children.values()):
                child.orphaned()
            self._children.clear()
            await self._shut_process()

    async def _serve(self, process: asyncio.subprocess.Process, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        receiving = asyncio.ensure_future(loop.sock_recv(sock, PACKET_LIMIT))
        try:
            done, _ = await asyncio.wait({receiving}, timeout=self.start_timeout)
            first = self._decode(receiving.result()) if done else None
            if first is None or first.get("type") != "ready":
                how = "did not start in time" if not done else "exited before it was ready"
                if not done:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(process.wait()), 5.0)
                log.warning(
                    "the session template %s (%s; its log: %s)",
                    how,
                    describe_exit(process.returncode),
                    self.log_path,
                )
                return
            self.pid = process.pid
            self._sock = sock
            self._ready.set()
            if not self._first.done():
                self._first.set_result(True)
            log.info("session template %d ready (%s modules preloaded)", process.pid, first.get("modules"))
            while True:
                receiving = asyncio.ensure_future(loop.sock_recv(sock, PACKET_LIMIT))
                message = self._decode(await receiving)
                if message is None:
                    break
                self._dispatch(message)
            await self._shut_process()
            log.warning(
                "the session template %d %s; sessions it started keep running",
                process.pid,
                describe_exit(process.returncode),
            )
        finally:
            receiving.cancel()

    @staticmethod
    def _decode(data: bytes) -> dict[str, Any] | None:
        """A packet's message; ``None`` at EOF."""
        if not data:
            return None
        try:
            message = json.loads(data)
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "forked" and isinstance(message.get("pid"), int):
            child = TemplateChild(message["pid"])
            self._children[child.pid] = child
            answer = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if answer is not None and not answer.done():
                answer.set_result(child)
        elif kind == "failed":
            log.warning("the session template could not fork: %s", message.get("error"))
            answer = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if answer is not None and not answer.done():
                answer.set_result(None)
        elif kind == "exit" and isinstance(message.get("pid"), int):
            exited = self._children.pop(message["pid"], None)
            returncode = message.get("returncode")
            if exited is not None:
                exited.set_exited(returncode if isinstance(returncode, int) else EXIT_UNKNOWN)

    async def _shut_process(self) -> None:
        """End the current template process: EOF first (it exits at once), SIGKILL if it lingers."""
        process = self._process
        if process is None:
            return
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if process.returncode is None:
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), 5.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        self.pid = None
        self._process = None


if __name__ == "__main__":
    main()

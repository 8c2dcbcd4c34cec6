"""What the benchmarks share: a clawlet server in a thread or a ``clawlet serve`` child process,
a process's memory and CPU time from ``/proc``, and the nearest-rank percentile."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uvicorn

REPO_SRC = Path(__file__).resolve().parent.parent / "src"
if str(REPO_SRC) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO_SRC))

from clawlet.api.app import create_app  # noqa: E402
from clawlet.config import Settings  # noqa: E402


class ClawletServer:
    """The clawlet app on a free loopback port, served by uvicorn in a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            backlog=4096,  # hundreds of connections may arrive at once
            timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("clawlet server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def smaps_rollup(pid: int) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup`` in bytes (``Rss``, ``Pss``, ``Private_Clean``, …)."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    found[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return found


def uss_bytes(pid: int) -> int:
    """Memory only this process uses (what ending it would free)."""
    rollup = smaps_rollup(pid)
    return rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0–100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# -- a `clawlet serve` subprocess (its own interpreter, so the client does not share its GIL) ------

_INHERITED_SETTINGS = ("CLAWLET_", "OPENCLAW_")
_ALIASED_SETTINGS = {
    "API_KEY",
    "API_KEYS",
    "DATABASE_URL",
    "WORKSPACE_BASE",
    "DEEPSEEK_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_MODEL",
    "USER_ID",
    "VM_TOKEN",
    "VM_TICKET",
    "CONTROL_PLANE_WS",
}


def clean_environ() -> dict[str, str]:
    """This process's environment without clawlet's settings (``CLAWLET_*``, ``OPENCLAW_*``, the
    provider keys and the exec plane's ``USER_ID``/``VM_*``), with this checkout's ``src`` first on
    ``PYTHONPATH``: what benchmarked clawlet processes start from."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_INHERITED_SETTINGS) and key not in _ALIASED_SETTINGS
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_SRC), os.environ.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    """A loopback port that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ClawletProcess:
    """``clawlet serve`` in a child process on a free loopback port, with a throw-away home.

    The child gets a clean environment for clawlet's settings: no inherited ``CLAWLET_*`` /
    ``OPENCLAW_*`` / provider keys, the offline demo model, ``CLAWLET_HOME=home``,
    ``OPENCLAW_CONFIG_PATH=openclaw_config`` (default ``home/openclaw.json``), and the home as its
    working directory (so no stray ``.env`` is read). Its output goes to ``home/serve.log``.
    Use as a context manager; :meth:`stop` interrupts it (SIGINT, uvicorn's graceful shutdown),
    then terminates and finally kills it if it does not exit.
    """

    def __init__(
        self,
        home: Path,
        *,
        openclaw_config: Path | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.home = home
        self.openclaw_config = openclaw_config or home / "openclaw.json"
        self.extra_env = env or {}
        self.start_timeout = start_timeout
        self.port = 0
        self.url = ""
        self.log_file = home / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = clean_environ()
        env.update(
            CLAWLET_HOME=str(self.home),
            OPENCLAW_CONFIG_PATH=str(self.openclaw_config),
            CLAWLET_PROVIDER="demo",
        )
        env.update(self.extra_env)
        return env

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "clawlet", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.home,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl+C reaches only the benchmark, which stops us in order
            )
        deadline = time.monotonic() + self.start_timeout
        with httpx.Client(timeout=2) as client:
            while True:
                if self.process.poll() is not None:
                    code = self.process.returncode
                    raise RuntimeError(f"clawlet serve exited with {code}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health/ready").status_code == 200:
                        return self.url
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"clawlet serve did not become ready in {self.start_timeout:g} s")
                time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        steps: list[tuple[Callable[[], None], float]] = [
            (lambda: process.send_signal(signal.SIGINT), 15.0),  # graceful: lifespan shutdown runs
            (process.terminate, 5.0),
            (process.kill, 5.0),
        ]
        for send, wait in steps:
            try:
                send()
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> ClawletProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

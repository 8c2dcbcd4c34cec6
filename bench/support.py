"""What the benchmarks share: a clawlet server in a thread or a ``clawlet serve`` child process,
a process's memory and CPU time from ``/proc``, the nearest-rank percentile, and timing one
OpenAI-style stream (time to the first content delta and to ``data: [DONE]``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import uvicorn

REPO_SRC = Path(__file__).resolve().parent.parent / "src"
if str(REPO_SRC) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO_SRC))

from clawlet.api.app import create_app  # noqa: E402
from clawlet.config import Settings  # noqa: E402
from clawlet.llm.demo import TITLE_REQUEST_MARKER  # noqa: E402
from clawlet.serving import uvicorn_options  # noqa: E402


class ClawletServer:
    """The clawlet app on a free loopback port, served by uvicorn in a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            backlog=4096,  # hundreds of connections may arrive at once
            **uvicorn_options(),  # what `clawlet serve` runs with
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


def process_tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its living descendants (a server's workers)."""
    total = process_cpu(pid)
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return total
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                children = [int(child) for child in file.read().split()]
        except OSError:
            continue
        for child in children:
            with contextlib.suppress(OSError, ValueError, IndexError):  # it ended meanwhile
                total += process_tree_cpu(child)
    return total


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0–100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# -- one OpenAI-style stream, timed --------------------------------------------------------------


def is_title_request(body: dict[str, Any]) -> bool:
    """Whether an LLM request body is clawlet asking for a session title (not an agent turn)."""
    messages = body.get("messages") or [{}]
    return TITLE_REQUEST_MARKER in str(messages[0].get("content", ""))


@dataclass
class Sample:
    """One timed stream: seconds to the first content (TTFT) and to the end, content chunks seen."""

    ttft: float
    total: float
    chunks: int
    gaps: list[float] = field(default_factory=list)
    """Seconds between one content chunk and the next (the inter-token delays)."""

    @property
    def chunk_rate(self) -> float:
        """Content chunks per second after the first one arrived."""
        streaming = self.total - self.ttft
        return (self.chunks - 1) / streaming if streaming > 0 and self.chunks > 1 else math.nan


def openai_content(line: str) -> str | None:
    """The content of a ``data:`` line's first choice delta ('' if none); None for ``[DONE]``."""
    data = line[6:]
    if data == "[DONE]":
        return None
    chunk = json.loads(data)
    if "error" in chunk:
        raise RuntimeError(f"stream error: {chunk['error']}")
    choices = chunk.get("choices") or [{}]
    return str(choices[0].get("delta", {}).get("content") or "")


async def measure_openai_stream(
    client: httpx.AsyncClient, base_url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Sample:
    """Stream ``POST {base_url}/chat/completions`` and time it (TTFT: the first non-empty content)."""
    start = time.perf_counter()
    ttft = math.nan
    chunks = 0
    async with client.stream("POST", f"{base_url}/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        gaps: list[float] = []
        last = 0.0
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            content = openai_content(line)
            if content is None:
                break
            if content:
                chunks += 1
                now = time.perf_counter()
                if math.isnan(ttft):
                    ttft = now - start
                else:
                    gaps.append(now - last)
                last = now
    if math.isnan(ttft):
        raise RuntimeError("stream ended without content")
    return Sample(ttft, time.perf_counter() - start, chunks, gaps)


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


class ServerProcess:
    """A server in a child process on a free loopback port, with a throw-away home.

    Subclasses say how to start it (:meth:`command`, :meth:`environment`) and where it answers 200
    when ready (``ready_path``). The home is its working directory; its output goes to
    ``home/serve.log``. Use as a context manager; :meth:`stop` interrupts it (SIGINT, uvicorn's
    graceful shutdown), then terminates and finally kills it if it does not exit.
    """

    name = "server"
    ready_path = "/health/ready"

    def __init__(self, home: Path, *, start_timeout: float = 60.0) -> None:
        self.home = home
        self.start_timeout = start_timeout
        self.port = 0
        self.url = ""
        self.log_file = home / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The command line serving on ``127.0.0.1:self.port``."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The child's environment."""
        return clean_environ()

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.process.pid

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=self.home,
                env=self.environment(),
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
                    raise RuntimeError(f"{self.name} exited with {code}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}{self.ready_path}").status_code == 200:
                        return self.url
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not become ready in {self.start_timeout:g} s")
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

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClawletProcess(ServerProcess):
    """``clawlet serve`` in a child process (see :class:`ServerProcess`).

    The child gets a clean environment for clawlet's settings: no inherited ``CLAWLET_*`` /
    ``OPENCLAW_*`` / provider keys, the offline demo model, ``CLAWLET_HOME=home``,
    ``OPENCLAW_CONFIG_PATH=openclaw_config`` (default ``home/openclaw.json``), and the home as its
    working directory (so no stray ``.env`` is read); ``env`` is applied last.
    """

    name = "clawlet serve"

    def __init__(
        self,
        home: Path,
        *,
        openclaw_config: Path | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(home, start_timeout=start_timeout)
        self.openclaw_config = openclaw_config or home / "openclaw.json"
        self.extra_env = env or {}

    def command(self) -> list[str]:
        return [sys.executable, "-m", "clawlet", "serve", "--host", "127.0.0.1", "--port", str(self.port)]

    def environment(self) -> dict[str, str]:
        env = clean_environ()
        env.update(
            CLAWLET_HOME=str(self.home),
            OPENCLAW_CONFIG_PATH=str(self.openclaw_config),
            CLAWLET_PROVIDER="demo",
        )
        env.update(self.extra_env)
        return env

"""What clawlet adds to a streamed answer, next to the upstream itself and a LiteLLM proxy.

One run starts, on loopback and fully offline except for LiteLLM's one-time install:

* a scripted OpenAI-compatible upstream (``clawlet.testing.scripted_openai``) in a child process
  (this script with ``--serve-upstream``), whose every answer streams ``--chunks`` text chunks
  (200) with a per-chunk delay that the benchmark sets for each phase (``POST /bench/turn``);
* ``clawlet serve`` in a child process (throw-away ``CLAWLET_HOME``, ``provider=openai`` pointing
  at the upstream), so its CPU time can be read from ``/proc/<pid>/stat``;
* a LiteLLM proxy (``litellm --config … --num_workers 1``, version ``LITELLM_VERSION``) configured
  with the same upstream, from its own virtual environment (``--litellm-venv``, created and filled
  from the package index on first use; ``--no-litellm`` skips it).

The paths, each given the same request:

* **direct**: the upstream's ``/v1/chat/completions`` with the very body clawlet sends it for a
  ``/api/chat`` turn (system prompt, history, tool schemas);
* **litellm**: the proxy's ``/v1/chat/completions`` with that body;
* **clawlet /v1**, **clawlet /api/chat**, **clawlet /api/agent** (the native endpoint) and
  **clawlet chat.send** (the gateway, over one WebSocket): a new session per request, the prompt
  ``PROMPT``;
* **clawlet /api/chat +N turns**: ``/api/chat`` on one session that had ``--history`` turns (50)
  before the run (and gains one a round); sequential only (a session runs one turn at a time).
  Its added TTFT and multiples are against **direct +N turns**: the upstream given the body
  clawlet sent it for that session's last earlier turn (``N`` turns of history in it).

TTFT is the time to the first content (content delta, ``token`` event, ``text_delta`` line, or
``chat`` delta event); total is the time to the end of the answer (``[DONE]``, ``done``,
``result``, the final ``chat`` event). ``/api/chat`` also asks the upstream for a title after
``done``; the stream is read to its end, so that CPU counts, but not in the total.

Two phases:

* **sequential**: ``--iterations`` rounds (after ``--warmup`` unmeasured ones), each round one
  request per path, interleaved (round-robin) so drift hits every path alike; per-chunk delay
  ``--chunk-delay`` (0). CPU per request is the server process's ``utime + stime`` from the start
  of its request to the start of the next one (``/proc`` counts in 10 ms ticks: it is a mean over
  many requests);
* **concurrent**: ``--concurrency`` requests (50) of one path started at once, the paths one after
  the other, per-chunk delay ``--concurrent-delay`` (5 ms) so the wall time against direct's means
  something; CPU per request is the server's CPU over the burst divided by the requests.

It prints, per path and phase: TTFT p50/p99, total p50/p99 (nearest rank), CPU ms per request,
the TTFT added to direct's (p50 and p99), the total p50 as a multiple of direct's, and for the
concurrent phase the wall time (and its multiple of direct's) and errors; and the load average at
start and end. Direct's CPU per request is the upstream's own. The client (asyncio, httpx) runs in
this process for every path alike.

Run from the repository root (``--quick``: under about a minute once LiteLLM is installed)::

    .venv/bin/python bench/compare.py [--quick] [--no-litellm] [--iterations 50] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from breakdown import print_breakdown
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from support import (
    ClawletProcess,
    Sample,
    ServerProcess,
    clean_environ,
    is_title_request,
    load_average,
    measure_openai_stream,
    percentile,
    process_tree_cpu,
)

LITELLM_VERSION = "1.110.2"
# litellm[proxy] also pins its companion packages (litellm-proxy, litellm-proxy-extras,
# litellm-enterprise) to versions a package index may not carry; the proxy runs without them
# (its code ships in litellm; they add the database migrations and enterprise hooks).
LITELLM_SKIPPED = ("litellm-proxy", "litellm-proxy-extras", "litellm-enterprise")
MODEL = "scripted-model"
PROMPT = "Tell me something."
ANSWER = " ".join(f"word{i}" for i in range(400))
REQUEST_TIMEOUT = 120.0
GATEWAY_CONNECT: dict[str, Any] = {
    "minProtocol": 3,
    "maxProtocol": 4,
    "client": {"id": "gateway-client", "version": "1.0.0", "platform": "linux", "mode": "backend"},
    "role": "operator",
    "scopes": ["operator.read", "operator.write"],
}


# -- the upstream ----------------------------------------------------------------------------------


class Upstream:
    """The scripted answers: ``chunks`` content deltas, ``delay`` seconds apart; titles in one.
    Remembers the last agent turn's request body (what clawlet sends)."""

    def __init__(self) -> None:
        self.chunks = 1
        self.delay = 0.0
        self.agent_body: dict[str, Any] | None = None

    def __call__(self, body: dict[str, Any]) -> Turn:
        if is_title_request(body):
            return text_turn("Bench", chunks=1)
        self.agent_body = body
        return text_turn(ANSWER, chunks=self.chunks, delay=self.delay)


def serve_upstream(port: int) -> int:
    """The upstream on ``127.0.0.1:port`` until SIGINT/SIGTERM; ``POST /bench/turn`` sets the
    answers' ``chunks`` and ``delay``, ``GET /bench/agent-body`` returns the last agent turn's body and
    ``GET /bench/errors`` the server's errors."""
    upstream = Upstream()
    server = ScriptedOpenAIServer(upstream, model=MODEL, port=port)

    async def turn(request: Request) -> JSONResponse:
        body = await request.json()
        upstream.chunks, upstream.delay = int(body["chunks"]), float(body["delay"])
        return JSONResponse({"ok": True})

    async def agent_body(request: Request) -> JSONResponse:
        return JSONResponse(upstream.agent_body)

    async def errors(request: Request) -> JSONResponse:
        with server._lock:
            return JSONResponse(list(server.errors))

    server.app.router.routes += [
        Route("/bench/turn", turn, methods=["POST"]),
        Route("/bench/agent-body", agent_body, methods=["GET"]),
        Route("/bench/errors", errors, methods=["GET"]),
    ]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        while not stop.wait(5):
            with server._lock:  # keep memory flat: the recorded bodies are not needed here
                server.requests.clear()
    return 0


class UpstreamProcess(ServerProcess):
    """:func:`serve_upstream` in a child process; :attr:`base_url` ends in ``/v1``."""

    name = "scripted upstream"
    ready_path = "/v1/models"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def command(self) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--serve-upstream", str(self.port)]

    async def set_turn(self, client: httpx.AsyncClient, chunks: int, delay: float) -> None:
        response = await client.post(f"{self.url}/bench/turn", json={"chunks": chunks, "delay": delay})
        response.raise_for_status()

    async def get(self, client: httpx.AsyncClient, what: str) -> Any:
        response = await client.get(f"{self.url}/bench/{what}")
        response.raise_for_status()
        return response.json()


# -- LiteLLM ---------------------------------------------------------------------------------------


class LitellmUnavailable(RuntimeError):
    """LiteLLM's proxy could not be installed or started."""


def default_litellm_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "clawlet" / "bench-litellm"


def _pip(venv: Path, *args: str) -> None:
    command = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise LitellmUnavailable(f"`pip install {' '.join(args)}` failed in {venv}:\n{tail}")


_PROXY_REQUIREMENTS = """
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("litellm") or []:
    req = Requirement(line)
    if req.marker is None or req.name in sys.argv[1:]:
        continue
    if req.marker.evaluate({"extra": "proxy"}) and not req.marker.evaluate({"extra": ""}):
        req.marker = None
        print(req)
"""


def ensure_litellm(venv: Path) -> Path:
    """The ``litellm`` executable of ``venv``, after creating it and installing
    ``litellm==LITELLM_VERSION`` with its ``proxy`` extra's requirements when not done yet."""
    executable = venv / "bin" / "litellm"
    stamp = venv / ".clawlet-bench"
    if executable.exists() and stamp.exists() and stamp.read_text().strip() == LITELLM_VERSION:
        return executable
    print(f"installing LiteLLM {LITELLM_VERSION} (proxy) into {venv} ...", flush=True)
    if not (venv / "bin" / "python").exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise LitellmUnavailable(f"could not create {venv}: {made.stderr.strip()}")
    _pip(venv, f"litellm=={LITELLM_VERSION}", "packaging")
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROXY_REQUIREMENTS, *LITELLM_SKIPPED],
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        raise LitellmUnavailable(f"could not read litellm's proxy requirements: {listed.stderr.strip()}")
    _pip(venv, *listed.stdout.split("\n")[:-1])
    stamp.write_text(LITELLM_VERSION + "\n")
    return executable


class LitellmProcess(ServerProcess):
    """``litellm --config`` (one worker) in a child process, its one model the scripted upstream."""

    name = "litellm proxy"
    ready_path = "/health/liveliness"

    def __init__(self, home: Path, executable: Path, upstream: str) -> None:
        super().__init__(home, start_timeout=120.0)
        self.executable = executable
        self.upstream = upstream
        self.master_key = f"sk-{uuid.uuid4().hex}"

    def command(self) -> list[str]:
        config = {
            "model_list": [
                {
                    "model_name": MODEL,
                    "litellm_params": {
                        "model": f"openai/{MODEL}",
                        "api_base": self.upstream,
                        "api_key": "bench",
                    },
                }
            ],
            "litellm_settings": {"telemetry": False},
        }
        path = self.home / "litellm.json"  # YAML is a superset of JSON
        path.write_text(json.dumps(config))
        return [
            str(self.executable),
            *("--config", str(path), "--host", "127.0.0.1", "--port", str(self.port), "--num_workers", "1"),
        ]

    def environment(self) -> dict[str, str]:
        env = clean_environ()
        env.pop("PYTHONPATH", None)  # its own venv, not this checkout
        env.update(
            LITELLM_MASTER_KEY=self.master_key,  # it refuses to start without one
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_LOG="ERROR",
            NO_DOCS="True",
        )
        return env


# -- the clawlet paths -----------------------------------------------------------------------------


async def measure_api_chat(client: httpx.AsyncClient, url: str, session_id: str | None = None) -> Sample:
    """``POST /api/chat`` (a new session unless ``session_id``): TTFT at the first ``token`` event,
    total at ``done``; read to the end."""
    body = {"message": PROMPT, "session_id": session_id or f"bench-{uuid.uuid4().hex[:12]}"}
    start = time.perf_counter()
    ttft = total = math.nan
    chunks = 0
    async with client.stream("POST", f"{url}/api/chat", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        gaps: list[float] = []
        last = 0.0
        async for line in response.aiter_lines():
            if line == "event: token":
                chunks += 1
                now = time.perf_counter()
                if math.isnan(ttft):
                    ttft = now - start
                else:
                    gaps.append(now - last)
                last = now
            elif line == "event: done":
                total = time.perf_counter() - start
            elif line == "event: error":
                raise RuntimeError("clawlet sent an error event")
    if math.isnan(ttft) or math.isnan(total):
        raise RuntimeError("the stream ended without token/done events")
    return Sample(ttft, total, chunks, gaps)


async def measure_api_agent(client: httpx.AsyncClient, url: str) -> Sample:
    """``POST /api/agent``: TTFT at the first ``text_delta`` line, total at ``result``."""
    start = time.perf_counter()
    ttft = total = math.nan
    chunks = 0
    async with client.stream("POST", f"{url}/api/agent", json={"prompt": PROMPT}) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            kind = json.loads(line[6:]).get("type")
            if kind == "text_delta":
                chunks += 1
                if math.isnan(ttft):
                    ttft = time.perf_counter() - start
            elif kind == "result":
                total = time.perf_counter() - start
            elif kind == "error":
                raise RuntimeError(f"clawlet sent an error line: {line[:300]}")
    if math.isnan(ttft) or math.isnan(total):
        raise RuntimeError("the stream ended without text_delta/result lines")
    return Sample(ttft, total, chunks)


@dataclass
class _Run:
    start: float
    ttft: float = math.nan
    chunks: int = 0
    done: asyncio.Future[float] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Gateway:
    """One gateway WebSocket; ``chat.send`` runs on it timed by their ``chat`` events."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.runs: dict[str, _Run] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> Gateway:
        ws = await connect(url, max_size=None, ping_interval=None, open_timeout=30)
        gateway = cls(ws)
        reply = await asyncio.wait_for(gateway.request("connect", GATEWAY_CONNECT), 30)
        if not reply.get("ok"):
            await gateway.close()
            raise RuntimeError(f"gateway connect refused: {reply}")
        return gateway

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                frame = json.loads(data)
                if frame.get("type") == "res":
                    future = self.replies.pop(str(frame.get("id")), None)
                    if future is not None and not future.done():
                        future.set_result(frame)
                elif frame.get("event") == "chat":
                    self._chat(frame.get("payload") or {})
        except ConnectionClosed:
            pass
        finally:
            lost = ConnectionError("the gateway closed the connection")
            waiting: list[asyncio.Future[Any]] = [*self.replies.values()]
            waiting += [run.done for run in self.runs.values()]
            for future in waiting:
                if not future.done():
                    future.set_exception(lost)

    def _chat(self, payload: dict[str, Any]) -> None:
        run = self.runs.get(str(payload.get("runId")))
        if run is None or run.done.done():
            return
        state = payload.get("state")
        if state == "delta":
            run.chunks += 1
            if math.isnan(run.ttft):
                run.ttft = time.perf_counter() - run.start
        elif state == "final":
            run.done.set_result(time.perf_counter() - run.start)
        else:
            run.done.set_exception(RuntimeError(f"chat {state}: {json.dumps(payload)[:300]}"))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = f"r{next(self.ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.replies[request_id] = future
        await self.ws.send(json.dumps({"type": "req", "id": request_id, "method": method, "params": params}))
        return await future

    async def chat_send(self) -> Sample:
        """One ``chat.send`` to a new session: TTFT at its first delta, total at its final event."""
        run_id = uuid.uuid4().hex
        run = self.runs[run_id] = _Run(time.perf_counter())
        try:
            params = {
                "sessionKey": f"agent:main:bench-{run_id[:12]}",
                "message": PROMPT,
                "idempotencyKey": run_id,
            }
            reply = await self.request("chat.send", params)
            if not reply.get("ok"):
                raise RuntimeError(f"chat.send refused: {reply.get('error')}")
            total = await asyncio.wait_for(run.done, REQUEST_TIMEOUT)
        finally:
            del self.runs[run_id]
        if math.isnan(run.ttft):
            raise RuntimeError("the run ended without a delta")
        return Sample(run.ttft, total, run.chunks)

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


# -- phases ----------------------------------------------------------------------------------------

Measure = Callable[[httpx.AsyncClient], Awaitable[Sample]]


@dataclass
class Target:
    """One way to the same answer, and the server process whose CPU it costs (None: this one)."""

    name: str
    measure: Measure
    pid: int | None
    concurrent: bool = True  # False: one session, one turn at a time
    baseline: str | None = "direct"  # the row its added TTFT and multiples are against (None: it is one)


@dataclass
class Result:
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu: float = 0.0  # server CPU seconds
    requests: int = 0
    wall: float = math.nan
    baseline: str | None = "direct"


def _cpu(pid: int | None) -> float:
    return process_tree_cpu(pid) if pid is not None else 0.0


def _client(connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections + 10, max_keepalive_connections=connections + 10)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(REQUEST_TIMEOUT, pool=REQUEST_TIMEOUT))


async def _one(path: Target, client: httpx.AsyncClient, result: Result | None) -> None:
    try:
        sample = await path.measure(client)
    except Exception as exc:  # counted and shown, the run goes on
        if result is not None:
            result.errors.append(f"{type(exc).__name__}: {exc}")
        return
    if result is not None:
        result.samples.append(sample)


async def sequential(paths: list[Target], rounds: int, warmup: int) -> dict[str, Result]:
    """Round-robin over the paths; a request's CPU runs from its start to the next request's."""
    results = {path.name: Result() for path in paths}
    async with _client(4) as client:
        previous: tuple[Result, int | None, float] | None = None
        for round_index in range(warmup + rounds):
            for path in paths:
                result = results[path.name] if round_index >= warmup else None
                now = _cpu(path.pid)
                if previous is not None:
                    prev_result, prev_pid, prev_cpu = previous
                    prev_result.cpu += _cpu(prev_pid) - prev_cpu
                previous = (result, path.pid, now) if result is not None else None
                await _one(path, client, result)
                if result is not None:
                    result.requests += 1
        if previous is not None:
            prev_result, prev_pid, prev_cpu = previous
            prev_result.cpu += _cpu(prev_pid) - prev_cpu
    return results


async def concurrent(paths: list[Target], count: int) -> dict[str, Result]:
    """Each path's ``count`` requests at once, one path after the other."""
    results: dict[str, Result] = {}
    for path in (path for path in paths if path.concurrent):
        result = results[path.name] = Result(requests=count)
        async with _client(count) as client:
            cpu = _cpu(path.pid)
            start = time.perf_counter()
            await asyncio.gather(*(_one(path, client, result) for _ in range(count)))
            result.wall = time.perf_counter() - start
            result.cpu = _cpu(path.pid) - cpu
    return results


# -- report ----------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def report(title: str, results: dict[str, Result], show_wall: bool) -> None:
    print(f"\n[{title}]")
    header = (
        f"{'path':<28}{'TTFT p50':>9}{'p99':>8}{'total p50':>10}{'p99':>8}{'CPU/req':>9}"
        f"{'+TTFT p50':>10}{'p99':>8}{'total x':>8}"
    )
    print(header + (f"{'wall s':>8}{'wall x':>7}{'gap p99':>8}" if show_wall else "") + f"{'errors':>7}")
    bases = {
        name: {
            "ttft50": percentile([s.ttft for s in result.samples], 50),
            "ttft99": percentile([s.ttft for s in result.samples], 99),
            "total50": percentile([s.total for s in result.samples], 50),
            "wall": result.wall,
        }
        for name, result in results.items()
        if result.baseline is None and result.samples
    }
    for name, result in results.items():
        if not result.samples:
            print(f"{name:<28} no answer: {result.errors[:2]}")
            continue
        ttfts = [s.ttft for s in result.samples]
        totals = [s.total for s in result.samples]
        t50, t99, tot50 = percentile(ttfts, 50), percentile(ttfts, 99), percentile(totals, 50)
        cpu = result.cpu / result.requests if result.requests else math.nan
        base = bases.get(result.baseline) if result.baseline is not None else None
        added = (
            f"{'+' + _ms(t50 - base['ttft50']):>10}{'+' + _ms(t99 - base['ttft99']):>8}"
            f"{tot50 / base['total50']:>7.1f}x"
            if base
            else f"{'':>10}{'':>8}{'':>8}"
        )
        line = (
            f"{name:<28}{_ms(t50):>9}{_ms(t99):>8}{_ms(tot50):>10}{_ms(percentile(totals, 99)):>8}"
            f"{_ms(cpu):>9}{added}"
        )
        if show_wall:
            wall_x = result.wall / base["wall"] if base else math.nan
            line += f"{result.wall:>8.2f}" + (f"{wall_x:>6.2f}x" if not math.isnan(wall_x) else f"{'':>7}")
            gaps = [gap for sample in result.samples for gap in sample.gaps]
            line += f"{_ms(percentile(gaps, 99)) if gaps else '-':>8}"
        print(f"{line}{len(result.errors):>7}")
        for error in result.errors[:2]:
            print(f"  {name} error: {error[:300]}")


# -- main ------------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50, help="measured sequential rounds (50)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured rounds first (5)")
    parser.add_argument("--concurrency", type=int, default=50, help="simultaneous requests per path (50)")
    parser.add_argument("--chunks", type=int, default=200, help="content chunks per answer (200)")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="sequential: seconds between chunks (0)"
    )
    parser.add_argument(
        "--concurrent-delay", type=float, default=0.005, help="concurrent: seconds between chunks (0.005)"
    )
    parser.add_argument(
        "--history",
        type=int,
        default=50,
        help="earlier turns of the session in the '+N turns' row (50; 0: no row)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="8 rounds, 10 at once, 10 earlier turns: about a minute"
    )
    parser.add_argument("--no-litellm", action="store_true", help="leave the LiteLLM proxy out")
    parser.add_argument("--no-gateway", action="store_true", help="leave the gateway's chat.send out")
    parser.add_argument(
        "--litellm-venv", type=Path, default=default_litellm_venv(), help="LiteLLM's own virtual environment"
    )
    parser.add_argument(
        "--engine-workers",
        type=int,
        default=0,
        help="clawlet's CLAWLET_ENGINE_WORKERS (0: turns in the server's process; CPU counts its workers)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TURNS",
        help="then sample clawlet serve (and its workers) with py-spy over TURNS /v1 turns and print "
        "where its CPU goes, by component (0: no profile)",
    )
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.warmup, args.concurrency, args.history = 8, 2, 10, 10
    if min(args.iterations, args.concurrency, args.chunks) < 1 or min(args.warmup, args.history) < 0:
        parser.error("iterations, concurrency and chunks must be >= 1; warmup and history >= 0")
    if min(args.chunk_delay, args.concurrent_delay) < 0:
        parser.error("delays must be >= 0")
    return args


async def bench(
    args: argparse.Namespace,
    llm: UpstreamProcess,
    clawlet: ClawletProcess,
    litellm: LitellmProcess | None,
) -> tuple[dict[str, Result], dict[str, Result], list[str]]:
    async with _client(4) as client:  # the first turn tells which body clawlet sends the upstream
        await llm.set_turn(client, args.chunks, args.chunk_delay)
        await measure_api_chat(client, clawlet.url)
        direct_body: dict[str, Any] = await llm.get(client, "agent-body")
    v1_body = {"model": "clawlet", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    direct = Target("direct", lambda c: measure_openai_stream(c, llm.base_url, direct_body), llm.pid)
    direct.baseline = None
    paths = [direct]
    if litellm is not None:
        body = {**direct_body, "model": MODEL}
        auth = {"Authorization": f"Bearer {litellm.master_key}"}
        paths.append(
            Target(
                "litellm", lambda c: measure_openai_stream(c, f"{litellm.url}/v1", body, auth), litellm.pid
            )
        )
    paths += [
        Target("clawlet /v1", lambda c: measure_openai_stream(c, f"{clawlet.url}/v1", v1_body), clawlet.pid),
        Target("clawlet /api/chat", lambda c: measure_api_chat(c, clawlet.url), clawlet.pid),
    ]
    if args.history:
        session = f"bench-history-{uuid.uuid4().hex[:8]}"
        async with _client(4) as client:
            for _ in range(args.history):
                await measure_api_chat(client, clawlet.url, session)
            history_body: dict[str, Any] = await llm.get(client, "agent-body")
        direct_history = f"direct +{args.history} turns"
        paths += [
            Target(
                direct_history,
                lambda c: measure_openai_stream(c, llm.base_url, history_body),
                llm.pid,
                concurrent=False,
                baseline=None,
            ),
            Target(
                f"clawlet /api/chat +{args.history} turns",
                lambda c: measure_api_chat(c, clawlet.url, session),
                clawlet.pid,
                concurrent=False,
                baseline=direct_history,
            ),
        ]
    paths += [
        Target("clawlet /api/agent", lambda c: measure_api_agent(c, clawlet.url), clawlet.pid),
    ]
    gateway = None if args.no_gateway else await Gateway.open(f"ws://127.0.0.1:{clawlet.port}/gateway")
    try:
        if gateway is not None:
            paths.append(Target("clawlet chat.send", lambda c: gateway.chat_send(), clawlet.pid))
        first = await sequential(paths, args.iterations, args.warmup)
        async with _client(4) as client:
            await llm.set_turn(client, args.chunks, args.concurrent_delay)
        second = await concurrent(paths, args.concurrency)
    finally:
        if gateway is not None:
            await gateway.close()
    if args.profile:
        await profile(args, llm, clawlet, v1_body)
    async with _client(4) as client:
        errors: list[str] = await llm.get(client, "errors")
    for results in (first, second):
        for path in paths:
            if path.name in results:
                results[path.name].baseline = path.baseline
    return first, second, errors


async def profile(args: argparse.Namespace, llm: UpstreamProcess, clawlet: ClawletProcess, body: Any) -> None:
    """py-spy (250 samples a second) on clawlet serve and its workers over ``args.profile``
    sequential ``/v1`` turns with the sequential phase's answers; prints the breakdown."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    raw = Path(tempfile.mkdtemp(prefix="clawlet-profile-")) / "serve.txt"
    command = [
        spy,
        "record",
        "--pid",
        str(clawlet.pid),
        "--rate",
        "250",
        "--format",
        "raw",
        "--full-filenames",
    ]
    recorder = await asyncio.create_subprocess_exec(
        *command, "--subprocesses", "--output", str(raw), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    async with _client(4) as client:
        await llm.set_turn(client, args.chunks, args.chunk_delay)
        for _ in range(args.profile):
            await measure_openai_stream(client, f"{clawlet.url}/v1", body)
    recorder.send_signal(signal.SIGINT)
    _, stderr = await asyncio.wait_for(recorder.communicate(), 60)
    if not raw.exists():
        print(f"py-spy wrote no profile: {stderr.decode(errors='replace').strip()}", file=sys.stderr)
        return
    print_breakdown(raw, f"where clawlet serve's CPU goes over {args.profile} /v1 turns (py-spy, {raw})")


def commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=Path(__file__).parent
    )
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.serve_upstream is not None:
        return serve_upstream(args.serve_upstream)
    load_start = load_average()
    executable = None
    if not args.no_litellm:
        try:
            executable = ensure_litellm(args.litellm_venv)
        except LitellmUnavailable as exc:
            print(f"LiteLLM left out: {exc}\n(run with --no-litellm to skip it)", file=sys.stderr)
            return 2
    with (
        tempfile.TemporaryDirectory(prefix="clawlet-compare-") as tmp,
        UpstreamProcess(Path(tmp) / "upstream") as llm,
    ):
        model_env = {
            "CLAWLET_PROVIDER": "openai",
            "CLAWLET_LLM_BASE_URL": llm.base_url,
            "CLAWLET_LLM_MODEL": MODEL,
            "CLAWLET_LLM_API_KEY": "bench-key",
            "CLAWLET_ENGINE_WORKERS": str(args.engine_workers),
        }
        litellm = LitellmProcess(Path(tmp) / "litellm", executable, llm.base_url) if executable else None
        with ClawletProcess(Path(tmp) / "clawlet", env=model_env) as clawlet:
            try:
                if litellm is not None:
                    litellm.start()
                first, second, upstream_errors = asyncio.run(bench(args, llm, clawlet, litellm))
            finally:
                if litellm is not None:
                    litellm.stop()
    print(
        f"compare: commit {commit()}, {os.cpu_count()} CPUs, {args.chunks} chunks per answer, "
        f"{args.engine_workers} engine workers; "
        f"load average at start {load_start}, at end {load_average()}"
    )
    report(
        f"sequential: {args.iterations} rounds (+{args.warmup} warm-up), interleaved, "
        f"{args.chunk_delay * 1000:g} ms/chunk",
        first,
        show_wall=False,
    )
    report(
        f"concurrent: {args.concurrency} at once per path, {args.concurrent_delay * 1000:g} ms/chunk",
        second,
        show_wall=True,
    )
    print(
        "\ntimes in ms; gap p99: the 99th percentile of the delays between one content chunk and the "
        "next (not measured for /api/agent and chat.send); "
        "CPU/req: the server process's CPU ms per request (direct: the upstream's); "
        "+TTFT: added to direct's; total x, wall x: multiples of direct's; +N turns: one session "
        "with N earlier turns at the start (sequential only), against direct +N turns (the upstream "
        "given the body clawlet sent it for that session's last earlier turn)"
    )
    if upstream_errors:
        print(f"upstream errors: {upstream_errors[:3]}")
    failed = upstream_errors or any(r.errors for r in (*first.values(), *second.values()))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Cluster mode against local mode: round trips per second and the latency a chat turn gains,
with 100 concurrent sessions.

One run starts, on loopback and fully offline, each in OS processes of its own:

* a **scripted OpenAI-compatible LLM server** (``clawlet.testing.scripted_openai``, in a child
  interpreter so that neither clawlet nor the client shares its GIL) whose every answer streams
  ``--chunks`` text chunks with ``--chunk-delay`` seconds between them; title requests get a
  one-chunk answer at once;
* **local**: ``clawlet serve`` (:class:`support.ClawletProcess`), up for the whole run;
* **cluster**, once per ``--users`` count, one after another: ``clawlet control-plane serve`` and one
  ``clawlet exec-plane`` per user (:class:`clawlet.cluster.local_cluster.LocalCluster`, the code of
  ``clawlet cluster``), where every session runs in an OS process of its own on its user's
  execution plane.

Both modes get the same model settings through their environment (``CLAWLET_PROVIDER=openai``,
``CLAWLET_LLM_BASE_URL`` / ``_MODEL`` / ``_API_KEY`` pointing at the scripted server; otherwise a
clean environment, a throw-away home, a temporary working directory): the execution plane uses them
for titles as ``clawlet serve`` does and hands them to its session processes. Both modes make the
same LLM requests (the report counts them and their size), so what differs is clawlet's path.

Every turn is ``POST /api/chat`` with the session's id (cluster mode: with the session's user's API
token), its SSE stream read to the end; asyncio + one ``httpx.AsyncClient`` per phase. In cluster
mode that is the path users' requests take (cluster mode v2): the control plane forwards it through
the tunnel (``http_request`` over ``/ws/vm``) to the user's exec plane, whose API app (local mode's)
runs the turn in a session process and streams the answer back as ``http_body`` frames; the bench
checks after the warm-up that the transcripts are in the exec planes' homes. For each cluster
configuration, next to the running local server:

1. **warm-up**: one session per user, ``--warmup`` turns (not counted; local once per run);
2. **session start**: ``--sessions`` new sessions in each mode (cluster: round-robin over the
   users) send their first turn, ``--start-batch`` at a time (0: all at once). Reported apart: in
   cluster mode this starts each session's OS process;
3. **steady state**: ``--rounds`` rounds per mode, local and cluster alternating (and which goes
   first alternating too), so drift and other load on the machine hit both alike. In a round all
   sessions run at once, each ``--turns`` turns one after another. Reported, pooled over the
   rounds: round trips per second (completed turns / wall time), latency p50/p95/p99 (request to
   the ``done`` event), time to first token p50/p99 (the first ``token`` event) and errors.

Before that, **session process start** (issue 15 §5): ``--start-samples`` session processes started
one after another the exec plane's way (:class:`~clawlet.execplane.session_process.ProcessSessionAdapter`
in this process, on the scripted model), alternately forked from a session template
(:mod:`clawlet.execplane.session_template`) and spawned as fresh interpreters: the time from the
request to the process's ``ready`` (its engine built), its CPU time by then, its first turn, and,
with all of them still running, each one's unshared memory (USS: ``Private_Clean + Private_Dirty``
of ``/proc/<pid>/smaps_rollup``) and proportional share (PSS); template / spawn ratios.

After the cluster runs, the **scale figure** (issue 15; :mod:`cluster_scale`; ``--exec-planes``,
0 skips it; ``--scale-only`` runs nothing else): that many simulated exec planes
(:mod:`clawlet.testing.sim_exec_plane`, in this process) held with heartbeats on two ``clawlet
control-plane serve`` instances sharing one database (and Redis when installed): who stayed
connected, the heartbeat acknowledgement's round trip against 10 planes, memory per connection,
and request routing to the instance holding the user's plane against the other one.

The report: local and cluster side by side, the ratios cluster / local and what cluster mode adds
(cluster − local, ms); the CPU time of every process group per phase (and per turn), of the other
mode (idle meanwhile), and of everything else on the machine; the peak memory of each mode's
processes; the machine's core count.

Run from the repository root (about 10 minutes with the defaults on 2 cores; the scale figure
alone, ``--scale-only``, about 2.5)::

    .venv/bin/python bench/cluster.py [--sessions 100] [--turns 3] [--rounds 3] [--users 1,4]
    .venv/bin/python bench/cluster.py --scale-only [--exec-planes 1000] [--hold-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.config import Settings
from clawlet.engine.context import DEFAULT_CONTEXT
from clawlet.execplane.session_process import (
    ProcessOptions,
    ProcessSessionAdapter,
    SessionProcessError,
    SessionProcessSpec,
)
from clawlet.execplane.session_template import SessionTemplate, template_supported
from clawlet.home import init_home
from clawlet.llm.demo import TITLE_REQUEST_MARKER
from clawlet.runtime.base import RunConfig, UserMessage
from cluster_scale import ScaleResult, raise_fd_limit, run_scale, scale_failed, scale_report
from profiles import enable_profiling, profile_report, request_profiles
from support import ClawletProcess, clean_environ, free_port, percentile, process_cpu, smaps_rollup, uss_bytes

ANSWER_WORDS = 60
PROMPT = "Tell me something."
MODEL = "scripted-model"
TURN_TIMEOUT = 600.0
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


# -- the scripted LLM, in a child process ---------------------------------------------------------


def serve_llm(port: int, chunks: int, delay: float) -> int:
    """The child: a scripted OpenAI-compatible server on ``port`` until SIGTERM/SIGINT, with
    ``GET /stats`` (requests and request-body bytes by kind since the last ``POST /stats/reset``)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
    from clawlet.testing.scripted_openai import Turn as ScriptedTurn

    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
    title = text_turn("Bench", chunks=1)
    stats: dict[str, list[int]] = {}
    lock = threading.Lock()

    def script(body: dict[str, Any]) -> ScriptedTurn:
        messages = body.get("messages") or [{}]
        kind = "title" if TITLE_REQUEST_MARKER in str(messages[0].get("content", "")) else "chat"
        size = len(json.dumps(body, ensure_ascii=False).encode())
        with lock:
            entry = stats.setdefault(kind, [0, 0, 0])
            entry[0] += 1
            entry[1] += size
            entry[2] = max(entry[2], len(messages))
        return title if kind == "title" else text_turn(answer, chunks=chunks, delay=delay)

    async def get_stats(_request: Request) -> JSONResponse:
        with lock:
            return JSONResponse({kind: list(entry) for kind, entry in stats.items()})

    async def reset_stats(_request: Request) -> JSONResponse:
        with lock:
            stats.clear()
        return JSONResponse({})

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = ScriptedOpenAIServer(script, model=MODEL, port=port)
    server.app.router.routes += [
        Route("/stats", get_stats, methods=["GET"]),
        Route("/stats/reset", reset_stats, methods=["POST"]),
    ]
    server.start()
    try:
        while not stop.wait(5):
            with server._lock:  # keep memory flat: the recorded bodies are not needed here
                server.requests.clear()
    finally:
        server.stop()
    return 1 if server.errors else 0


class LLMProcess:
    """``bench/cluster.py --serve-llm`` in a child process; :attr:`base_url` ends in ``/v1``."""

    def __init__(self, workdir: Path, chunks: int, delay: float) -> None:
        self.workdir = workdir
        self.chunks = chunks
        self.delay = delay
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LLMProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve-llm",
            str(self.port),
            "--chunks",
            str(self.chunks),
            "--chunk-delay",
            str(self.delay),
        ]
        with open(self.workdir / "llm.log", "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        with httpx.Client(timeout=2) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the scripted LLM server exited with {self.process.returncode}")
                try:
                    if client.get(f"{self.base_url}/models").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the scripted LLM server did not start")
                time.sleep(0.05)

    def stats(self) -> dict[str, list[int]]:
        """``{kind: [requests, body bytes, most messages]}`` since the last :meth:`reset_stats`."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=10)
        return {str(kind): [int(value) for value in entry] for kind, entry in response.json().items()}

    def reset_stats(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/stats/reset", timeout=10).raise_for_status()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def model_env(llm: LLMProcess) -> dict[str, str]:
    return {
        "CLAWLET_PROVIDER": "openai",
        "CLAWLET_LLM_BASE_URL": llm.base_url,
        "CLAWLET_LLM_MODEL": MODEL,
        "CLAWLET_LLM_API_KEY": "bench-key",
    }


# -- the cluster ------------------------------------------------------------------------------------


# -- processes: memory and CPU from /proc -----------------------------------------------------------


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    started: int  # clock ticks after boot: tells a reused pid apart
    cpu: float  # user + system seconds of the process (all its threads)


def scan_processes() -> dict[int, ProcStat]:
    """Every process in ``/proc`` (kernel threads included)."""
    found: dict[int, ProcStat] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            found[int(entry)] = ProcStat(
                int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / TICKS
            )
        except (OSError, IndexError, ValueError):
            continue
    return found


Roots = list[tuple[str, int, str]]
"""``(group, pid, group of its descendants)`` of the processes a mode runs."""


def process_tree(roots: Roots, processes: dict[int, ProcStat] | None = None) -> dict[int, str]:
    """Every live process under ``roots``: pid → its group."""
    children: dict[int, list[int]] = {}
    for pid, stat in (processes if processes is not None else scan_processes()).items():
        children.setdefault(stat.ppid, []).append(pid)
    found: dict[int, str] = {}
    for group, root, descendants in roots:
        found[root] = group
        stack = list(children.get(root, []))
        while stack:
            pid = stack.pop()
            found[pid] = descendants
            stack.extend(children.get(pid, []))
    return found


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as file:
            return int(file.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores; user, nice, system, irq, steal)."""
    with open("/proc/stat") as file:
        fields = [int(value) for value in file.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / TICKS


MACHINE = "machine (all processes)"
CLIENT = "bench client"
SESSION_PROCESSES = "session processes"
KERNEL = "kernel threads"
OTHERS = "other processes"
CpuSnapshot = dict[tuple[int, int], tuple[str, float]]
"""``(pid, start time) → (group, CPU seconds)``; ``(0, 0)`` is the machine's busy time."""


def cpu_snapshot(roots: Roots) -> CpuSnapshot:
    """The CPU time of every process, grouped: the mode's processes by ``roots``, this process
    (the HTTP client), kernel threads, and other processes (not the benchmark's)."""
    busy = machine_busy()
    processes = scan_processes()
    groups = process_tree(roots, processes)
    me = os.getpid()
    snapshot: CpuSnapshot = {(0, 0): (MACHINE, busy)}
    for pid, stat in processes.items():
        if pid in groups:
            group = groups[pid]
        elif pid == me:
            group = CLIENT
        elif pid == 2 or stat.ppid == 2:
            group = KERNEL
        else:
            group = OTHERS
        snapshot[(pid, stat.started)] = (group, stat.cpu)
    return snapshot


def cpu_diff(after: CpuSnapshot, before: CpuSnapshot) -> dict[str, float]:
    """CPU seconds per group between two snapshots (what a process that exited in between used
    is missed: it shows only in the machine's total)."""
    totals: dict[str, float] = {}
    for key, (group, value) in after.items():
        previous = before.get(key)
        totals[group] = totals.get(group, 0.0) + value - (previous[1] if previous else 0.0)
    return totals


class MemoryWatch:
    """Samples the summed RSS and PSS of the processes under ``roots`` every ``interval`` seconds
    (PSS counts a page shared by n processes as 1/n in each: forked session processes share the
    template's pages, which summed RSS counts once per process)."""

    def __init__(self, roots: Callable[[], Roots], interval: float = 1.0) -> None:
        self.roots = roots
        self.interval = interval
        self.peak = 0
        self.peak_processes = 0
        self.peak_pss = 0
        self.max_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            pids = process_tree(self.roots())
            total = sum(rss_bytes(pid) for pid in pids)
            self.peak_pss = max(self.peak_pss, sum(smaps_rollup(pid).get("Pss", 0) for pid in pids))
            self.max_processes = max(self.max_processes, len(pids))
            if total > self.peak:
                self.peak, self.peak_processes = total, len(pids)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def available_memory() -> int:
    with open("/proc/meminfo") as file:
        for line in file:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# -- session process start: forked from the template against spawned --------------------------------

TEMPLATE, SPAWN = "template", "spawn"


@dataclass
class StartSample:
    ready: float  # request to `ready`, seconds
    cpu: float  # the session process's CPU seconds when ready
    first_turn: float  # its first turn, request to the final event
    uss: int = 0
    pss: int = 0
    rss: int = 0


@dataclass
class StartResult:
    samples: dict[str, list[StartSample]]
    template_ready: float  # the template's own start, to `ready`
    template_cpu: float
    template_uss: int
    template_rss: int
    errors: list[str] = field(default_factory=list)


async def _start_one(
    mode: str, index: int, root: Path, settings: Settings, template: SessionTemplate
) -> tuple[ProcessSessionAdapter, StartSample]:
    spec = SessionProcessSpec(session_dir=root / "sessions" / f"{mode}-{index:03d}", settings=settings)
    adapter = ProcessSessionAdapter(spec, ProcessOptions(), template if mode == TEMPLATE else None)
    began = time.perf_counter()
    await adapter.start(f"{mode}-{index:03d}", RunConfig())
    ready = time.perf_counter() - began
    assert adapter.pid is not None and adapter.forked == (1 if mode == TEMPLATE else 0)
    cpu = process_cpu(adapter.pid)
    began = time.perf_counter()
    try:  # the stream ends when the turn finished; a failed turn raises
        async for _event in adapter.send_message(UserMessage(PROMPT, [], DEFAULT_CONTEXT)):
            pass
    except SessionProcessError as exc:
        raise RuntimeError(f"{mode} session {index}: the first turn failed: {exc}") from exc
    return adapter, StartSample(ready, cpu, time.perf_counter() - began)


async def _measure_starts(root: Path, llm: LLMProcess, count: int) -> StartResult:
    settings = Settings(
        provider="openai",
        llm_base_url=llm.base_url,
        llm_model=MODEL,
        openai_api_key="bench-key",
        home=root / "home",
    )
    init_home(settings.paths)
    template = SessionTemplate(sys.executable, settings.paths.root, root / "session-template.log")
    began = time.perf_counter()
    template.start()
    if not await template.wait_ready(120):
        raise RuntimeError(f"the session template did not start (see {root / 'session-template.log'})")
    assert template.pid is not None
    result = StartResult(
        {TEMPLATE: [], SPAWN: []},
        time.perf_counter() - began,
        process_cpu(template.pid),
        uss_bytes(template.pid),
        rss_bytes(template.pid),
    )
    adapters: list[tuple[str, ProcessSessionAdapter, StartSample]] = []
    try:
        for index in range(count):
            for mode in (TEMPLATE, SPAWN) if index % 2 == 0 else (SPAWN, TEMPLATE):
                try:
                    adapter, sample = await _start_one(mode, index, root, settings, template)
                except Exception as exc:
                    result.errors.append(f"{mode} {index}: {type(exc).__name__}: {exc}")
                    continue
                adapters.append((mode, adapter, sample))
                result.samples[mode].append(sample)
        for _mode, adapter, sample in adapters:  # all running: the template's pages are shared
            assert adapter.pid is not None
            rollup = smaps_rollup(adapter.pid)
            sample.uss = rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)
            sample.pss, sample.rss = rollup.get("Pss", 0), rollup.get("Rss", 0)
    finally:
        await asyncio.gather(*(adapter.stop() for _mode, adapter, _sample in adapters))
        await template.close()
    return result


def measure_session_starts(tmp: Path, llm: LLMProcess, count: int) -> StartResult:
    """In this process, with the model settings in its environment as an exec plane has them (the
    template warms that model up; the API key is never handed on)."""
    saved = dict(os.environ)
    os.environ.update(model_env(llm))
    try:
        return asyncio.run(_measure_starts(tmp / "session-starts", llm, count))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def start_report(result: StartResult, count: int) -> None:
    print(
        f"\n=== session process start: {count} forked from the session template and {count} spawned, "
        "one after another (alternating), each then running one turn; memory with all of them running"
    )
    print(
        f"{'mode':<10}{'n':>4}{'ready p50':>11}{'p90':>9}{'max':>9}{'CPU-s p50':>11}{'1st turn p50':>14}"
        f"{'USS p50':>10}{'PSS p50':>10}{'RSS p50':>10}"
    )
    mib = 2**20
    medians: dict[str, dict[str, float]] = {}
    for mode in (TEMPLATE, SPAWN):
        samples = result.samples[mode]
        if not samples:
            continue

        def med(values: list[float]) -> float:
            return percentile(values, 50)

        row = {
            "ready": med([s.ready for s in samples]),
            "cpu": med([s.cpu for s in samples]),
            "turn": med([s.first_turn for s in samples]),
            "uss": med([float(s.uss) for s in samples]),
            "pss": med([float(s.pss) for s in samples]),
            "rss": med([float(s.rss) for s in samples]),
        }
        medians[mode] = row
        print(
            f"{mode:<10}{len(samples):>4}{ms(row['ready']):>11}"
            f"{ms(percentile([s.ready for s in samples], 90)):>9}{ms(max(s.ready for s in samples)):>9}"
            f"{row['cpu']:>11.3f}{ms(row['turn']):>14}{row['uss'] / mib:>10.1f}{row['pss'] / mib:>10.1f}"
            f"{row['rss'] / mib:>10.1f}"
        )
    print("(ms; memory in MiB: USS = Private_Clean + Private_Dirty, PSS, RSS from /proc/<pid>/smaps_rollup)")
    if TEMPLATE in medians and SPAWN in medians:
        t, s = medians[TEMPLATE], medians[SPAWN]
        print(
            f"  ratio template / spawn (p50): ready {ratio(t['ready'], s['ready'])}, CPU "
            f"{ratio(t['cpu'], s['cpu'])}, first turn {ratio(t['turn'], s['turn'])}, USS "
            f"{ratio(t['uss'], s['uss'])}, PSS {ratio(t['pss'], s['pss'])}"
        )
    print(
        f"  the template itself: ready {result.template_ready:.2f} s after its start, "
        f"{result.template_cpu:.2f} CPU-s, USS {result.template_uss / mib:.0f} MiB, RSS "
        f"{result.template_rss / mib:.0f} MiB (once per exec plane; its pages are what the forks share)"
    )
    for error in result.errors[:5]:
        print(f"  error: {error}")


# -- the workload -----------------------------------------------------------------------------------


@dataclass
class TurnSample:
    latency: float
    ttft: float


@dataclass
class Phase:
    """The turns of one phase (or of several rounds, pooled), its errors, wall time, the CPU time
    per process group and the LLM requests."""

    turns: list[TurnSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    llm: dict[str, list[int]] = field(default_factory=dict)
    round_rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return len(self.turns) / self.wall if self.wall > 0 else math.nan

    def pct(self, attr: str, pct: float) -> float:
        values = [getattr(turn, attr) for turn in self.turns]
        return percentile(values, pct) if values else math.nan

    def add(self, other: Phase) -> None:
        """Pool another round into this one."""
        self.turns += other.turns
        self.errors += other.errors
        self.wall += other.wall
        for name, value in other.cpu.items():
            self.cpu[name] = self.cpu.get(name, 0.0) + value
        for kind, (count, size, most) in other.llm.items():
            entry = self.llm.setdefault(kind, [0, 0, 0])
            entry[0] += count
            entry[1] += size
            entry[2] = max(entry[2], most)
        self.round_rates.append(other.rate)


@dataclass
class Target:
    """One mode's HTTP endpoint, its users' tokens (``None``: no auth) and its processes."""

    name: str
    url: str
    tokens: list[str | None]
    roots: Callable[[], Roots]


@dataclass
class Result:
    """One cluster configuration against the local baseline measured next to it."""

    users: int
    local_start: Phase
    cluster_start: Phase
    local: Phase
    cluster: Phase
    cluster_name: str
    cluster_peak_rss: int = 0
    cluster_peak_processes: int = 0
    cluster_peak_pss: int = 0


async def chat_turn(client: httpx.AsyncClient, url: str, session_id: str, token: str | None) -> TurnSample:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"message": PROMPT, "session_id": session_id}
    start = time.perf_counter()
    ttft = latency = math.nan
    error = ""
    event = ""
    async with client.stream("POST", f"{url}/api/chat", json=body, headers=headers) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            raise RuntimeError(f"HTTP {response.status_code}: {text[:200]}")
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if event == "token" and math.isnan(ttft):
                    ttft = time.perf_counter() - start
                elif event == "done":
                    latency = time.perf_counter() - start
            elif line.startswith("data: ") and event == "error" and not error:
                error = line[6:300]
        # read to the end (the title follows `done` on a session's first turn): turns never overlap
    if error:
        raise RuntimeError(f"error event: {error}")
    if math.isnan(latency) or math.isnan(ttft):
        raise RuntimeError("the stream ended without token/done events")
    return TurnSample(latency, ttft)


async def session_turns(
    client: httpx.AsyncClient, url: str, session_id: str, token: str | None, count: int, phase: Phase
) -> None:
    for _ in range(count):
        try:
            phase.turns.append(await chat_turn(client, url, session_id, token))
        except Exception as exc:
            phase.errors.append(f"{session_id}: {type(exc).__name__}: {exc}")


async def _drive(target: Target, sessions: list[str], turns: int, batch: int, phase: Phase) -> None:
    # idle connections are dropped after 1 s, before uvicorn's 5 s keep-alive timeout closes them from
    # the other side (a request sent on a connection the server is just closing fails with ReadError)
    limits = httpx.Limits(
        max_connections=len(sessions) + 20,
        max_keepalive_connections=len(sessions) + 20,
        keepalive_expiry=1.0,
    )
    timeout = httpx.Timeout(TURN_TIMEOUT, connect=60, pool=TURN_TIMEOUT)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        await client.get(f"{target.url}/health")  # one connection open before the clock starts
        began = time.perf_counter()
        size = batch or len(sessions)
        for first in range(0, len(sessions), size):
            await asyncio.gather(
                *(
                    session_turns(
                        client, target.url, session, target.tokens[index % len(target.tokens)], turns, phase
                    )
                    for index, session in enumerate(sessions[first : first + size], start=first)
                )
            )
        phase.wall = time.perf_counter() - began


def run_phase(
    llm: LLMProcess,
    target: Target,
    idle: Target | None,
    sessions: list[str],
    turns: int,
    batch: int = 0,
) -> Phase:
    """``sessions`` (at once, or ``batch`` at a time), each ``turns`` turns in a row, against
    ``target``; ``idle``'s processes (the other mode, up but not driven) are counted apart."""

    def roots() -> Roots:
        found = [*target.roots(), ("llm server", llm_pid(llm), "llm server")]
        if idle is not None:
            found += [(f"{IDLE}{group}", pid, f"{IDLE}{children}") for group, pid, children in idle.roots()]
        return found

    phase = Phase()
    llm.reset_stats()
    before = cpu_snapshot(roots())
    asyncio.run(_drive(target, sessions, turns, batch, phase))
    phase.cpu = cpu_diff(cpu_snapshot(roots()), before)
    phase.llm = llm.stats()
    return phase


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def llm_pid(llm: LLMProcess) -> int:
    assert llm.process is not None
    return llm.process.pid


IDLE = "idle: "


# -- one configuration: a cluster next to the local server ------------------------------------------


def check_exec_plane_path(data_dir: Path, names: list[str], label: str) -> None:
    """The cluster's turns took the path users' requests take (cluster mode v2): HTTP to the control
    plane, the tunnel, the user's exec plane's API app, which keeps the transcript in the exec plane's
    home; the control plane keeps no copy of it (it did, in a home per user, before the tunnel).
    Checked on the warm-up sessions."""
    for index, name in enumerate(names):
        transcript = data_dir / "exec-planes" / name / "home" / "sessions" / f"warm-{index}.json"
        if not transcript.is_file():
            raise RuntimeError(
                f"{label}: no transcript of warm-{index} in {name}'s exec plane ({transcript})"
            )
        old_copy = data_dir / "control-plane" / "users" / name / "home" / "sessions" / f"warm-{index}.json"
        if old_copy.exists():
            raise RuntimeError(f"{label}: the control plane ran warm-{index} itself ({old_copy})")
    progress(
        f"{label}: the warm-up turns ran on the exec planes (their transcripts are in the exec planes' homes)"
    )


def run_config(tmp: Path, llm: LLMProcess, local: Target, users: int, args: argparse.Namespace) -> Result:
    """Start a cluster with ``users`` users, then measure it and the (running) local server side by
    side: session start of fresh sessions in each, then ``--rounds`` steady-state rounds, local and
    cluster alternating (the first of each pair alternates too), so that drift and other load on
    the machine hit both alike."""
    names = [f"user{index + 1}" for index in range(users)]
    data_dir = tmp / f"cluster-{users}"
    env = {**model_env(llm), "CLAWLET_HOME": str(data_dir / "home")}
    if args.no_session_template:
        env["CLAWLET_SESSION_TEMPLATE"] = "false"
    # a clean environment (only ``env`` of clawlet's settings) and the data directory as working
    # directory, so no stray ``.env`` is read
    cluster = LocalCluster(
        data_dir, names, free_port(), base_env={**clean_environ(), **env}, workdir=data_dir
    )
    label = f"cluster ({users} user{'s' if users > 1 else ''})"
    started = time.perf_counter()
    try:
        cluster.start()
        progress(
            f"{label}: control plane + {users} exec plane(s) ready in {time.perf_counter() - started:.1f} s"
        )

        def cluster_roots() -> Roots:
            return [
                ("control plane", process.pid, "control plane children")
                if name == "control-plane"
                else ("exec plane", process.pid, SESSION_PROCESSES)
                for name, process in cluster.processes.items()
            ]

        with MemoryWatch(cluster_roots) as memory:
            target = Target(label, cluster.base_url, list(cluster.tokens.values()), cluster_roots)
            warm = run_phase(
                llm, target, local, [f"warm-{index}" for index in range(users)], max(1, args.warmup)
            )
            if warm.errors:
                raise RuntimeError(f"{label}: warm-up failed: {warm.errors[:3]}")
            check_exec_plane_path(data_dir, names, label)
            local_sessions = [f"local{users}-{index:04d}" for index in range(args.sessions)]
            cluster_sessions = [f"bench-{index:04d}" for index in range(args.sessions)]
            local_start = run_phase(llm, local, target, local_sessions, 1, args.start_batch)
            progress(f"local: {args.sessions} sessions started in {local_start.wall:.1f} s")
            cluster_start = run_phase(llm, target, local, cluster_sessions, 1, args.start_batch)
            progress(
                f"{label}: {args.sessions} sessions started in {cluster_start.wall:.1f} s, "
                f"{len(cluster_start.errors)} errors"
            )
            local_steady, cluster_steady = Phase(), Phase()
            for number in range(args.rounds):
                order = [(local, local_sessions, target, local_steady)]
                order.append((target, cluster_sessions, local, cluster_steady))
                if number % 2:
                    order.reverse()
                for active, sessions, idle, pooled in order:
                    phase = run_phase(llm, active, idle, sessions, args.turns)
                    pooled.add(phase)
                    progress(
                        f"round {number + 1}/{args.rounds} {active.name}: {len(phase.turns)} turns in "
                        f"{phase.wall:.1f} s, {len(phase.errors)} errors"
                    )
            cluster.check_alive()
    except Exception:
        logs = data_dir / "logs"
        for log in sorted(logs.glob("*.log")) if logs.exists() else []:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            print(f"--- {log.name} (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        if args.profile is not None:
            request_profiles(args.profile, [p.pid for p in cluster.processes.values() if p.poll() is None])
        cluster.stop()
    return Result(
        users,
        local_start,
        cluster_start,
        local_steady,
        cluster_steady,
        label,
        memory.peak,
        memory.peak_processes,
        memory.peak_pss,
    )


# -- the report -------------------------------------------------------------------------------------


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:.1f}"


def signed_ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:+.1f} ms"


def ratio(a: float, b: float) -> str:
    return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


def phase_table(rows: list[tuple[str, Phase]]) -> None:
    print(
        f"{'mode':<20}{'turns':>6}{'errors':>7}{'wall s':>8}{'RT/s':>8}{'p50':>9}{'p95':>9}{'p99':>9}"
        f"{'TTFT p50':>10}{'TTFT p99':>10}"
    )
    for name, phase in rows:
        print(
            f"{name:<20}{len(phase.turns):>6}{len(phase.errors):>7}{phase.wall:>8.1f}"
            f"{phase.rate:>8.2f}{ms(phase.pct('latency', 50)):>9}{ms(phase.pct('latency', 95)):>9}"
            f"{ms(phase.pct('latency', 99)):>9}{ms(phase.pct('ttft', 50)):>10}{ms(phase.pct('ttft', 99)):>10}"
        )


def compare(name: str, local: Phase, other: Phase) -> None:
    parts = [f"RT/s {ratio(other.rate, local.rate)}"]
    for attr, pct, label in (
        ("latency", 50, "p50"),
        ("latency", 95, "p95"),
        ("latency", 99, "p99"),
        ("ttft", 50, "TTFT p50"),
        ("ttft", 99, "TTFT p99"),
    ):
        x, y = local.pct(attr, pct), other.pct(attr, pct)
        parts.append(f"{label} {ratio(y, x)} ({signed_ms(y - x)})")
    print(f"  {name} / local: " + ", ".join(parts))


def cpu_line(name: str, phase: Phase) -> None:
    """CPU seconds per process group (and per completed turn), then what the rest of the machine
    did meanwhile: other processes, kernel threads, and processes that exited before the phase
    ended (only in the machine's total)."""
    cores = os.cpu_count() or 1
    turns = max(1, len(phase.turns))
    apart = (MACHINE, KERNEL, OTHERS)
    ours = {group: value for group, value in phase.cpu.items() if group not in apart}
    active = ", ".join(
        f"{group} {value:.1f} s ({value / turns * 1000:.0f} ms/turn)"
        for group, value in sorted(ours.items(), key=lambda item: -item[1])
        if value >= 0.05 and not group.startswith(IDLE)
    )
    idle = sum(value for group, value in ours.items() if group.startswith(IDLE))
    machine = phase.cpu.get(MACHINE, math.nan)
    unaccounted = machine - sum(value for group, value in phase.cpu.items() if group != MACHINE)
    print(f"  {name}: {active}")
    print(
        f"    the other mode, idle: {idle:.1f} s; machine busy {machine:.1f} of "
        f"{phase.wall * cores:.1f} CPU-s ({machine / (phase.wall * cores) * 100:.0f}%); outside the "
        f"benchmark: other processes {phase.cpu.get(OTHERS, 0.0):.1f} s, kernel threads "
        f"{phase.cpu.get(KERNEL, 0.0):.1f} s, exited processes / unaccounted {max(0.0, unaccounted):.1f} s"
    )


def requests_line(name: str, phase: Phase) -> str:
    shown = ", ".join(
        f"{kind} {count} × {size / max(1, count) / 1024:.1f} KiB (≤ {most} messages)"
        for kind, (count, size, most) in sorted(phase.llm.items())
    )
    return f"{name}: {shown or 'none'}"


def report(
    results: list[Result], local_memory: MemoryWatch, args: argparse.Namespace, elapsed: float
) -> None:
    batches = (
        "all at once"
        if not args.start_batch or args.start_batch >= args.sessions
        else f"in batches of {args.start_batch} (a batch's first turns at once, then the next batch)"
    )
    print(
        f"\ncluster vs local: {args.sessions} concurrent sessions, {args.rounds} rounds × {args.turns} turns "
        f"each (after a first turn; warm-up {args.warmup} turns per user not counted), {args.chunks} "
        f"chunks per answer, {args.chunk_delay * 1000:g} ms between chunks; {os.cpu_count()} CPU cores, "
        f"{available_memory() / 2**30:.1f} GiB available now; load average at the start "
        f"{args.load_at_start}; run took {elapsed:.0f} s"
    )
    for result in results:
        name = result.cluster_name
        print(
            f"\n=== {name} next to local. [steady state] {args.sessions} sessions at once, each "
            f"{args.turns} turns in a row per round; {args.rounds} rounds, local and cluster alternating "
            "(latency: request to `done`, TTFT: to the first `token`; ms)"
        )
        phase_table([("local", result.local), (name, result.cluster)])
        compare(name, result.local, result.cluster)
        rates = "; ".join(
            f"{label} " + ", ".join(f"{rate:.1f}" for rate in phase.round_rates)
            for label, phase in (("local", result.local), (name, result.cluster))
        )
        print(f"  RT/s per round: {rates}")
        if result.cluster_start.errors:
            print(
                f"  NOTE: {len(result.cluster_start.errors)} of {args.sessions} cluster sessions failed "
                "their first turn, so the figures above include starting them again (errors below)"
            )
        print(f"[session start] each session's first turn (a new session), {batches}")
        phase_table([("local", result.local_start), (name, result.cluster_start)])
        compare(name, result.local_start, result.cluster_start)
        started = result.cluster_start.cpu.get(SESSION_PROCESSES, 0.0)
        if result.cluster_start.errors:
            print(
                f"  NOTE: {len(result.cluster_start.errors)} first turns failed. Each first turn starts "
                "an OS process for the session on the execution plane, which gives it 60 s to be ready "
                "(ProcessOptions.start_timeout); spawned without the session template one takes over "
                "a CPU-second (importing LangChain/LangGraph, building the engine), so on this machine "
                "only so many can start at once: use --start-batch or fewer --sessions"
            )
        elif started:
            print(
                f"  session processes used {started / args.sessions:.2f} CPU-s each in this phase "
                f"(starting, and the first turn; {started:.1f} CPU-s for {args.sessions})"
            )
        print("[CPU time per process group, steady state, all rounds]")
        cpu_line("local", result.local)
        cpu_line(name, result.cluster)
        print("[CPU time per process group, session start]")
        cpu_line("local", result.local_start)
        cpu_line(name, result.cluster_start)
        print("[LLM requests] requests × mean body (most messages in one), steady state; session start")
        for label, steady, start in (
            ("local", result.local, result.local_start),
            (name, result.cluster, result.cluster_start),
        ):
            print(f"  {requests_line(label, steady)}; {requests_line('start', start)}")
        print(
            f"[memory] peak RSS summed over the mode's processes: {name} "
            f"{result.cluster_peak_rss / 2**20:.0f} MiB over {result.cluster_peak_processes} processes; "
            f"peak PSS summed {result.cluster_peak_pss / 2**20:.0f} MiB (shared pages counted once)"
        )
        for label, phase in (
            ("local start", result.local_start),
            ("cluster start", result.cluster_start),
            ("local", result.local),
            ("cluster", result.cluster),
        ):
            for error in phase.errors[:3]:
                print(f"  {label} error: {error}")
    print(
        f"\n[memory] local (clawlet serve): peak {local_memory.peak / 2**20:.0f} MiB; "
        "the LLM server and the client are not included anywhere"
    )


def parse_users(raw: str) -> list[int]:
    try:
        counts = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {raw!r}") from None
    if not counts or any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError("user counts must be >= 1")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100, help="concurrent sessions (100)")
    parser.add_argument("--turns", type=int, default=3, help="turns per session in each round (3)")
    parser.add_argument("--rounds", type=int, default=3, help="steady-state rounds per mode (3)")
    parser.add_argument(
        "--users",
        type=parse_users,
        default=[1, 4],
        help="cluster configurations by number of users, comma-separated (1,4: one user, then 4)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="warm-up turns per user, not counted (2)")
    parser.add_argument(
        "--start-batch",
        type=int,
        default=20,
        help="start the sessions in batches of this many (20; 0: all at once — see bench/README.md)",
    )
    parser.add_argument("--chunks", type=int, default=20, help="text chunks per scripted answer (20)")
    parser.add_argument("--chunk-delay", type=float, default=0.004, help="seconds between chunks (0.004)")
    parser.add_argument(
        "--start-samples",
        type=int,
        default=20,
        help="session processes started each way (forked from the template, spawned) for the session "
        "start figures (20; 0: skip)",
    )
    parser.add_argument(
        "--no-session-template",
        action="store_true",
        help="the cluster's exec planes spawn every session process (CLAWLET_SESSION_TEMPLATE=false)",
    )
    parser.add_argument(
        "--exec-planes",
        type=int,
        default=1000,
        help="simulated exec planes of the scale figure, on two control-plane instances (1000; 0: skip)",
    )
    parser.add_argument(
        "--hold-seconds", type=float, default=60.0, help="how long the scale figure holds them all (60)"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=10.0, help="each simulated plane's heartbeat interval (10)"
    )
    parser.add_argument(
        "--routing-requests",
        type=int,
        default=100,
        help="GET /api/sessions per instance for the scale figure's routing p50/p99 (100)",
    )
    parser.add_argument("--scale-only", action="store_true", help="only the scale figure")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="cProfile every clawlet server process (serve, control plane, exec planes, session processes) "
        "into this directory and print each role's top functions at the end (slows them down)",
    )
    parser.add_argument("--serve-llm", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_llm:
        return serve_llm(args.serve_llm, args.chunks, args.chunk_delay)
    if args.exec_planes < 0 or (args.scale_only and args.exec_planes < 1):
        parser.error("exec-planes must be >= 0 (>= 1 with --scale-only)")
    if args.hold_seconds <= 0 or args.heartbeat_seconds <= 0 or args.routing_requests < 1:
        parser.error("hold-seconds and heartbeat-seconds must be > 0, routing-requests >= 1")
    # 1,000 WebSockets here, and as many among the control-plane instances, which inherit the limit
    raise_fd_limit()
    if args.scale_only:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with tempfile.TemporaryDirectory(prefix="clawlet-bench-scale-") as raw_tmp:
            scaled = run_scale(Path(raw_tmp), args)
        scale_report(scaled)
        return 1 if scale_failed(scaled) else 0
    if min(args.sessions, args.turns, args.rounds, args.chunks, args.warmup) < 1:
        parser.error("sessions, turns, rounds, chunks and warmup must be >= 1")
    if args.start_batch < 0 or args.chunk_delay < 0 or args.start_samples < 0:
        parser.error("start-batch, start-samples and chunk-delay must be >= 0")
    if args.start_samples and not template_supported():
        parser.error("the session template needs Linux: use --start-samples 0")
    # a plain `kill` also stops the servers (the finally blocks run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if args.profile is not None:
        enable_profiling(args.profile)
    args.load_at_start = " ".join(f"{value:.1f}" for value in os.getloadavg())
    began = time.perf_counter()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="clawlet-bench-cluster-") as raw_tmp:
        tmp = Path(raw_tmp)
        with LLMProcess(tmp / "llm", args.chunks, args.chunk_delay) as llm:
            starts = measure_session_starts(tmp, llm, args.start_samples) if args.start_samples else None
            server = ClawletProcess(tmp / "local-home", env=model_env(llm))
            try:
                url = server.start()
                assert server.process is not None
                serve_roots: Roots = [("clawlet serve", server.process.pid, "clawlet serve children")]
                with MemoryWatch(lambda: serve_roots) as local_memory:
                    local = Target("local", url, [None], lambda: serve_roots)
                    warm = run_phase(llm, local, None, ["warm-local"], args.warmup)
                    if warm.errors:
                        raise RuntimeError(f"local: warm-up failed: {warm.errors[:3]}")
                    for users in args.users:
                        results.append(run_config(tmp, llm, local, users, args))
            except Exception:
                print(f"--- clawlet serve log (tail) ---\n{server.log_tail()}", file=sys.stderr)
                raise
            finally:
                server.stop()
        scaled: ScaleResult | None = run_scale(tmp, args) if args.exec_planes else None
    report(results, local_memory, args, time.perf_counter() - began)
    if starts is not None:
        start_report(starts, args.start_samples)
    if scaled is not None:
        scale_report(scaled)
    if args.profile is not None:
        profile_report(args.profile)
    failed = (
        bool(starts and starts.errors)
        or bool(scaled and scale_failed(scaled))
        or any(
            phase.errors
            for result in results
            for phase in (result.local_start, result.cluster_start, result.local, result.cluster)
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted (servers stopped)", file=sys.stderr)
        raise SystemExit(130) from None

"""Start and size: how soon ``clawlet serve`` answers ``/health/ready`` and how much memory it holds.

One run starts, interleaved, ``--runs`` times each (after one unmeasured start of each, which also
writes the bytecode caches):

* ``bare python``: the interpreter printing its own peak RSS (its time to exit, its CPU);
* ``uvicorn hello``: a bare uvicorn serving a 12-line ASGI app that answers 200 to every path (the
  floor any Python web server pays);
* ``clawlet serve``: a throw-away ``CLAWLET_HOME`` (a new one each start, so the home is seeded and
  the inbox database migrated every time, as on a first start), the offline demo model.

For the servers it polls ``GET /health/ready`` every 20 ms from the moment of ``exec`` and reports
the time to the first 200 (**ready**), the CPU seconds the server used until then (user + system,
from ``/proc``: steadier than the wall time on a shared machine) and, ``--settle`` seconds later with
no request in between, its ``VmRSS`` (**idle RSS**); then clawlet's first chat turn, timed to its
first token (what the imports left to the first request cost). Medians and ranges over the runs, and
the ratios of clawlet to the bare uvicorn.

Then (unless ``--turns 0``) one more ``clawlet serve`` answers ``--turns`` simultaneous chat turns
(``POST /api/chat``, a new session each, the demo model streaming its answer) and the script reports
its ``VmRSS`` when all have finished, its peak (``VmHWM``), and how many turns failed.

With ``--compare-src DIR`` (another checkout's ``src``, e.g. main's) that checkout's
``clawlet serve`` runs too, interleaved with this one's, in every measurement: a before/after in one run.

Run from the repository root (a few minutes with the defaults)::

    .venv/bin/python bench/startup.py [--runs 5] [--settle 2] [--turns 500] [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from support import clean_environ, free_port, process_cpu

POLL_SECONDS = 0.02
START_TIMEOUT = 60.0
TURN_TIMEOUT = 600.0

HELLO_APP = """
import sys
import uvicorn


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@dataclass
class Start:
    ready: float
    """Seconds from exec to the first 200 (for the bare python: to its exit)."""
    cpu: float
    """CPU seconds the process used until then."""
    rss_mb: float
    """VmRSS after ``--settle`` seconds (for the bare python: its peak RSS)."""
    first_turn: float = 0.0
    """clawlet: seconds from the first chat turn's request to its first ``token`` event (after the
    RSS was read): what the imports left for the first turn cost."""


def status_kb(pid: int, field: str) -> int:
    """A ``kB`` line of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def child_env(home: Path, src: Path | None = None) -> dict[str, str]:
    """The children's environment: clean clawlet settings, the demo model, ``src`` (default: this
    checkout's) first on ``PYTHONPATH``."""
    env = clean_environ()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed clawlet has its bytecode cached
    env.update(CLAWLET_HOME=str(home), OPENCLAW_CONFIG_PATH=str(home / "openclaw.json"))
    env["CLAWLET_PROVIDER"] = "demo"
    return env


BARE_PYTHON = (
    "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))"
)


def start_bare_python(root: Path, settle: float) -> Start:
    """The bare interpreter: its time to exit, its CPU (``wait4``) and its own peak RSS (``VmHWM``,
    printed: a child's ``ru_maxrss`` also counts the parent it was forked from)."""
    started = time.perf_counter()
    command = [sys.executable, "-c", BARE_PYTHON]
    process = subprocess.Popen(command, env=child_env(root), stdout=subprocess.PIPE)
    assert process.stdout is not None
    peak_kb = int(process.stdout.read())
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0  # reaped above
    return Start(time.perf_counter() - started, usage.ru_utime + usage.ru_stime, peak_kb / 1024)


def wait_ready(process: subprocess.Popen[bytes], url: str, started: float) -> tuple[float, float]:
    """Poll ``url`` every 20 ms; the seconds from ``started`` to its first 200 and the CPU used by then."""
    with httpx.Client(timeout=2) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode} before it was ready")
            try:
                if client.get(url).status_code == 200:
                    return time.perf_counter() - started, process_cpu(process.pid)
            except httpx.HTTPError:
                pass
            if time.perf_counter() - started > START_TIMEOUT:
                raise RuntimeError(f"not ready after {START_TIMEOUT:g} s")
            time.sleep(POLL_SECONDS)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def spawn(command: list[str], home: Path, src: Path | None = None) -> tuple[subprocess.Popen[bytes], float]:
    home.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=home,
        env=child_env(home, src),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, started


def start_server(
    command: list[str], port: int, home: Path, settle: float, src: Path | None = None, *, chat: bool = False
) -> Start:
    process, started = spawn(command, home, src)
    try:
        ready, cpu = wait_ready(process, f"http://127.0.0.1:{port}/health/ready", started)
        time.sleep(settle)  # idle: nothing but the server's own background work
        result = Start(ready, cpu, status_kb(process.pid, "VmRSS") / 1024)
        if chat:
            result.first_turn = first_token(f"http://127.0.0.1:{port}")
        return result
    finally:
        stop(process)


def first_token(url: str) -> float:
    """Seconds from a chat turn's request to its first ``token`` event."""
    body = {"message": "Tell me something.", "session_id": f"bench-{uuid.uuid4().hex[:12]}"}
    started = time.perf_counter()
    with (
        httpx.Client(timeout=TURN_TIMEOUT) as client,
        client.stream("POST", f"{url}/api/chat", json=body) as response,
    ):
        for line in response.iter_lines():
            if line == "event: token":
                return time.perf_counter() - started
    raise RuntimeError("the first turn streamed no token")


def clawlet_command(port: int) -> list[str]:
    return [sys.executable, "-m", "clawlet", "serve", "--host", "127.0.0.1", "--port", str(port)]


def start_clawlet(root: Path, settle: float, src: Path | None = None) -> Start:
    port = free_port()
    home = root / f"home-{uuid.uuid4().hex[:8]}"
    return start_server(clawlet_command(port), port, home, settle, src, chat=True)


def start_hello(root: Path, settle: float) -> Start:
    script = root / "hello_app.py"
    script.write_text(HELLO_APP)
    port = free_port()
    return start_server([sys.executable, str(script), str(port)], port, root, settle)


async def one_turn(client: httpx.AsyncClient, url: str) -> bool:
    body = {"message": "Tell me something.", "session_id": f"bench-{uuid.uuid4().hex[:12]}"}
    done = False
    async with client.stream("POST", f"{url}/api/chat", json=body) as response:
        if response.status_code != 200:
            return False
        async for line in response.aiter_lines():
            if line == "event: done":
                done = True
            elif line == "event: error":
                return False
    return done


async def burst(url: str, turns: int) -> int:
    """``turns`` simultaneous chat turns; how many failed."""
    limits = httpx.Limits(max_connections=turns + 10, max_keepalive_connections=turns + 10)
    async with httpx.AsyncClient(timeout=TURN_TIMEOUT, limits=limits) as client:
        results = await asyncio.gather(*(one_turn(client, url) for _ in range(turns)), return_exceptions=True)
    return sum(1 for result in results if result is not True)


def after_turns(
    root: Path, turns: int, settle: float, src: Path | None = None
) -> tuple[float, float, float, int, float]:
    """Idle RSS, RSS after ``turns`` simultaneous turns, peak RSS (MB), failures, burst seconds."""
    port = free_port()
    process, started = spawn(clawlet_command(port), root / f"home-turns-{uuid.uuid4().hex[:8]}", src)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}/health/ready", started)
        time.sleep(settle)
        idle = status_kb(process.pid, "VmRSS") / 1024
        began = time.perf_counter()
        failed = asyncio.run(burst(f"http://127.0.0.1:{port}", turns))
        took = time.perf_counter() - began
        time.sleep(settle)
        loaded, peak = status_kb(process.pid, "VmRSS") / 1024, status_kb(process.pid, "VmHWM") / 1024
        return idle, loaded, peak, failed, took
    finally:
        stop(process)


def describe(values: list[float], unit: str, scale: float = 1.0) -> str:
    shown = [value * scale for value in values]
    return f"{statistics.median(shown):8.2f} {unit} ({min(shown):.2f}-{max(shown):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="measured starts per path (default 5)")
    parser.add_argument("--settle", type=float, default=2.0, help="idle seconds before the RSS (default 2)")
    parser.add_argument("--turns", type=int, default=500, help="simultaneous turns, then the RSS (0: skip)")
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="another checkout's src/ (e.g. main's): its clawlet serve runs interleaved with this one's",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.settle < 0 or args.turns < 0:
        parser.error("runs must be >= 1, settle and turns >= 0")

    sources: dict[str, Path | None] = {"clawlet serve": None}
    if args.compare_src:
        sources[f"clawlet serve ({args.compare_src})"] = args.compare_src.resolve()
    paths: dict[str, Callable[[Path, float], Start]] = {
        "bare python": start_bare_python,
        "uvicorn hello": start_hello,
    }
    for name, src in sources.items():
        paths[name] = functools.partial(start_clawlet, src=src)
    results: dict[str, list[Start]] = {name: [] for name in paths}
    with tempfile.TemporaryDirectory(prefix="clawlet-bench-startup-") as tmp:
        root = Path(tmp)
        for run in paths.values():  # warm-up: bytecode caches, the page cache
            run(root, 0.0)
        for _ in range(args.runs):
            for name, run in paths.items():
                results[name].append(run(root, args.settle))
        load = os.getloadavg()[0]
        print(f"start and size: {args.runs} starts per path, interleaved; load average {load:.2f}")
        width = max(len(name) for name in paths)
        print(f"{'path':{width}} {'ready (median, range)':>28} {'CPU to ready':>28} {'idle RSS':>28}")
        for name, starts in results.items():
            print(
                f"{name:{width}} {describe([s.ready for s in starts], 's')} "
                f"{describe([s.cpu for s in starts], 's')} {describe([s.rss_mb for s in starts], 'MB')}"
            )
        hello = results["uvicorn hello"]
        for name in sources:
            turns = [s.first_turn for s in results[name]]
            print(f"{name}: first chat turn after ready, time to first token {describe(turns, 's')}")
        for name in sources:

            def ratio(attr: str, name: str = name) -> float:
                mine = statistics.median(getattr(s, attr) for s in results[name])
                return mine / statistics.median(getattr(s, attr) for s in hello)

            print(
                f"ratio {name} / uvicorn hello (medians): ready {ratio('ready'):.2f}x, "
                f"CPU {ratio('cpu'):.2f}x, idle RSS {ratio('rss_mb'):.2f}x"
            )
        for name, src in sources.items() if args.turns else ():
            idle, loaded, peak, failed, took = after_turns(root, args.turns, args.settle, src)
            print(
                f"{name}: {args.turns} simultaneous turns in {took:.1f} s, {failed} failed: "
                f"RSS idle {idle:.0f} MB, after {loaded:.0f} MB, peak {peak:.0f} MB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

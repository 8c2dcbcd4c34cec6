"""Where the memory of a chat turn in flight goes: tracemalloc in a ``clawlet serve``-like process
(issue 17: RSS after 500 simultaneous turns).

The app is built as ``clawlet serve`` builds it (a fresh home, the offline demo model streaming a
token every ``--delay`` s, ``gc.freeze()`` before serving) and served by uvicorn in this process.
A client in another process (so its allocations are not counted) sends two warm turns; then
tracemalloc (``--frames`` frames) takes a baseline, the client sends ``--turns`` simultaneous
``POST /api/chat`` turns in new sessions, and once every one of them has started (and ``--wait``
seconds more) a second snapshot is taken. With ``--hold`` (the default) the demo model waits
before each token of the burst for an hour instead, so every turn is at the same point when the
snapshot is taken (started, its model call made, waiting for the first token): the figures are
then steady from run to run. Without it the turns stream, and the snapshot catches them at
different points (each streamed chunk held costs about 1.7 KB until the model call ends:
LangChain keeps every chunk of a streamed answer to merge them at the end).

Printed, per turn in flight: the memory traced, live objects by type (``gc.get_objects()``,
frozen objects excepted), the top allocating files and lines, and the allocations grouped by the
innermost frame in clawlet's own code (what clawlet calls that allocates), all as the difference to
the baseline divided by the number of turns.

    .venv/bin/python bench/turn_memory.py [--turns 150] [--no-hold] [--src ../other/src]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import linecache
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import types
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def client(url: str, turns: int) -> None:
    """``turns`` simultaneous chat turns (the child process)."""
    import httpx

    async def one(http: httpx.AsyncClient) -> None:
        body = {"message": "Tell me something.", "session_id": f"mem-{uuid.uuid4().hex[:12]}"}
        async with http.stream("POST", f"{url}/api/chat", json=body) as response:
            async for _line in response.aiter_lines():
                pass

    limits = httpx.Limits(max_connections=turns + 10, max_keepalive_connections=turns + 10)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as http:
        await asyncio.gather(*(one(http) for _ in range(turns)), return_exceptions=True)


def short(filename: str) -> str:
    for marker in ("site-packages/", "/src/", "python3.11/", "python3.12/", "python3.13/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def by_clawlet_frame(stats: list[tracemalloc.StatisticDiff]) -> collections.Counter[str]:
    """The allocations grouped by the innermost frame in clawlet's code (tracebacks are cut at
    ``--frames``: the outermost visible clawlet frame stands in when they were)."""
    sizes: collections.Counter[str] = collections.Counter()
    for stat in stats:
        frames = list(stat.traceback)
        ours = [
            frame for frame in frames if "/clawlet/" in frame.filename and "/bench/" not in frame.filename
        ]
        if not ours:
            sizes["(no clawlet frame) " + short(frames[-1].filename)] += stat.size_diff
            continue
        frame = ours[-1]
        line = linecache.getline(frame.filename, frame.lineno).strip()[:70]
        sizes[f"{short(frame.filename)}:{frame.lineno} {line}"] += stat.size_diff
    return sizes


def report(
    base: tracemalloc.Snapshot, peak: tracemalloc.Snapshot, types_before: dict[str, int], turns: int
) -> None:
    kb = 1024 * turns
    types_now = collections.Counter(type(o).__name__ for o in gc.get_objects())
    grown = {name: (count - types_before.get(name, 0)) / turns for name, count in types_now.items()}
    print(f"objects per turn: {sum(grown.values()):.0f} (tuples vary with the collector's untracking)")
    for name, count in sorted(grown.items(), key=lambda item: -item[1])[:25]:
        print(f"  {count:7.1f} {name}")
    print("\nby file (KB per turn, blocks per turn)")
    for stat in peak.compare_to(base, "filename")[:25]:
        print(
            f"{stat.size_diff / kb:7.2f} {stat.count_diff / turns:7.1f}  {short(stat.traceback[0].filename)}"
        )
    print("\nby line")
    for stat in peak.compare_to(base, "lineno")[:30]:
        frame = stat.traceback[0]
        where = f"{short(frame.filename)}:{frame.lineno}"
        line = linecache.getline(frame.filename, frame.lineno).strip()[:70]
        print(f"{stat.size_diff / kb:7.2f} {stat.count_diff / turns:7.1f}  {where} {line}")
    print("\nby the innermost clawlet frame")
    for where, size in by_clawlet_frame(peak.compare_to(base, "traceback")).most_common(30):
        print(f"{size / kb:7.2f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=150)
    parser.add_argument("--delay", type=float, default=0.02, help="the demo model's seconds per token")
    parser.add_argument("--no-hold", dest="hold", action="store_false", help="let the burst's turns stream")
    parser.add_argument("--wait", type=float, default=2.0, help="seconds after the last turn started")
    parser.add_argument("--frames", type=int, default=25)
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="the clawlet tree to measure")
    parser.add_argument("--client", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        asyncio.run(client(args.client[0], int(args.client[1])))
        return
    sys.path.insert(0, str(args.src.resolve()))
    home = Path(tempfile.mkdtemp(prefix="clawlet-turn-memory-"))
    os.environ.update(CLAWLET_HOME=str(home), OPENCLAW_CONFIG_PATH=str(home / "openclaw.json"))
    os.environ["CLAWLET_PROVIDER"] = "demo"
    import uvicorn

    from clawlet import aio, gcpolicy
    from clawlet.api.app import create_app
    from clawlet.config import Settings
    from clawlet.home import init_home
    from clawlet.serving import uvicorn_options

    settings = Settings()
    init_home(settings.paths)
    app = create_app(settings, demo_token_delay=args.delay)
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", backlog=4096, **uvicorn_options()
    )
    server = uvicorn.Server(config)

    def send(url: str, turns: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, __file__, "--client", url, str(turns)])

    async def drive() -> None:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        for _ in range(2):  # the first turn imports the engine; the second is a warm one
            await asyncio.to_thread(send(url, 1).wait)
            await asyncio.sleep(1.5)
        if args.hold:
            from clawlet.llm import replying

            sleep = asyncio.sleep
            replying.asyncio = types.SimpleNamespace(sleep=lambda _delay: sleep(3600))  # type: ignore[assignment]
        gc.collect()
        tracemalloc.start(args.frames)
        base = tracemalloc.take_snapshot()
        types_before = collections.Counter(type(o).__name__ for o in gc.get_objects())
        traced_before = tracemalloc.get_traced_memory()[0]
        burst = send(url, args.turns)
        started = time.monotonic()
        while gcpolicy._running < args.turns and burst.poll() is None:  # noqa: ASYNC110 - a counter
            await asyncio.sleep(0.01)
        print(f"{gcpolicy._running} turns running after {time.monotonic() - started:.1f} s")
        await asyncio.sleep(args.wait)
        running = max(gcpolicy._running, 1)
        traced = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.take_snapshot()
        ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
        print(
            f"{running} turns in flight: {(traced - traced_before) / running / 1024:.1f} KB traced per turn"
        )
        report(base.filter_traces(ignore), peak.filter_traces(ignore), types_before, running)
        burst.kill()
        await asyncio.to_thread(burst.wait)
        server.should_exit = True

    async def both() -> None:
        await asyncio.gather(server.serve(), drive())

    aio.run(both())


if __name__ == "__main__":
    main()

"""A/B of two clawlet source trees on ``compare.py``'s concurrent phase, path by path.

One run starts, on loopback and offline, ``compare.py``'s scripted upstream (``--chunks`` text
chunks, ``--delay`` seconds apart) and two ``clawlet serve`` child processes (throw-away homes),
``A`` importing clawlet from ``SRC_A`` and ``B`` from ``SRC_B``. Each round sends, for each path
in turn (``/v1``, ``/api/chat``, ``/api/agent``, ``chat.send``; ``--paths``), a burst of
``--concurrency`` simultaneous requests (new sessions) to A and to B, alternating which goes
first, and reads each server's CPU from ``/proc`` over the burst. It prints per path and server
the median wall time of the bursts, its multiple of the upstream's own (direct, a burst of the
same size timed in every round) and the CPU per request (mean over the bursts), and B/A.

``--profile DIR`` also samples B with py-spy during its bursts (250 Hz, ``--gil --nonblocking``:
the thread holding the GIL, without stopping the process to sample it), one raw file per path and
round in ``DIR``, and prints each one's breakdown by component (``bench/breakdown.py``). The
profiler takes CPU of its own: the timings of a profiled run are not comparable.

    .venv/bin/python bench/burst_ab.py /tmp/base/src src [--rounds 3] [--paths api/chat,chat.send]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from breakdown import print_breakdown
from compare import (
    MODEL,
    PROMPT,
    Gateway,
    Measure,
    Target,
    UpstreamProcess,
    _client,
    concurrent,
    measure_api_agent,
    measure_api_chat,
)
from support import ClawletProcess, load_average, measure_openai_stream, percentile

PATHS = ("v1", "api/chat", "api/agent", "chat.send")
V1_BODY = {"model": "clawlet", "messages": [{"role": "user", "content": PROMPT}], "stream": True}


def measure(path: str, url: str, gateway: Gateway | None) -> Measure:
    """How one request of ``path`` to the server at ``url`` is sent and timed."""
    if path == "v1":
        return lambda c: measure_openai_stream(c, f"{url}/v1", V1_BODY)
    if path == "api/chat":
        return lambda c: measure_api_chat(c, url)
    if path == "api/agent":
        return lambda c: measure_api_agent(c, url)
    assert gateway is not None
    return lambda c: gateway.chat_send()


@asynccontextmanager
async def sampled(pid: int, raw: Path | None) -> AsyncIterator[None]:
    """py-spy on ``pid`` (and its children) while the block runs, into ``raw`` (None: nothing)."""
    if raw is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    args = [
        "record",
        "--pid",
        str(pid),
        "--rate",
        "250",
        "--format",
        "raw",
        "--full-filenames",
        "--nonblocking",
        "--gil",
    ]
    recorder = await asyncio.create_subprocess_exec(
        spy, *args, "--subprocesses", "--output", str(raw), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    await asyncio.sleep(0.5)  # py-spy attaches
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        await asyncio.wait_for(recorder.communicate(), 60)


async def run(args: argparse.Namespace, llm: UpstreamProcess, servers: dict[str, ClawletProcess]) -> None:
    paths = args.paths.split(",")
    async with _client(4) as client:
        await llm.set_turn(client, args.chunks, args.delay)
        direct_body = None
        for server in servers.values():  # warm each up, and learn the body clawlet sends
            for _ in range(3):
                await measure_api_chat(client, server.url)
            direct_body = direct_body or await llm.get(client, "agent-body")
    gateways = {name: await Gateway.open(f"ws://127.0.0.1:{s.port}/gateway") for name, s in servers.items()}
    walls: dict[tuple[str, str], list[float]] = {}
    ttfts: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    raws: dict[str, Path] = {}
    try:
        direct = Target(
            "direct", lambda c: measure_openai_stream(c, llm.base_url, direct_body or {}), llm.pid
        )
        for index in range(args.rounds):
            for path in paths:
                order = ("A", "B") if (index + paths.index(path)) % 2 == 0 else ("B", "A")
                for name in ("direct", *order):
                    if name == "direct":
                        target = direct
                    else:
                        server = servers[name]
                        target = Target(path, measure(path, server.url, gateways[name]), server.pid)
                    raw = None
                    if args.profile is not None and name == "B":
                        raw = raws[path] = args.profile / f"{path.replace('/', '_')}.{index}.txt"
                    async with sampled(servers["B"].pid, raw):
                        result = (await concurrent([target], args.concurrency))[target.name]
                    key = (path, name)
                    walls.setdefault(key, []).append(result.wall)
                    ttfts.setdefault(key, []).extend(sample.ttft for sample in result.samples)
                    cpus.setdefault(key, []).append(result.cpu / result.requests)
                    errors[key] = errors.get(key, 0) + len(result.errors)
    finally:
        for gateway in gateways.values():
            await gateway.close()
    print(
        f"burst A/B: {args.concurrency} at once, {args.chunks} chunks at {args.delay * 1000:g} ms, "
        f"{args.rounds} rounds; load average at end {load_average()}"
    )
    print(
        f"{'path':<12}{'direct s':>9}{'A wall':>8}{'A x':>7}{'B wall':>8}{'B x':>7}{'A CPU':>8}{'B CPU':>8}"
        f"{'B/A CPU':>8}{'A TTFT p50':>11}{'p99':>7}{'B TTFT p50':>11}{'p99':>7}{'errors':>7}"
    )
    for path in paths:
        d = statistics.median(walls[(path, "direct")])
        a, b = statistics.median(walls[(path, "A")]), statistics.median(walls[(path, "B")])
        ca, cb = statistics.mean(cpus[(path, "A")]) * 1000, statistics.mean(cpus[(path, "B")]) * 1000
        errs = errors[(path, "A")] + errors[(path, "B")]
        ttft = [percentile(ttfts[(path, name)], pct) * 1000 for name in ("A", "B") for pct in (50, 99)]
        print(
            f"{path:<12}{d:>9.2f}{a:>8.2f}{a / d:>6.2f}x{b:>8.2f}{b / d:>6.2f}x{ca:>8.1f}{cb:>8.1f}"
            f"{cb / ca:>8.2f}{ttft[0]:>11.0f}{ttft[1]:>7.0f}{ttft[2]:>11.0f}{ttft[3]:>7.0f}{errs:>7}"
        )
    print(
        "wall: median seconds per burst; CPU: the server's ms per request, mean over the bursts; "
        "TTFT: ms, over all the bursts' requests"
    )
    for path in raws:
        for index in range(args.rounds):
            raw = args.profile / f"{path.replace('/', '_')}.{index}.txt"
            if raw.exists():
                print_breakdown(raw, f"B during a burst of {path}, round {index}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("src_a", type=Path, help="the src directory clawlet A imports")
    parser.add_argument("src_b", type=Path, help="the src directory clawlet B imports")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per path and server (3)")
    parser.add_argument("--concurrency", type=int, default=50, help="simultaneous requests (50)")
    parser.add_argument("--chunks", type=int, default=200, help="text chunks per answer (200)")
    parser.add_argument("--delay", type=float, default=0.005, help="seconds between chunks (0.005)")
    parser.add_argument("--profile", type=Path, help="py-spy B's bursts into this directory")
    args = parser.parse_args(argv)
    if not set(args.paths.split(",")) <= set(PATHS) or min(args.rounds, args.concurrency, args.chunks) < 1:
        parser.error(f"--paths takes {', '.join(PATHS)}; rounds, concurrency and chunks must be >= 1")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(f"load average at start {load_average()}")
    with (
        tempfile.TemporaryDirectory(prefix="clawlet-burst-ab-") as tmp,
        UpstreamProcess(Path(tmp) / "up") as llm,
    ):
        servers: dict[str, ClawletProcess] = {}
        for name, src in (("A", args.src_a), ("B", args.src_b)):
            env = {
                "PYTHONPATH": str(src.resolve()),
                "CLAWLET_PROVIDER": "openai",
                "CLAWLET_LLM_BASE_URL": llm.base_url,
                "CLAWLET_LLM_MODEL": MODEL,
                "CLAWLET_LLM_API_KEY": "bench-key",
                "CLAWLET_ENGINE_WORKERS": os.environ.get("CLAWLET_ENGINE_WORKERS", "0"),
            }
            servers[name] = ClawletProcess(Path(tmp) / name, env=env)
        try:
            for server in servers.values():
                server.start()
            asyncio.run(run(args, llm, servers))
        finally:
            for server in servers.values():
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What relaying a streamed answer costs per chunk: two source trees' ``clawlet serve`` side by side.

One run starts, on loopback and offline, a scripted OpenAI-compatible upstream
(``clawlet.testing.scripted_openai``) and two ``clawlet serve`` child processes pointed at it, one
importing clawlet from ``--baseline-src`` (e.g. a checkout of an earlier commit) and one from this
checkout's ``src``. Then, interleaved so that machine noise hits both alike:

1. **sequential**: ``--turns`` streamed ``/v1/chat/completions`` turns per server, alternately a
   ``--chunks``-chunk answer and a 1-chunk answer from an instant upstream. The server's CPU per
   turn comes from ``/proc``; CPU per chunk is the difference of the two turn kinds over the extra
   chunks (what the fixed per-turn set-up costs cancels out), and so is the relay's wall time;
2. **burst**: ``--concurrency`` such streams at once (``--burst-delay`` seconds between chunks),
   ``--rounds`` times per server; wall time and server CPU per burst, against the upstream direct.

Run from the repository root::

    .venv/bin/python bench/relay_ab.py --baseline-src /path/to/other/checkout/src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from support import REPO_SRC, ClawletProcess, process_cpu

ONE_CHUNK = "answer in one chunk"


def make_script(chunks: int, delay: float) -> Callable[[dict[str, Any]], Turn]:
    answer = " ".join(f"word{i}" for i in range(chunks))

    def script(body: dict[str, Any]) -> Turn:
        if ONE_CHUNK in json.dumps(body["messages"]):
            return text_turn("hi", chunks=1)
        return text_turn(answer, chunks=chunks, delay=delay)

    return script


def body(prompt: str, model: str = "clawlet") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}


def stream(client: httpx.Client, url: str, request: dict[str, Any]) -> float:
    start = time.perf_counter()
    with client.stream("POST", f"{url}/chat/completions", json=request) as response:
        response.raise_for_status()
        for _line in response.iter_lines():
            pass
    return time.perf_counter() - start


async def burst(url: str, request: dict[str, Any], count: int) -> tuple[float, int]:
    """``count`` streams at once: the wall time and how many failed."""
    limits = httpx.Limits(max_connections=count + 5, max_keepalive_connections=count + 5)

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", f"{url}/chat/completions", json=request) as response:
            response.raise_for_status()
            async for _line in response.aiter_lines():
                pass

    async with httpx.AsyncClient(limits=limits, timeout=300) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(one(client) for _ in range(count)), return_exceptions=True)
        return time.perf_counter() - start, sum(isinstance(item, BaseException) for item in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", required=True, help="the other tree's src directory")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--burst-delay", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"baseline": args.baseline_src, "this": str(REPO_SRC)}
    turns: dict[str, dict[str, list[tuple[float, float]]]] = {name: {"long": [], "one": []} for name in trees}
    bursts: dict[str, list[tuple[float, float, int]]] = {name: [] for name in trees}
    direct: list[float] = []
    direct_bursts: list[float] = []
    with (
        ScriptedOpenAIServer(make_script(args.chunks, 0.0)) as upstream,
        ScriptedOpenAIServer(make_script(args.chunks, args.burst_delay)) as paced,
        tempfile.TemporaryDirectory() as tmp,
    ):
        servers: dict[str, ClawletProcess] = {}
        try:
            for name, src in trees.items():
                env = {
                    "PYTHONPATH": src,
                    "CLAWLET_PROVIDER": "openai",
                    "CLAWLET_LLM_BASE_URL": upstream.base_url,
                    "CLAWLET_LLM_MODEL": "scripted-model",
                }
                servers[name] = ClawletProcess(Path(tmp) / name, env=env)
                servers[name].start()
            with httpx.Client(timeout=120) as client:
                for index in range(args.warmup + args.turns):
                    for name, server in servers.items():
                        assert server.process is not None
                        for kind, prompt in (("long", "go"), ("one", ONE_CHUNK)):
                            before = process_cpu(server.process.pid)
                            wall = stream(client, f"{server.url}/v1", body(prompt))
                            cpu = process_cpu(server.process.pid) - before
                            if index >= args.warmup:
                                turns[name][kind].append((wall, cpu))
                    wall = stream(client, upstream.base_url, body("go", "scripted-model"))
                    if index >= args.warmup:
                        direct.append(wall)
            for name, server in servers.items():  # the bursts go to the paced upstream
                server.stop()
                env = {**server.extra_env, "CLAWLET_LLM_BASE_URL": paced.base_url}
                servers[name] = ClawletProcess(Path(tmp) / f"{name}-burst", env=env)
                servers[name].start()
            for _round in range(args.rounds):
                for name, server in servers.items():
                    assert server.process is not None
                    before = process_cpu(server.process.pid)
                    wall, errors = asyncio.run(burst(f"{server.url}/v1", body("go"), args.concurrency))
                    bursts[name].append((wall, process_cpu(server.process.pid) - before, errors))
                request = body("go", "scripted-model")
                direct_bursts.append(asyncio.run(burst(paced.base_url, request, args.concurrency))[0])
        finally:
            for server in servers.values():
                server.stop()
    report(args, turns, bursts, statistics.median(direct), statistics.median(direct_bursts))


def report(
    args: argparse.Namespace,
    turns: dict[str, dict[str, list[tuple[float, float]]]],
    bursts: dict[str, list[tuple[float, float, int]]],
    direct: float,
    direct_burst: float,
) -> None:
    extra = args.chunks - 1
    print(
        f"sequential: {args.turns} turns per kind, {args.chunks}-chunk vs 1-chunk answers, instant upstream"
    )
    print(f"direct {args.chunks}-chunk stream p50 {direct * 1000:.1f} ms")
    columns = [("tree", 10), ("CPU/turn", 10), ("CPU/chunk", 11), ("wall p50", 10), ("ratio", 7)]
    columns += [("relay wall", 12), ("ratio", 7)]
    print(f"{columns[0][0]:<10}" + "".join(f"{title:>{width}}" for title, width in columns[1:]))
    for name, kinds in turns.items():
        cpu_long = statistics.mean(cpu for _, cpu in kinds["long"])
        cpu_one = statistics.mean(cpu for _, cpu in kinds["one"])
        wall = statistics.median(wall for wall, _ in kinds["long"])
        relay = wall - statistics.median(wall for wall, _ in kinds["one"])
        print(
            f"{name:<10}{cpu_long * 1000:>8.1f}ms{(cpu_long - cpu_one) / extra * 1000:>9.3f}ms"
            f"{wall * 1000:>8.1f}ms{wall / direct:>6.1f}x{relay * 1000:>10.1f}ms{relay / direct:>6.1f}x"
        )
    print(
        f"\nburst: {args.concurrency} streams at once, {args.chunks} chunks, "
        f"{args.burst_delay * 1000:g} ms between chunks, {args.rounds} rounds; "
        f"direct wall p50 {direct_burst:.2f} s"
    )
    for name, rows in bursts.items():
        wall = statistics.median(row[0] for row in rows)
        cpu = statistics.median(row[1] for row in rows)
        errors = sum(row[2] for row in rows)
        ratio = wall / direct_burst
        print(f"{name:<10}wall p50 {wall:.2f} s ({ratio:.2f}x direct), CPU {cpu:.2f} s, {errors} errors")


if __name__ == "__main__":
    main()

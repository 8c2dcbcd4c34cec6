"""Where a turn's time to first token goes inside ``clawlet serve``: wall-clock marks, one or two
source trees side by side (issue 17).

One scripted upstream (``compare.py``'s, ``--chunks`` chunks at once) serves every tree; each tree
runs a ``clawlet serve`` (a throw-away home, the upstream as its OpenAI-compatible model) with
``bench/ttft_marks_hook`` on its ``PYTHONPATH``, which writes a mark at each step of a turn on its
way to the first token (see that hook). The client sends ``--requests`` streamed turns to each
server in turn (the order alternates; ``--path v1``: ``/v1/chat/completions``, ``api``:
``/api/chat`` in a new session each time), one at a time, and marks when it sent each and when it
read the first text. Every mark is the same monotonic clock (``time.perf_counter``) in every
process, so the report is, per tree, the median over the requests of each mark's time after the
client's send. Timings under a loaded machine are longer, but the trees meet the same load.

Run from the repository root::

    .venv/bin/python bench/ttft_marks.py [--base-src ../main/src] [--requests 60] [--path v1|api]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from compare import MODEL, UpstreamProcess
from support import ClawletProcess

HERE = Path(__file__).resolve().parent
HOOK = HERE / "ttft_marks_hook"
WARM_UP = 5
SEND, FIRST_TEXT = "client sends", "client reads the first text"
REQUEST = {
    "v1": (
        "/v1/chat/completions",
        lambda n: {
            "model": "clawlet",
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me something."}],
        },
    ),
    "api": (
        "/api/chat",
        lambda n: {"message": "Tell me something.", "session_id": f"marks-{n}", "stream": True},
    ),
}


def is_first_text(line: str) -> bool:
    """Whether an SSE line carries text (an OpenAI chunk's or a workbench token's content)."""
    compact = line.replace(" ", "")
    return '"content":"' in compact and '"content":""' not in compact


async def one_turn(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, float]:
    marks = {SEND: time.perf_counter()}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if FIRST_TEXT not in marks and line.startswith("data:") and is_first_text(line):
                marks[FIRST_TEXT] = time.perf_counter()
    return marks


def server_marks(path: Path) -> list[dict[str, float]]:
    """The server's marks, one dict per request (each starts at its first bytes), first of each name."""
    turns: list[dict[str, float]] = []
    for line in path.read_text().splitlines():
        name, _, value = line.rpartition(" ")
        if name == "request bytes":
            turns.append({})
        if turns:
            turns[-1].setdefault(name, float(value))
    return turns


async def drive(
    args: argparse.Namespace, trees: dict[str, Path], tmp: Path
) -> dict[str, list[dict[str, float]]]:
    route, make_body = REQUEST[args.path]
    with UpstreamProcess(tmp / "upstream") as llm:
        servers: dict[str, tuple[ClawletProcess, Path]] = {}
        try:
            for name, src in trees.items():
                marks_file = tmp / f"{name}.marks"
                env = {
                    "CLAWLET_PROVIDER": "openai",
                    "CLAWLET_LLM_BASE_URL": llm.base_url,
                    "CLAWLET_LLM_MODEL": MODEL,
                    "CLAWLET_LLM_API_KEY": "bench-key",
                    "BENCH_MARKS_FILE": str(marks_file),
                    "PYTHONPATH": os.pathsep.join([str(HOOK), str(src)]),
                }
                server = ClawletProcess(tmp / name, env=env)
                server.__enter__()
                servers[name] = (server, marks_file)
            client_marks: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            async with httpx.AsyncClient(timeout=120) as client:
                await llm.set_turn(client, args.chunks, 0.0)
                for number in range(WARM_UP + args.requests):
                    order = list(trees) if number % 2 == 0 else list(reversed(trees))
                    for name in order:
                        url = servers[name][0].url + route
                        client_marks[name].append(await one_turn(client, url, make_body(number)))
        finally:
            for server, _ in servers.values():
                server.__exit__(None, None, None)
        merged: dict[str, list[dict[str, float]]] = {}
        for name, (_, marks_file) in servers.items():
            from_server = server_marks(marks_file)
            if len(from_server) != len(client_marks[name]):
                raise RuntimeError(
                    f"{name}: {len(from_server)} requests marked, {len(client_marks[name])} sent"
                )
            merged[name] = [
                {**sent, **marked}
                for sent, marked in list(zip(client_marks[name], from_server, strict=True))[WARM_UP:]
            ]
        return merged


def report(merged: dict[str, list[dict[str, float]]]) -> None:
    names = list(merged)
    steps: list[str] = []
    for turns in merged.values():
        for turn in turns:
            steps += [step for step in turn if step not in steps]
    medians = {
        name: {
            step: statistics.median((turn[step] - turn[SEND]) * 1000 for turn in turns if step in turn)
            for step in steps
            if any(step in turn for turn in turns)
        }
        for name, turns in merged.items()
    }
    order = sorted(steps, key=lambda step: medians[names[-1]].get(step, medians[names[0]].get(step, 0.0)))
    print(f"{'step (ms after the client sent, medians)':<44}" + "".join(f"{name:>12}" for name in names))
    for step in order:
        cells = "".join(
            f"{medians[name][step]:>12.2f}" if step in medians[name] else f"{'-':>12}" for name in names
        )
        print(f"{step:<44}{cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="this tree's src/")
    parser.add_argument("--base-src", type=Path, help="another tree's src/, measured beside it")
    parser.add_argument("--requests", type=int, default=60, help="measured turns per tree (default 60)")
    parser.add_argument("--chunks", type=int, default=200, help="chunks per answer (default 200)")
    parser.add_argument("--path", choices=sorted(REQUEST), default="v1")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.chunks < 1:
        parser.error("requests and chunks must be >= 1")
    trees = {"this": args.src.resolve()}
    if args.base_src is not None:
        trees = {"base": args.base_src.resolve(), **trees}
    with tempfile.TemporaryDirectory(prefix="clawlet-ttft-marks-") as tmp:
        merged = asyncio.run(drive(args, trees, Path(tmp)))
    load = os.getloadavg()
    print(f"ttft_marks: {args.requests} {args.path} turns per tree, load average {load[0]:.2f}")
    report(merged)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

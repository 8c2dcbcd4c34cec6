"""A/B of two clawlet source trees: server CPU per streamed turn, interleaved, one scripted upstream.

One run starts, on loopback and offline, one scripted OpenAI-compatible upstream
(:mod:`clawlet.testing.scripted_openai`; every answer ``--chunks`` text chunks, no delay) and two
``clawlet serve`` child processes (throw-away homes), ``A`` importing clawlet from ``SRC_A`` and
``B`` from ``SRC_B`` (e.g. ``git archive`` of the base commit unpacked somewhere, and ``src``).
After ``--warmup`` turns each, it sends ``--turns`` streamed turns to each on ``--path``
(``/v1/chat/completions``, ``/api/chat`` or ``/api/agent``), alternating which goes first, and
reads each server's user + system CPU from ``/proc`` around every turn (after the stream ended
and the server went quiet for a moment: the title request and transcript writes count).
It prints CPU per turn (mean, median) and wall time per turn for each, and the B/A ratio of the
CPU means. ``/proc`` counts in 10 ms ticks: use 50+ turns and repeat on a busy machine.

    .venv/bin/python bench/ab_cpu.py /tmp/base/src src --path /v1/chat/completions --turns 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from support import ClawletProcess, process_cpu

QUIET_SECONDS = 0.02
"""How long a server gets after a stream ends before its CPU is read (its title request)."""


def request_body(path: str) -> dict[str, Any]:
    if path == "/api/chat":
        return {"message": "Tell me something.", "session_id": f"ab-{uuid.uuid4().hex[:12]}"}
    if path == "/api/agent":
        return {"prompt": "Tell me something."}
    return {"model": "clawlet", "stream": True, "messages": [{"role": "user", "content": "Tell me."}]}


def turn(client: httpx.Client, url: str, path: str) -> None:
    with client.stream("POST", url + path, json=request_body(path)) as response:
        response.raise_for_status()
        for _ in response.iter_bytes():
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src_a", type=Path, help="the src directory clawlet A imports")
    parser.add_argument("src_b", type=Path, help="the src directory clawlet B imports")
    parser.add_argument("--path", default="/v1/chat/completions", help="the streamed endpoint")
    parser.add_argument("--turns", type=int, default=50, help="measured turns per server (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured turns per server first (5)")
    parser.add_argument("--chunks", type=int, default=200, help="text chunks per answer (default 200)")
    args = parser.parse_args(argv)
    answer = " ".join(f"w{i}" for i in range(args.chunks))

    def script(body: dict[str, Any]) -> Turn:
        return text_turn(answer, chunks=args.chunks)

    with tempfile.TemporaryDirectory(prefix="clawlet-ab-") as tmp, ScriptedOpenAIServer(script) as llm:
        servers: dict[str, ClawletProcess] = {}
        for name, src in (("A", args.src_a), ("B", args.src_b)):
            env = {
                "PYTHONPATH": str(src.resolve()),
                "CLAWLET_PROVIDER": "openai",
                "CLAWLET_LLM_BASE_URL": llm.base_url,
                "CLAWLET_LLM_MODEL": "scripted-model",
                "CLAWLET_LLM_API_KEY": "ab-key",
                "CLAWLET_LOG_LEVEL": "WARNING",
            }
            servers[name] = ClawletProcess(Path(tmp) / name, env=env)
        try:
            for server in servers.values():
                server.start()
            cpu: dict[str, list[float]] = {"A": [], "B": []}
            wall: dict[str, list[float]] = {"A": [], "B": []}
            with httpx.Client(timeout=120) as client:
                for server in servers.values():
                    for _ in range(args.warmup):
                        turn(client, server.url, args.path)
                for index in range(args.turns):
                    for name in ("A", "B") if index % 2 == 0 else ("B", "A"):
                        server = servers[name]
                        assert server.process is not None
                        before, started = process_cpu(server.process.pid), time.perf_counter()
                        turn(client, server.url, args.path)
                        wall[name].append(time.perf_counter() - started)
                        time.sleep(QUIET_SECONDS)
                        cpu[name].append(process_cpu(server.process.pid) - before)
        finally:
            for server in servers.values():
                server.stop()

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"A/B {args.path}: {args.turns} turns each, {args.chunks} chunks per answer, load average {load}")
    for name in ("A", "B"):
        mean, median = statistics.mean(cpu[name]) * 1000, statistics.median(cpu[name]) * 1000
        took = statistics.median(wall[name]) * 1000
        print(f"{name}: CPU per turn mean {mean:.1f} ms, median {median:.1f} ms; wall median {took:.1f} ms")
    print(f"ratio B/A CPU per turn (means): {statistics.mean(cpu['B']) / statistics.mean(cpu['A']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

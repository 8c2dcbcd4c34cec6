"""Streaming overhead of clawlet's ``POST /v1/chat/completions`` against the LLM endpoint it wraps.

One run starts, on loopback and fully offline:

* a scripted OpenAI-compatible LLM server (``clawlet.testing.scripted_openai``) whose every answer
  streams ``--chunks`` text chunks with ``--chunk-delay`` seconds between them, and
* a real clawlet server (uvicorn in a background thread, temporary ``CLAWLET_HOME``) with
  ``provider="openai"`` pointing at that scripted server.

Then it measures two things, each on both paths — **direct** (the scripted server's
``/v1/chat/completions`` with the very body clawlet sends it: system prompt + tool schemas) and
**clawlet** (clawlet's ``/v1/chat/completions``, streaming, a new session per request):

1. **sequential**: ``--iterations`` streams one at a time, interleaved; time to the first content
   delta (TTFT), total time to ``data: [DONE]``, and content chunks per second after the first;
2. **concurrent**: ``--concurrency`` streams started at once (asyncio + ``httpx.AsyncClient``),
   first all direct, then all through clawlet, with shorter answers (``--concurrent-chunks``) so
   the run stays near a minute; TTFT and total p50/p99 per path, the latency clawlet adds at each
   percentile, wall time and errors.

Everything (both servers and the client) shares one Python process, so under load the numbers
include GIL contention between them; compare runs on the same machine only.

Run from the repository root::

    .venv/bin/python bench/openai_stream.py [--iterations 20] [--concurrency 200] [--chunks 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from support import ClawletServer, Sample, measure_openai_stream, openai_content, percentile

ANSWER_WORDS = 120
PROMPT = "Tell me something."


def make_script(chunks: int, delay: float) -> Callable[[dict[str, Any]], Turn]:
    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))

    def script(body: dict[str, Any]) -> Turn:
        return text_turn(answer, chunks=chunks, delay=delay)

    return script


def clawlet_body() -> dict[str, Any]:
    return {"model": "clawlet", "messages": [{"role": "user", "content": PROMPT}], "stream": True}


def measure_sync(client: httpx.Client, url: str, body: dict[str, Any]) -> Sample:
    start = time.perf_counter()
    ttft = math.nan
    chunks = 0
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            content = openai_content(line)
            if content is None:
                break
            if content:
                chunks += 1
                if math.isnan(ttft):
                    ttft = time.perf_counter() - start
    if math.isnan(ttft):
        raise RuntimeError("stream ended without content")
    return Sample(ttft, time.perf_counter() - start, chunks)


async def burst(url: str, body: dict[str, Any], count: int) -> tuple[list[Sample], list[str], float]:
    """``count`` streams started at once; their samples, the errors and the wall time."""
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    timeout = httpx.Timeout(120, pool=120)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(measure_openai_stream(client, url, body) for _ in range(count)), return_exceptions=True
        )
        wall = time.perf_counter() - start
    samples = [item for item in results if isinstance(item, Sample)]
    errors = [f"{type(item).__name__}: {item}" for item in results if isinstance(item, BaseException)]
    return samples, errors, wall


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def report_sequential(direct: list[Sample], through: list[Sample]) -> None:
    print(f"{'path':<10}{'TTFT median':>14}{'total median':>15}{'chunks/s median':>18}{'chunks':>8}")
    medians: dict[str, tuple[float, float, float]] = {}
    for name, samples in (("direct", direct), ("clawlet", through)):
        ttft = statistics.median(s.ttft for s in samples)
        total = statistics.median(s.total for s in samples)
        rate = statistics.median(s.chunk_rate for s in samples)
        medians[name] = (ttft, total, rate)
        print(f"{name:<10}{ms(ttft):>14}{ms(total):>15}{rate:>18.0f}{samples[0].chunks:>8}")
    d, c = medians["direct"], medians["clawlet"]
    print(
        f"ratio clawlet/direct (median): TTFT {c[0] / d[0]:.2f}x (+{ms(c[0] - d[0])}), "
        f"total {c[1] / d[1]:.2f}x (+{ms(c[1] - d[1])}), chunks/s {c[2] / d[2]:.2f}x"
    )


def report_concurrent(
    results: dict[str, tuple[list[Sample], list[str], float]], count: int
) -> dict[str, dict[str, float]]:
    header = f"{'path':<10}{'TTFT p50':>11}{'TTFT p99':>11}{'total p50':>12}{'total p99':>12}"
    print(f"{header}{'wall':>10}{'errors':>8}")
    stats: dict[str, dict[str, float]] = {}
    for name, (samples, errors, wall) in results.items():
        if not samples:
            print(f"{name:<10} all {count} streams failed: {errors[:3]}")
            continue
        ttfts = [s.ttft for s in samples]
        totals = [s.total for s in samples]
        row = {
            "ttft50": percentile(ttfts, 50),
            "ttft99": percentile(ttfts, 99),
            "total50": percentile(totals, 50),
            "total99": percentile(totals, 99),
        }
        stats[name] = row
        print(
            f"{name:<10}{ms(row['ttft50']):>11}{ms(row['ttft99']):>11}{ms(row['total50']):>12}"
            f"{ms(row['total99']):>12}{wall:>9.2f}s{len(errors):>8}"
        )
        for error in errors[:3]:
            print(f"  {name} error: {error}")
    if "direct" in stats and "clawlet" in stats:
        d, c = stats["direct"], stats["clawlet"]
        print(
            "added by clawlet: "
            f"TTFT p50 +{ms(c['ttft50'] - d['ttft50'])}, p99 +{ms(c['ttft99'] - d['ttft99'])}; "
            f"total p50 +{ms(c['total50'] - d['total50'])}, p99 +{ms(c['total99'] - d['total99'])}"
        )
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20, help="sequential streams per path (20)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured streams per path first (3)")
    parser.add_argument("--concurrency", type=int, default=200, help="simultaneous streams per path (200)")
    parser.add_argument("--chunks", type=int, default=50, help="text chunks per scripted answer (50)")
    parser.add_argument(
        "--concurrent-chunks", type=int, default=20, help="text chunks per answer in the concurrent part (20)"
    )
    parser.add_argument("--chunk-delay", type=float, default=0.004, help="seconds between chunks (0.004)")
    args = parser.parse_args(argv)
    if (
        min(args.iterations, args.concurrency, args.chunks, args.concurrent_chunks) < 1
        or args.warmup < 0
        or args.chunk_delay < 0
    ):
        parser.error("iterations, concurrency and chunks must be >= 1, warmup and chunk-delay >= 0")

    with tempfile.TemporaryDirectory(prefix="clawlet-bench-") as tmp:
        home = Path(tmp) / "home"
        os.environ["CLAWLET_HOME"] = str(home)
        with ScriptedOpenAIServer(make_script(args.chunks, args.chunk_delay)) as llm:
            settings = Settings(
                _env_file=None,  # type: ignore[call-arg]  # no stray .env from the checkout
                home=home,
                provider="openai",
                llm_base_url=llm.base_url,
                llm_model="scripted-model",
                llm_api_key="bench-key",
            )
            clawlet = ClawletServer(settings)
            url = clawlet.start() + "/v1"
            try:
                with httpx.Client(timeout=60) as client:
                    # The first clawlet stream also tells us what body clawlet sends the LLM.
                    measure_sync(client, url, clawlet_body())
                    direct_body = dict(llm.requests[0])
                    for _ in range(max(0, args.warmup - 1)):
                        measure_sync(client, url, clawlet_body())
                    for _ in range(args.warmup):
                        measure_sync(client, llm.base_url, direct_body)
                    direct: list[Sample] = []
                    through: list[Sample] = []
                    for _ in range(args.iterations):
                        direct.append(measure_sync(client, llm.base_url, direct_body))
                        through.append(measure_sync(client, url, clawlet_body()))
                llm.set_script(make_script(args.concurrent_chunks, args.chunk_delay))
                concurrent = {
                    "direct": asyncio.run(burst(llm.base_url, direct_body, args.concurrency)),
                    "clawlet": asyncio.run(burst(url, clawlet_body(), args.concurrency)),
                }
            finally:
                clawlet.stop()
            if llm.errors:
                raise RuntimeError(f"scripted server errors: {llm.errors[:3]}")

    request_kib = len(json.dumps(direct_body)) / 1024
    print(
        f"OpenAI streaming: {args.chunks} chunks per answer, {args.chunk_delay * 1000:g} ms between "
        f"chunks, LLM request body {request_kib:.1f} KiB, {os.cpu_count()} CPUs"
    )
    print(f"\n[sequential] {args.iterations} streams per path (+{args.warmup} warm-up), interleaved")
    report_sequential(direct, through)
    print(
        f"\n[concurrent] {args.concurrency} streams at once per path, {args.concurrent_chunks} chunks "
        "per answer (clawlet: one session each)"
    )
    report_concurrent(concurrent, args.concurrency)
    failed = any(errors for _, errors, _ in concurrent.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

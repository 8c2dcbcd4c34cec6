"""Chat latency: clawlet's ``POST /api/chat`` against the bare LLM endpoint it wraps.

One run starts, on loopback and fully offline:

* a scripted OpenAI-compatible LLM server (``clawlet.testing.scripted_openai``) whose every answer
  streams ``--chunks`` text chunks with ``--chunk-delay`` seconds between them, and
* a real clawlet server (uvicorn in a background thread, temporary ``CLAWLET_HOME``) configured
  with ``provider="openai"`` pointing at that scripted server.

Each iteration then measures one chat turn two ways, interleaved so drift hits both equally:

* **direct**: ``POST /v1/chat/completions`` on the scripted server with httpx streaming, sending the
  very request body clawlet sends (system prompt + tool schemas), timed to the first content delta
  (TTFT) and to ``data: [DONE]`` (total);
* **clawlet**: ``POST /api/chat`` on the clawlet server (a new session each time), timed to the
  first ``token`` SSE event (TTFT) and to the ``done`` event (total). The title request clawlet
  makes after ``done`` is drained before the next iteration but not timed.

Run from the repository root::

    .venv/bin/python bench/chat_latency.py [--iterations 20] [--warmup 3] [--chunks 50]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from support import ClawletServer, is_title_request, percentile

ANSWER_WORDS = 120


@dataclass
class Sample:
    ttft: float
    total: float


def make_script(chunks: int, delay: float) -> Callable[[dict[str, Any]], Turn]:
    answer = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
    title = text_turn("Bench", chunks=1)

    def script(body: dict[str, Any]) -> Turn:
        if is_title_request(body):
            return title
        return text_turn(answer, chunks=chunks, delay=delay)

    return script


def measure_direct(client: httpx.Client, base_url: str, body: dict[str, Any]) -> Sample:
    start = time.perf_counter()
    ttft = math.nan
    with client.stream("POST", f"{base_url}/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            if math.isnan(ttft):
                chunk = json.loads(data)
                choices = chunk.get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    ttft = time.perf_counter() - start
    return Sample(ttft, time.perf_counter() - start)


def measure_clawlet(client: httpx.Client, url: str) -> Sample:
    body = {"message": "Tell me something.", "session_id": f"bench-{uuid.uuid4().hex[:12]}"}
    start = time.perf_counter()
    ttft = total = math.nan
    with client.stream("POST", f"{url}/api/chat", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line == "event: token" and math.isnan(ttft):
                ttft = time.perf_counter() - start
            elif line == "event: done":
                total = time.perf_counter() - start
            elif line == "event: error":
                raise RuntimeError("clawlet reported an error event")
        # keep reading to the end (the title event) so turns never overlap
    if math.isnan(ttft) or math.isnan(total):
        raise RuntimeError("clawlet stream ended without token/done events")
    return Sample(ttft, total)


def summarize(samples: list[Sample], attr: str) -> tuple[float, float]:
    values = [getattr(sample, attr) for sample in samples]
    return statistics.median(values), percentile(values, 90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20, help="measured turns per path (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured turns per path first (default 3)")
    parser.add_argument("--chunks", type=int, default=50, help="text chunks per scripted answer (default 50)")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.004, help="seconds between chunks (default 0.004)"
    )
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.chunks < 1 or args.chunk_delay < 0:
        parser.error("iterations and chunks must be >= 1, warmup and chunk-delay >= 0")

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
            url = clawlet.start()
            try:
                with httpx.Client(timeout=60) as client:
                    # The first clawlet turn also tells us what request body clawlet sends.
                    measure_clawlet(client, url)
                    agent_bodies = [body for body in llm.requests if not is_title_request(body)]
                    direct_body = agent_bodies[0]
                    for _ in range(max(0, args.warmup - 1)):
                        measure_clawlet(client, url)
                    for _ in range(args.warmup):
                        measure_direct(client, llm.base_url, direct_body)
                    direct: list[Sample] = []
                    through: list[Sample] = []
                    for _ in range(args.iterations):
                        direct.append(measure_direct(client, llm.base_url, direct_body))
                        through.append(measure_clawlet(client, url))
            finally:
                clawlet.stop()
            if llm.errors:
                raise RuntimeError(f"scripted server errors: {llm.errors}")

    request_kib = len(json.dumps(direct_body)) / 1024
    print(
        f"chat latency: {args.iterations} iterations (+{args.warmup} warm-up), {args.chunks} chunks "
        f"per answer, {args.chunk_delay * 1000:g} ms between chunks, request body {request_kib:.1f} KiB"
    )
    print(f"{'path':<10}{'TTFT median':>14}{'TTFT p90':>12}{'total median':>15}{'total p90':>12}")
    rows = {"direct": direct, "clawlet": through}
    stats: dict[str, tuple[float, float, float, float]] = {}
    for name, samples in rows.items():
        ttft_med, ttft_p90 = summarize(samples, "ttft")
        total_med, total_p90 = summarize(samples, "total")
        stats[name] = (ttft_med, ttft_p90, total_med, total_p90)
        print(
            f"{name:<10}{ttft_med * 1000:>11.1f} ms{ttft_p90 * 1000:>9.1f} ms"
            f"{total_med * 1000:>12.1f} ms{total_p90 * 1000:>9.1f} ms"
        )
    d, c = stats["direct"], stats["clawlet"]
    print(
        f"ratio clawlet/direct (median): TTFT {c[0] / d[0]:.2f}x (+{(c[0] - d[0]) * 1000:.1f} ms), "
        f"total {c[2] / d[2]:.2f}x (+{(c[2] - d[2]) * 1000:.1f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Turn set-up: the time to the first token and the CPU of a plain text turn, two source trees side
by side (issue 17: what clawlet does before the model call).

One scripted OpenAI-compatible upstream (``clawlet.testing.scripted_openai``, in its own process,
answering 20 text chunks at once) serves both trees. Each round starts, for each tree in turn
(the order alternates), a child process that builds clawlet's services on a fresh home whose files
are dated back a minute (as a server's are) and drives turns through ``SessionManager`` in
process, as every edge does: ``--turns`` turns in new sessions ("fresh") and as many in sessions
holding 50 earlier turns ("50 turns", written through the same store first). Per turn: TTFT is
``start_turn`` to the first ``TextDelta``; CPU is the child's process time over the turn (the
event loop and its worker threads; the upstream is another process). The figures are medians
(and p99 of TTFT) over every round, and the ratio of ``--src`` to ``--base-src``.

Run from the repository root::

    .venv/bin/python bench/turn_setup.py --base-src ../main/src [--rounds 6] [--turns 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("fresh", "50 turns")


def upstream_main() -> None:
    """The scripted upstream: prints its base URL, serves until stdin closes."""
    from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn

    answer = " ".join(f"word{n}" for n in range(40))
    with ScriptedOpenAIServer(lambda body: text_turn(answer, chunks=20)) as llm:
        print(llm.base_url, flush=True)
        sys.stdin.read()


async def child_main(base_url: str, turns: int) -> dict[str, list[list[float]]]:
    """One tree's turns (see the module docstring); ``[ttft, cpu]`` seconds per turn and mode."""
    from clawlet.config import Settings
    from clawlet.events import TextDelta
    from clawlet.home import init_home
    from clawlet.services import Services, build_services

    home = Path(tempfile.mkdtemp(prefix="clawlet-turn-setup-")) / "home"
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        home=home,
        provider="openai",
        llm_base_url=base_url,
        llm_model="scripted-model",
        llm_api_key="bench-key",
    )
    init_home(settings.paths)
    past = time.time() - 60
    for folder, _dirs, names in os.walk(home):
        for name in names:
            os.utime(Path(folder) / name, (past, past))
    services = build_services(settings)

    async def turn(target: Services, session_id: str) -> list[float]:
        started, cpu = time.perf_counter(), time.process_time()
        run = await target.sessions.start_turn(session_id, "Tell me something.", title=False)
        ttft = float("nan")
        async for event in run.events():
            if ttft != ttft and isinstance(event, TextDelta):
                ttft = time.perf_counter() - started
        await run.wait()
        return [ttft, time.process_time() - cpu]

    for n in range(5):
        await turn(services, f"warm-{n}")
    results: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
    for mode in MODES:
        for n in range(turns):
            session_id = f"{mode.replace(' ', '')}-{n}"
            if mode != "fresh":
                for k in range(50):
                    services.transcripts.append(session_id, "user", f"question {k} " * 20)
                    services.transcripts.append(session_id, "assistant", f"answer {k} " * 40)
            results[mode].append(await turn(services, session_id))
    return results


def run_child(src: Path, base_url: str, turns: int) -> dict[str, list[list[float]]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", base_url, "--turns", str(turns)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{src}: {done.stderr[-2000:]}")
    result: dict[str, list[list[float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-src", type=Path, help="the baseline tree's src/ (e.g. ../main/src)")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="this tree's src/")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=30, help="measured turns per mode per round")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.upstream:
        upstream_main()
        return 0
    if args.child:
        print(json.dumps(asyncio.run(child_main(args.child, args.turns))))
        return 0
    if args.base_src is None or args.rounds < 1 or args.turns < 1:
        parser.error("--base-src is required; rounds and turns must be >= 1")
    from support import percentile  # the parent only: children import the tree they measure

    trees = {"base": args.base_src.resolve(), "this": args.src.resolve()}
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--upstream"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(trees["this"])},
    )
    assert upstream.stdout is not None and upstream.stdin is not None
    base_url = upstream.stdout.readline().strip()
    samples: dict[str, dict[str, list[list[float]]]] = {tree: {m: [] for m in MODES} for tree in trees}
    try:
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for tree in order:
                for mode, values in run_child(trees[tree], base_url, args.turns).items():
                    samples[tree][mode] += values
    finally:
        upstream.stdin.close()
        upstream.wait(timeout=60)
    load = os.getloadavg()
    print(
        f"turn set-up: {args.rounds} rounds x {args.turns} turns per mode per tree, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'mode':<10}{'tree':<6}{'TTFT p50':>10}{'TTFT p99':>10}{'CPU/turn p50':>14}")
    stats: dict[tuple[str, str], tuple[float, float, float]] = {}
    for mode in MODES:
        for tree in trees:
            ttft = [value[0] * 1000 for value in samples[tree][mode]]
            cpu = [value[1] * 1000 for value in samples[tree][mode]]
            row = (statistics.median(ttft), percentile(ttft, 99), statistics.median(cpu))
            stats[mode, tree] = row
            print(f"{mode:<10}{tree:<6}{row[0]:>7.2f} ms{row[1]:>7.2f} ms{row[2]:>11.2f} ms")
        this, base = stats[mode, "this"], stats[mode, "base"]
        print(
            f"{'':<10}ratio this/base: TTFT p50 {this[0] / base[0]:.2f}x ({this[0] - base[0]:+.2f} ms), "
            f"CPU/turn {this[2] / base[2]:.2f}x ({this[2] - base[2]:+.2f} ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

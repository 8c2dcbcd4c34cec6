"""Two checkouts' ``compare.py`` run in turn, several times each, their figures as medians.

On a shared machine one run of ``compare.py`` swings by 20-30% with the neighbours' load (the
upstream's own CPU per request, the same code in every run, moves that much), more than most
changes. This runs ``BASE/bench/compare.py`` and this checkout's, alternately (which goes first
alternates too), ``--runs`` times each, every run with the options after ``--``, and prints per
path and phase the median over the runs, with the runs' range, of each tree's added TTFT (p50,
p99), CPU per request, total as a multiple of direct's and, for the bursts, wall multiple and gap
p99. Each checkout runs its own ``compare.py`` on its own ``src`` (``bench/support.py`` puts the
checkout's ``src`` first on the servers' ``PYTHONPATH``), both with this interpreter.

    .venv/bin/python bench/compare_ab.py /tmp/base --runs 5 -- --no-litellm --iterations 30
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROW = re.compile(r"^((?:direct|litellm|clawlet)\S*(?: \S+)*?)\s{2,}([-+\d.].*)$")
SEQUENTIAL = {"+TTFT p50": 5, "+TTFT p99": 6, "CPU/req": 4, "total x": 7}
CONCURRENT = {"+TTFT p50": 5, "CPU/req": 4, "wall x": 9, "gap p99": 10}
FULL_ROW = {"sequential": 9, "concurrent": 12}
"""Cells of a row with every figure (a path measured against a baseline), errors last."""
Figures = dict[tuple[str, str, str], list[float]]
"""(phase, path, figure) → one value per run."""


def parse(output: str) -> Figures:
    """The figures of one ``compare.py`` output (see the module docstring)."""
    figures: Figures = defaultdict(list)
    phase = ""
    for line in output.splitlines():
        if line.startswith("[sequential"):
            phase = "sequential"
        elif line.startswith("[concurrent"):
            phase = "concurrent"
        elif phase and (match := ROW.match(line.rstrip())):
            cells = match[2].split()
            columns = SEQUENTIAL if phase == "sequential" else CONCURRENT
            full = len(cells) == FULL_ROW[phase]  # a baseline (direct) leaves the added figures blank
            for name, index in columns.items():
                if (full or name == "CPU/req") and cells[index] != "-":  # "-": not measured there
                    figures[phase, match[1], name].append(float(cells[index].rstrip("x")))
    return figures


def run(checkout: Path, options: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, str(checkout / "bench" / "compare.py"), *options],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: compare.py failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, options = _split(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other checkout (its bench/compare.py and src/)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each checkout (5)")
    args = parser.parse_args(own)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    trees = {"base": args.base.resolve(), "this": HERE.parent}
    results: dict[str, list[Figures]] = {"base": [], "this": []}
    for number in range(args.runs):
        for tree in ("base", "this") if number % 2 == 0 else ("this", "base"):
            output = run(trees[tree], options)
            results[tree].append(parse(output))
            load = next((line for line in output.splitlines() if line.startswith("compare:")), "")
            print(f"run {number + 1} {tree}: {load}", flush=True)
    keys = sorted({key for figures in results["base"] + results["this"] for key in figures})
    print(f"\nmedians of {args.runs} runs each (the runs' range): base {trees['base']}, this {trees['this']}")
    print(f"{'phase':<11}{'path':<30}{'figure':<11}{'base':>24}{'this':>24}")
    for phase, path, name in keys:
        cells = []
        for tree in ("base", "this"):
            values = [value for figures in results[tree] for value in figures.get((phase, path, name), [])]
            cells.append(
                f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "-"
            )
        print(f"{phase:<11}{path:<30}{name:<11}{cells[0]:>24}{cells[1]:>24}")
    return 0


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """This script's arguments and ``compare.py``'s (after ``--``)."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


if __name__ == "__main__":
    raise SystemExit(main())

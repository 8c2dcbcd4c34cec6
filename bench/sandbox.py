"""What the tool sandbox (bubblewrap) costs per tool call.

Times the real ``terminal`` tool running ``true`` and the real ``python_repl`` tool running ``pass``
with ``CLAWLET_SANDBOX=auto`` (bubblewrap) and ``off`` (a plain subprocess, the baseline),
interleaved call by call so that machine noise affects both, on a throw-away clawlet home.
Prints median and p90 (nearest rank) per tool and mode and the sandboxed / baseline ratio.

Run from the repository root: ``.venv/bin/python bench/sandbox.py [--calls 50] [--warmup 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from langchain_core.tools import BaseTool

from clawlet.config import HomePaths
from clawlet.home import init_home
from clawlet.tools.python_repl import make_python_tool
from clawlet.tools.sandbox import ToolSandbox, bubblewrap_problem
from clawlet.tools.terminal import make_terminal_tool
from support import percentile


async def timed(tool: BaseTool, arguments: dict[str, str]) -> float:
    started = time.perf_counter()
    await tool.ainvoke(arguments)
    return (time.perf_counter() - started) * 1000


async def measure(home: Path, calls: int, warmup: int) -> dict[tuple[str, str], list[float]]:
    sandboxes = {"bubblewrap": ToolSandbox(home, "bubblewrap"), "off": ToolSandbox(home, "off")}
    cases = {
        "terminal": ({"command": "true"}, make_terminal_tool),
        "python_repl": ({"code": "pass"}, make_python_tool),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for tool_name, (arguments, factory) in cases.items():
        tools = {mode: factory(home, 30.0, sandbox) for mode, sandbox in sandboxes.items()}
        for index in range(warmup + calls):
            for mode, tool in tools.items():
                elapsed = await timed(tool, arguments)
                if index >= warmup:
                    samples.setdefault((tool_name, mode), []).append(elapsed)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    problem = bubblewrap_problem()
    if problem is not None:
        print(f"bubblewrap is unusable here: {problem}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="clawlet-bench-sandbox-") as raw:
        paths = HomePaths(Path(raw).resolve())
        init_home(paths)
        samples = asyncio.run(measure(paths.root, args.calls, args.warmup))
    print(f"tool sandbox: {args.calls} calls per tool and mode (+{args.warmup} warm-up), interleaved")
    print(f"{'tool':<12} {'mode':<11} {'median':>10} {'p90':>10}")
    for (tool_name, mode), values in samples.items():
        print(
            f"{tool_name:<12} {mode:<11} {statistics.median(values):>7.1f} ms "
            f"{percentile(values, 90):>7.1f} ms"
        )
    for tool_name in ("terminal", "python_repl"):
        sandboxed = statistics.median(samples[(tool_name, "bubblewrap")])
        baseline = statistics.median(samples[(tool_name, "off")])
        print(
            f"ratio bubblewrap/off (median), {tool_name}: {sandboxed / baseline:.2f}x "
            f"(+{sandboxed - baseline:.1f} ms per call)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

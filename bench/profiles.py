"""``--profile DIR`` of the benchmarks: cProfile every clawlet server process started afterwards
(see ``bench/profiling/sitecustomize.py``) and summarize what they wrote.

:func:`enable_profiling` puts ``bench/profiling`` first on this process's ``PYTHONPATH`` and sets
``BENCH_PROFILE_DIR``, so every child started from then on (which inherits the environment; the
benchmarks' :func:`support.clean_environ` keeps both) profiles itself if it is one of clawlet's
server processes. :func:`profile_report` merges the ``<role>-<pid>.prof`` files per role and prints
the functions with the most own time (``tottime``), time spent waiting in the event loop's
``select`` left out of the percentages.
"""

from __future__ import annotations

import os
import pstats
import signal
import time
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent / "profiling"
IDLE = ("select", "poll", "epoll")
"""Functions whose own time is the event loop waiting for work."""


def enable_profiling(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["BENCH_PROFILE_DIR"] = str(directory.resolve())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK_DIR), os.environ.get("PYTHONPATH")]))


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("clawlet") :] if "clawlet" in parts else parts[-2:])
    return f"{short}:{line} {name}"


def profile_report(directory: Path, top: int = 15) -> None:
    """Per role: the profiled processes, their total own time (event-loop waits apart) and the
    ``top`` functions by own time, with their share of it and cumulative time."""
    files: dict[str, list[Path]] = {}
    for path in sorted(directory.glob("*.prof")):
        files.setdefault(path.stem.rsplit("-", 1)[0], []).append(path)
    print(f"\n=== profiles (cProfile of each process's main thread, {directory})")
    for role, paths in sorted(files.items()):
        stats = pstats.Stats(*(str(path) for path in paths))
        table = stats.stats  # type: ignore[attr-defined]
        idle = sum(row[2] for func, row in table.items() if any(word in func[2] for word in IDLE))
        busy = sum(row[2] for row in table.values()) - idle
        print(
            f"[{role}] {len(paths)} process(es): {busy:.1f} s of own time in Python and C calls "
            f"(+{idle:.1f} s waiting in select/poll)"
        )
        print(f"  {'own s':>7} {'share':>6} {'cum s':>7} {'calls':>9}  function")
        rows = sorted(
            ((func, row) for func, row in table.items() if not any(word in func[2] for word in IDLE)),
            key=lambda item: -item[1][2],
        )
        for func, (_primitive, calls, own, cumulative, _callers) in rows[:top]:
            share = own / busy * 100 if busy > 0 else 0.0
            print(f"  {own:>7.2f} {share:>5.1f}% {cumulative:>7.2f} {calls:>9}  {_label(func)}")


def request_profiles(directory: Path, pids: list[int], timeout: float = 30.0) -> None:
    """Make the profiled processes ``pids`` write what they have now (``SIGUSR1``), before they are
    stopped (one killed on its way out would write nothing); waits until each has written."""
    before = {pid: _mtime(directory, pid) for pid in pids}
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while any(_mtime(directory, pid) == before[pid] for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _mtime(directory: Path, pid: int) -> int:
    return max((path.stat().st_mtime_ns for path in directory.glob(f"*-{pid}.prof")), default=0)

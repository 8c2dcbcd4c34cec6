"""Smoke test of ``bench/compare.py``: a tiny run without LiteLLM finishes cleanly and prints a row
for every path in both phases, the session with history in the sequential one (no timing is
asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("direct", "clawlet /v1", "clawlet /api/chat", "clawlet /api/agent", "clawlet chat.send")


def test_compare_runs_every_path_in_both_phases(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    command = [
        sys.executable,
        str(ROOT / "bench" / "compare.py"),
        "--no-litellm",
        *("--iterations", "2", "--warmup", "0", "--concurrency", "2", "--chunks", "5", "--history", "2"),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    sequential, _, concurrent = done.stdout.partition("[concurrent")
    assert "[sequential" in sequential and concurrent
    history = ("direct +2 turns", "clawlet /api/chat +2 turns")
    for phase, paths in ((sequential, (*PATHS, *history)), (concurrent, PATHS)):
        rows = {line[:28].strip(): line.split() for line in phase.splitlines()}
        for path in paths:
            assert path in rows, phase
            assert rows[path][-1] == "0"  # errors
    assert "+2 turns" not in concurrent  # one session runs one turn at a time
    rows = {line[:28].strip(): line.split() for line in sequential.splitlines()}
    assert rows["clawlet /api/chat +2 turns"][-4].startswith("+")  # added TTFT, against direct +2 turns
    assert not any(cell.startswith("+") for cell in rows["direct +2 turns"][3:])  # a baseline: nothing added
    assert "load average at start" in done.stdout
    assert "litellm" not in done.stdout


def test_burst_ab_runs_every_path_for_both_trees(tmp_path: Path) -> None:
    """``bench/burst_ab.py``, tiny: both servers answer every path's burst with no error."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    src = str(ROOT / "src")
    command = [sys.executable, str(ROOT / "bench" / "burst_ab.py"), src, src]
    command += ["--rounds", "1", "--concurrency", "2", "--chunks", "5", "--delay", "0"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.strip()}
    for path in ("v1", "api/chat", "api/agent", "chat.send"):
        assert rows[path][-1] == "0", done.stdout  # errors


def test_compare_ab_runs_both_checkouts_and_prints_medians(tmp_path: Path) -> None:
    """``bench/compare_ab.py``, tiny, this checkout against itself: a median for both, every path."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    command = [sys.executable, str(ROOT / "bench" / "compare_ab.py"), str(ROOT), "--runs", "1", "--"]
    command += ["--no-litellm", "--no-gateway", "--iterations", "2", "--warmup", "0", "--concurrency", "2"]
    command += ["--chunks", "5", "--history", "0"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("load average at start") == 2  # one run of each
    rows = [
        line.split() for line in done.stdout.splitlines() if line.startswith(("sequential", "concurrent"))
    ]
    figures = {(row[0], " ".join(row[1:3]), row[3]) for row in rows if row[1] == "clawlet"}
    for path in ("clawlet /v1", "clawlet /api/chat", "clawlet /api/agent"):
        assert ("sequential", path, "CPU/req") in figures, done.stdout
        assert ("concurrent", path, "wall") in figures, done.stdout  # "wall x"
    assert all(row[-2] != "-" and row[-1] != "-" for row in rows if row[1] == "clawlet")


@pytest.mark.parametrize("path", ["v1", "api"])
def test_ttft_marks_reports_every_step_of_a_turn(tmp_path: Path, path: str) -> None:
    """``bench/ttft_marks.py``, tiny: every mark of the hook shows up in the report, in order (the
    hook's patches still find what they patch), from the request's bytes to the client's read."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    command = [sys.executable, str(ROOT / "bench" / "ttft_marks.py"), "--requests", "2", "--chunks", "5"]
    done = subprocess.run(
        [*command, "--path", path], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line[:44].strip() for line in done.stdout.splitlines()[2:]]
    assert steps[0] == "client sends" and steps[-1] == "client reads the first text", done.stdout
    for step in (
        "request bytes",
        "start_turn",
        "transcript write starts",
        "engine stream",
        "model call (first middleware)",
        "request to the model",
        "model headers",
        "the engine yields the text",
        "a watcher gets the text",
        "text sent",
    ):
        assert step in steps, done.stdout
    assert steps.index("request bytes") < steps.index("start_turn") < steps.index("engine stream")

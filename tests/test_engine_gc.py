"""After a serving process's first turn, what that turn loaded is frozen out of the collector's
reach too (:mod:`clawlet.gcpolicy`), but never while another turn runs; once no turn has run for
a while, memory is released (a full collection, ``malloc_trim``); a process that did not freeze at
start-up is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawlet import gcpolicy

SCRIPT = r"""
import asyncio, gc, json, sys, time
from clawlet import gcpolicy
from clawlet.config import Settings
from clawlet.home import init_home
from clawlet.services import build_services

settings = Settings()
init_home(settings.paths)
services = build_services(settings)
if sys.argv[1] == "serving":
    gc.collect()
    gc.freeze()  # what `clawlet serve` does before it serves
counts = [gc.get_freeze_count()]

gcpolicy.QUIET_SECONDS = 0.05
gcpolicy.MIN_RELEASE_INTERVAL = 0.05

async def turn(n):
    run = await services.sessions.start_turn("s", f"hello {n}", title=False)
    await run.wait()
    await asyncio.sleep(0)  # the loop runs what the turn's end scheduled

async def turns():
    gcpolicy.turn_started()  # a turn of another workspace, in flight
    await turn(0)
    counts.append(gc.get_freeze_count())  # not frozen while it runs
    gcpolicy.after_turn()
    await asyncio.sleep(0)
    counts.append(gc.get_freeze_count())
    await turn(1)
    counts.append(gc.get_freeze_count())
    counts.append(gc.get_threshold()[0])
    counts.append(gcpolicy.release_scheduled())
    deadline = time.monotonic() + 60
    while gcpolicy.release_scheduled() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    counts.append(gcpolicy.releases)

asyncio.run(turns())
print(json.dumps(counts))
"""


def freeze_counts(mode: str, home: Path) -> list[int]:
    env = {**os.environ, "CLAWLET_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    counts: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


@pytest.mark.slow
def test_the_first_turn_of_a_serving_process_freezes_what_it_loaded(tmp_path: Path) -> None:
    at_start, during_other, after_first, after_second, threshold, scheduled, releases = freeze_counts(
        "serving", tmp_path / "home"
    )
    assert at_start > 0
    assert during_other <= at_start  # another turn was still running: nothing frozen yet
    assert after_first > at_start  # what the first turn built is frozen too, once no turn runs
    assert after_second <= after_first  # once (frozen objects freed by reference counting leave)
    assert threshold == gcpolicy.THRESHOLDS[0]
    assert scheduled and releases >= 1  # once quiet, memory was released


@pytest.mark.slow
def test_a_process_that_did_not_freeze_is_left_alone(tmp_path: Path) -> None:
    # Python's default threshold, and no release of memory scheduled
    assert freeze_counts("plain", tmp_path / "home") == [0, 0, 0, 0, 700, False, 0]


def test_the_freeze_count_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``gc.get_freeze_count()`` walks every frozen object (~6 ms in a serving
    process); asked after every turn it was 40% of a server's CPU."""
    asked: list[int] = []

    def counted() -> int:
        asked.append(1)
        return 0

    monkeypatch.setattr(gcpolicy, "_serving", None)
    monkeypatch.setattr(gcpolicy.gc, "get_freeze_count", counted)
    for _ in range(20):
        gcpolicy.turn_started()
        gcpolicy.after_turn()
    assert len(asked) == 1

"""Keeps the fast set fast: a test that starts one of the slow programs must be marked ``slow``.

``pytest -m "not slow"`` (the fast set, README's Development section) leaves out the tests marked
``slow``: among them every test that starts a ``clawlet`` process (``serve``, the control plane, an
exec plane, a session process, an engine worker, any CLI command), a browser (Playwright),
Redis, PostgreSQL, OpenClaw or HAProxy. :func:`note_slow_programs` notes every
:class:`subprocess.Popen` (``asyncio``'s subprocesses included) and :func:`check_slow_programs`
(tests/conftest.py calls it after each test's teardown) fails a test that is not marked and started
one, naming the program, so the rule cannot drift silently. The rule's other half (a test that
takes more than about a second is ``slow`` too) is not checked: no test asserts wall-clock time.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from itertools import takewhile
from typing import Any

import pytest

#: Programs (the base name of the executable or of a script it runs) only a ``slow`` test starts.
SLOW_PROGRAMS = frozenset(
    {
        "clawlet",
        "chromium",
        "chrome",
        "redis-server",
        "test-redis",
        "postgres",
        "initdb",
        "pg_ctl",
        "test-postgres",
        "openclaw",
        "openclaw.mjs",
        "haproxy",
    }
)


#: Interpreters whose first argument names the program (a script) that runs.
INTERPRETERS = ("python", "node", "sh", "bash", "env")


def slow_program(args: Any) -> str | None:
    """The slow program the command line ``args`` (as :class:`subprocess.Popen` takes it) starts,
    or ``None``: a listed executable, or a listed script an interpreter runs, ``python -m
    clawlet...``, or Playwright's driver. Only the program's place counts, not its arguments (a
    sandbox's ``--bind .../clawlet`` is not a clawlet process)."""
    words: Sequence[Any]
    if isinstance(args, str):
        words = args.split()  # a command for the shell: its words are enough to find the program
    elif isinstance(args, bytes | os.PathLike):
        words = [args]
    else:
        words = args
    texts = [os.fsdecode(word) for word in words]
    if not texts:
        return None
    programs = texts[:1]
    if os.path.basename(texts[0]).startswith(INTERPRETERS):
        options = list(takewhile(lambda text: text.startswith("-"), texts[1:]))  # python -u -m clawlet
        after = texts[len(options) + 1 : len(options) + 2]
        if options[-1:] == ["-m"] and after and after[0].partition(".")[0] == "clawlet":
            return f"python -m {after[0]}"
        programs += texts[1:2]
    for program in programs:
        if os.path.basename(program) in SLOW_PROGRAMS:
            return os.path.basename(program)
        if "playwright" in program:  # its driver, which starts the browser
            return "playwright"
    return None


#: The slow programs started (by any thread) since the current test's setup began.
STARTED: list[str] = []


def note_slow_programs() -> None:
    """Make every :class:`subprocess.Popen` of this process note the slow program it starts in
    :data:`STARTED` (once per process; the program still starts as it would)."""
    original = subprocess.Popen.__init__
    if getattr(original, "notes_slow_programs", False):
        return

    def noting(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        program = slow_program(args)
        if program is not None:
            STARTED.append(program)
        original(self, args, *rest, **options)

    noting.notes_slow_programs = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = noting  # type: ignore[method-assign]


def check_slow_programs(test: pytest.Item) -> None:
    """Fail ``test`` if it is not marked ``slow`` and started a slow program (its fixtures, of any
    scope, included) since its setup began."""
    started, STARTED[:] = sorted(set(STARTED)), []
    if started and test.get_closest_marker("slow") is None:
        pytest.fail(
            f"{test.nodeid} starts {', '.join(started)}: mark it @pytest.mark.slow (the fast set,"
            ' `pytest -m "not slow"`, leaves those out; tests/support/slow_programs.py)',
            pytrace=False,
        )

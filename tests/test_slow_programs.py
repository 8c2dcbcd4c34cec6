"""The fast set's guard (tests/support/slow_programs.py): which command lines start a slow
program, and that a test not marked ``slow`` which starts one fails, naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.slow_programs import STARTED, check_slow_programs, slow_program


@pytest.mark.parametrize(
    ("args", "program"),
    [
        ([sys.executable, "-m", "clawlet", "serve", "--port", "1"], "python -m clawlet"),
        (
            [sys.executable, "-m", "clawlet.execplane.session_child"],
            "python -m clawlet.execplane.session_child",
        ),
        ([sys.executable, "-u", "-m", "clawlet", "exec-plane"], "python -m clawlet"),
        ([sys.executable, "-m", "http.server", "clawlet"], None),
        (["/venv/bin/clawlet", "control-plane"], "clawlet"),
        (["/usr/bin/chromium", "--headless"], "chromium"),
        (["node", "/x/playwright/driver/package/cli.js", "run-driver"], "playwright"),
        ("redis-server --port 6390", "redis-server"),
        ([Path("scripts/test-postgres"), "start", "/tmp/pg"], "test-postgres"),
        ([b"/usr/sbin/haproxy", b"-c"], "haproxy"),
        (["/cache/openclaw/bin/openclaw", "gateway"], "openclaw"),
        (["bash", "scripts/test-redis", "start", "/tmp/r"], "test-redis"),
        ([sys.executable, "-c", "pass"], None),
        (["bwrap", "--ro-bind", "/home/u/clawlet", "/home/u/clawlet", "python3", "-c", "1"], None),
        (["bwrap", "--", "sh", "-c", "echo clawlet serve"], None),
        ([sys.executable, "tests/support/mcp_server.py"], None),
    ],
)
def test_the_slow_programs_are_found_on_their_command_lines(args: Any, program: str | None) -> None:
    assert slow_program(args) == program


def test_a_test_not_marked_slow_that_starts_one_fails_naming_it(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    subprocess.run([fake, "--port", "0"], check=True)
    assert STARTED == ["redis-server"]
    with pytest.raises(pytest.fail.Exception, match=r"starts redis-server: mark it @pytest\.mark\.slow"):
        check_slow_programs(request.node)  # what tests/conftest.py runs after the teardown
    assert STARTED == []  # noted once: the hook after this test's teardown finds nothing


@pytest.mark.slow
def test_a_test_marked_slow_may_start_one(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    subprocess.run([fake], check=True)
    check_slow_programs(request.node)
    assert STARTED == []

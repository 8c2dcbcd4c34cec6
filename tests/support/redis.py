"""Redis for the tests: a throw-away ``redis-server`` started with ``scripts/test-redis``.

``scripts/test`` starts one for the whole suite and sets ``CLAWLET_TEST_REDIS_URL``; a test that
stops or kills its server, or must not share keys, starts one of its own (:class:`RedisServer`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_REDIS = ROOT / "scripts" / "test-redis"
# Read at import: the autouse ``clawlet_home`` fixture removes every CLAWLET_* variable.
SHARED_REDIS_URL = os.environ.get("CLAWLET_TEST_REDIS_URL", "")
HAVE_REDIS_SERVER = subprocess.run([TEST_REDIS, "find"], capture_output=True, check=False).returncode == 0
NO_REDIS_SERVER = "redis-server not found (install the redis-server package)"
requires_redis_server = pytest.mark.skipif(not HAVE_REDIS_SERVER, reason=NO_REDIS_SERVER)
SKIP_REASON = (
    ""
    if SHARED_REDIS_URL or HAVE_REDIS_SERVER
    else "Redis not available: install redis-server, run scripts/test, or set CLAWLET_TEST_REDIS_URL"
)


class RedisServer:
    """A redis-server of scripts/test-redis in ``directory`` (stopped and removed by :meth:`stop`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.url = ""

    def start(self) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        run = subprocess.run(
            [TEST_REDIS, "start", self.directory], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        self.url = run.stdout.strip()
        return self.url

    def kill(self) -> None:
        """SIGKILL the server (its port stays reserved for :meth:`restart`)."""
        os.kill(int((self.directory / "redis.pid").read_text()), signal.SIGKILL)

    def restart(self) -> None:
        run = subprocess.run(
            [TEST_REDIS, "restart", self.directory], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr

    def stop(self) -> None:
        subprocess.run([TEST_REDIS, "stop", self.directory], capture_output=True, timeout=120, check=False)

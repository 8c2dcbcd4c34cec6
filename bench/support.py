"""What the benchmarks share: a clawlet server in a thread and the nearest-rank percentile."""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import uvicorn

REPO_SRC = Path(__file__).resolve().parent.parent / "src"
if str(REPO_SRC) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO_SRC))

from clawlet.api.app import create_app  # noqa: E402
from clawlet.config import Settings  # noqa: E402


class ClawletServer:
    """The clawlet app on a free loopback port, served by uvicorn in a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            backlog=4096,  # hundreds of connections may arrive at once
            timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("clawlet server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0–100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]

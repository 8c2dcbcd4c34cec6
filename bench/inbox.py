"""Task inbox latency with 10,000 tasks in the database, against an empty database.

One run starts, on loopback and fully offline, two ``clawlet serve`` child processes (each with a
throw-away ``CLAWLET_HOME`` and an ``openclaw.json`` declaring agents ``main``, ``travel`` and
``writer``; the offline demo model answers the tasks):

* **empty**: its inbox database starts empty (it holds only the tasks this run creates), and
* **10k**: ``--tasks`` tasks (default 10,000) are seeded straight into its SQLite database
  (``sqlite3.executemany``, one transaction) once it is up: spread over the three agents and all
  six statuses, each with one user message. Seeding after the start keeps the server's start-up
  recovery (running → failed, pending → started) away from the seeded tasks.

The servers run in their own processes so that the HTTP client does not share their GIL. Then it
measures, over HTTP with one keep-alive ``httpx.Client`` per server, each operation on both
servers, interleaved so that machine noise hits both alike:

1. ``POST /api/v1/tasks`` (``--posts`` per server, agents main/travel/writer in turn): the time to
   the 201. Each new task runs in the background (the demo model streams its answer for ~0.8 s);
   the benchmark waits, untimed, until it is finished before the next request, so every figure is
   taken on an idle server;
2. ``GET /api/v1/tasks`` (the default limit of 50), ``?agentId=travel``, ``?status=running,waiting``
   and ``GET /api/v1/tasks/{id}/messages`` of a task created in step 1 (``--iterations`` each).

It prints p50/p90/p99 (nearest rank) per operation and server, the rows each list returned, and
the 10k / empty ratios, plus how long seeding took.

Run from the repository root (about a minute with the defaults)::

    .venv/bin/python bench/inbox.py [--tasks 10000] [--posts 25] [--iterations 100]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import title_from
from clawlet.inbox.states import FINISHED, STATUSES
from support import ClawletProcess, percentile

AGENTS = ("main", "travel", "writer")
AGENT_WEIGHTS = (2, 1, 1)  # half the seeded tasks are main's
OPENCLAW_CONFIG = {
    "agents": {
        "list": [
            {"id": "main", "subagents": {"allowAgents": ["travel", "writer"]}},
            {"id": "travel", "name": "T"},
            {"id": "writer", "name": "W"},
        ]
    }
}
DB_RELATIVE = Path("data") / "agent_channel_v2.db"
SEED_SPAN_MS = 30 * 24 * 3600 * 1000  # seeded tasks were created over the last 30 days
RUN_TIMEOUT = 60.0  # seconds a created task may take to finish

OPERATIONS = (
    ("POST /api/v1/tasks", None),
    ("GET /api/v1/tasks", "/api/v1/tasks"),
    ("GET ?agentId=travel", "/api/v1/tasks?agentId=travel"),
    ("GET ?status=running,waiting", "/api/v1/tasks?status=running,waiting"),
    ("GET /tasks/{id}/messages", None),
)


@dataclass
class Side:
    """One server and what was measured on it."""

    name: str
    server: ClawletProcess
    client: httpx.Client | None = None
    created: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def http(self) -> httpx.Client:
        assert self.client is not None
        return self.client


def write_openclaw_config(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "openclaw.json").write_text(json.dumps(OPENCLAW_CONFIG, indent=2), encoding="utf-8")


def seed(db_file: Path, count: int, rng: random.Random) -> tuple[float, float, dict[str, int]]:
    """Insert ``count`` tasks with one user message each; (build seconds, insert seconds, by status)."""
    start = time.perf_counter()
    now = int(time.time() * 1000)
    created = sorted(rng.randrange(now - SEED_SPAN_MS, now - 3_600_000) for _ in range(count))
    task_rows: list[tuple[Any, ...]] = []
    message_rows: list[tuple[Any, ...]] = []
    by_status: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for number, created_at in enumerate(created):
        agent = rng.choices(AGENTS, AGENT_WEIGHTS)[0]
        status = rng.choice(STATUSES)
        by_status[status] += 1
        updated_at = created_at + rng.randrange(0, 3_600_000)
        completed_at = updated_at if status in FINISHED else None
        content = f"Seeded task {number}: plan the {agent} work item {rng.randrange(10**6)}\nmore details"
        task_id = new_ulid(created_at)  # ascending times, so the ids stay time-ordered
        task_rows.append(
            (task_id, agent, title_from(content), 0, status, created_at, updated_at, completed_at)
        )
        message_rows.append((new_ulid(created_at), task_id, "user", content, created_at))
    built = time.perf_counter() - start

    start = time.perf_counter()
    connection = sqlite3.connect(db_file, timeout=30)
    try:
        with connection:  # one transaction
            connection.executemany(
                "INSERT INTO tasks (id, agent_id, title, title_locked, status, created_at, updated_at,"
                " completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                task_rows,
            )
            connection.executemany(
                "INSERT INTO messages (id, task_id, sender_type, content, timestamp) VALUES (?, ?, ?, ?, ?)",
                message_rows,
            )
        total = connection.execute("SELECT count(*) FROM tasks").fetchone()[0]
    finally:
        connection.close()
    if total < count:
        raise RuntimeError(f"seeding left {total} tasks, expected at least {count}")
    return built, time.perf_counter() - start, by_status


def wait_finished(client: httpx.Client, task_id: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        response = client.get(f"/api/v1/tasks/{task_id}")
        response.raise_for_status()
        if response.json()["status"] not in ("pending", "running"):
            return
        time.sleep(0.02)
    raise RuntimeError(f"task {task_id} did not finish within {RUN_TIMEOUT:g} s")


def post_task(side: Side, number: int, record: bool) -> None:
    body = {"content": f"bench task {number}: summarise the week", "agentId": AGENTS[number % len(AGENTS)]}
    start = time.perf_counter()
    response = side.http.post("/api/v1/tasks", json=body)
    elapsed = time.perf_counter() - start
    if response.status_code != 201:
        raise RuntimeError(f"{side.name}: POST /api/v1/tasks → {response.status_code} {response.text[:200]}")
    task_id = response.json()["id"]
    side.created.append(task_id)
    wait_finished(side.http, task_id)  # untimed: the next request finds the server idle
    if record:
        side.samples.setdefault(OPERATIONS[0][0], []).append(elapsed)


def get(side: Side, name: str, path: str, record: bool) -> None:
    start = time.perf_counter()
    response = side.http.get(path)
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise RuntimeError(f"{side.name}: GET {path} → {response.status_code} {response.text[:200]}")
    if record:
        side.samples.setdefault(name, []).append(elapsed)
        side.rows[name] = len(response.json())


def measure(sides: list[Side], posts: int, iterations: int, warmup: int) -> None:
    for number in range(warmup + posts):
        ordered = sides if number % 2 == 0 else sides[::-1]  # neither side always goes first
        for side in ordered:
            post_task(side, number, record=number >= warmup)
    for index in range(warmup + iterations):
        ordered = sides if index % 2 == 0 else sides[::-1]
        for name, path in OPERATIONS[1:]:
            for side in ordered:
                target = path or f"/api/v1/tasks/{side.created[index % len(side.created)]}/messages"
                get(side, name, target, record=index >= warmup)


def ms(value: float) -> str:
    return f"{value * 1000:.2f}"


def report(empty: Side, seeded: Side) -> None:
    header = (
        f"{'operation':<29}{'empty p50':>10}{'p90':>7}{'p99':>7}{'rows':>6}"
        f"{'10k p50':>10}{'p90':>7}{'p99':>7}{'rows':>6}{'ratio p50':>11}{'p99':>7}"
    )
    print(header)
    for name, _ in OPERATIONS:
        cells = []
        for side in (empty, seeded):
            values = side.samples[name]
            rows = str(side.rows.get(name, "-"))
            p50, p90, p99 = (percentile(values, pct) for pct in (50, 90, 99))
            cells.append((p50, p90, p99, rows))
        (e50, e90, e99, erows), (s50, s90, s99, srows) = cells
        print(
            f"{name:<29}{ms(e50):>10}{ms(e90):>7}{ms(e99):>7}{erows:>6}"
            f"{ms(s50):>10}{ms(s90):>7}{ms(s99):>7}{srows:>6}{s50 / e50:>10.2f}x{s99 / e99:>6.2f}x"
        )
    print("(milliseconds, client-side: request sent to response read; rows = list length returned)")


def restart(side: Side) -> float:
    """Seconds from starting a new ``clawlet serve`` on the side's home until it is ready (its
    start-up recovery included)."""
    if side.client is not None:
        side.client.close()
    side.server.stop()
    started = time.perf_counter()
    side.server.start()
    elapsed = time.perf_counter() - started
    side.client = httpx.Client(base_url=side.server.url, timeout=30)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks seeded into the 10k server (10000)")
    parser.add_argument("--posts", type=int, default=25, help="measured POST /api/v1/tasks per server (25)")
    parser.add_argument(
        "--iterations", type=int, default=100, help="measured requests per GET operation (100)"
    )
    parser.add_argument(
        "--warmup", type=int, default=3, help="unmeasured rounds of every operation first (3)"
    )
    parser.add_argument("--seed", type=int, default=4, help="random seed of the generated tasks (4)")
    args = parser.parse_args(argv)
    if min(args.tasks, args.posts, args.iterations) < 1 or args.warmup < 0:
        parser.error("tasks, posts and iterations must be >= 1, warmup >= 0")
    # a plain `kill` also runs the clean-up below (stopping both servers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    with tempfile.TemporaryDirectory(prefix="clawlet-bench-inbox-") as tmp:
        sides = [
            Side("empty", ClawletProcess(Path(tmp) / "empty")),
            Side("10k", ClawletProcess(Path(tmp) / "10k")),
        ]
        try:
            for side in sides:
                write_openclaw_config(side.server.home)
                side.server.start()
                side.client = httpx.Client(base_url=side.server.url, timeout=30)
            built, inserted, by_status = seed(
                sides[1].server.home / DB_RELATIVE, args.tasks, random.Random(args.seed)
            )
            print(
                f"inbox: {args.tasks} seeded tasks (agents {'/'.join(AGENTS)}, all six statuses, one user "
                f"message each) against an empty database; clawlet serve subprocesses, {os.cpu_count()} CPUs"
            )
            print(
                f"seeding: {args.tasks} tasks + {args.tasks} messages in {built + inserted:.2f} s "
                f"(rows built {built:.2f} s, sqlite3 executemany {inserted:.2f} s); "
                + ", ".join(f"{status} {n}" for status, n in by_status.items())
            )
            started = time.perf_counter()
            measure(sides, args.posts, args.iterations, args.warmup)
            print(
                f"measured {args.posts} POSTs and {args.iterations} requests per GET operation on each "
                f"server (+{args.warmup} warm-up) in {time.perf_counter() - started:.1f} s\n"
            )
            report(sides[0], sides[1])
            restarts = [restart(side) for side in sides]
            print(
                f"\nrestart (stop, start on the same home, until /health/ready): empty {restarts[0]:.2f} s, "
                f"10k {restarts[1]:.2f} s ({restarts[1] / restarts[0]:.2f}x); the 10k server marks its "
                f"{by_status.get('running', 0)} stale running tasks failed at start and queues its "
                f"{by_status.get('pending', 0)} pending ones"
            )
        except Exception:
            for side in sides:
                if side.server.process is not None:
                    print(f"--- {side.name} server log (tail) ---\n{side.server.log_tail()}", file=sys.stderr)
            raise
        finally:
            for side in sides:
                if side.client is not None:
                    side.client.close()
                side.server.stop()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted (both servers stopped)", file=sys.stderr)
        raise SystemExit(130) from None

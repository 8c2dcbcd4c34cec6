"""bench/cluster.py's scale figure (issue 15): many simulated execution planes on two control-plane
instances.

Two ``clawlet control-plane serve`` processes (instances A and B, each its own data directory) share
one database — PostgreSQL from ``scripts/test-postgres`` when its binaries are there, else one SQLite
file — the VM-token secret (``CLAWLET_CP_JWT_SECRET``) and, when ``redis-server`` is installed, one
Redis (``CLAWLET_REDIS_URL``, cluster mode v2's broker). The execution planes are
:class:`clawlet.testing.sim_exec_plane.SimExecPlane` clients in this process, every one a user of
its own with real credentials (``ControlPlane.issue_vm_credentials``: a ticket, a JWT), connected to
A or B alternately, heartbeating every ``--heartbeat-seconds`` with acknowledgements.

1. **baseline**: :data:`BASELINE_PLANES` planes connect and are held for three heartbeat intervals;
   routing is measured (step 4) with only them connected;
2. **connect** the others, :data:`CONNECT_BATCH` at a time (credentials issued per batch: tickets
   live 30 s); the time to ``init`` of each;
3. **hold** all of them ``--hold-seconds``: how many are still connected (this side, and each
   instance's ``/health``), heartbeats sent and acknowledged, the acknowledgement's round trip
   p50/p99 (against the baseline's), each instance's CPU time, and its memory per connection (RSS
   and USS from ``/proc/<pid>/smaps_rollup`` after the hold minus after the baseline, when the
   instance is warm — its baseline planes connected, routing requests served —, ÷ the connections
   added in between);
4. **routing**: ``GET /api/sessions`` with the bearer token of a user whose plane is connected to A
   (made with the CLI, ``clawlet control-plane add-user``), sent to A and to B, interleaved; p50/p99
   of each and the ratio B / A — what going through the other instance costs. A request counts as
   routed only when the user's simulated plane answered it (an ``http_request`` frame through the
   tunnel); otherwise the figure says ``routing: not available (…)`` with what came back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.controlplane.server import ControlPlane, ControlPlaneConfig, new_jwt_secret
from clawlet.testing.sim_exec_plane import SimExecPlane
from support import REPO_SRC, clean_environ, free_port, percentile, process_cpu, smaps_rollup

BASELINE_PLANES = 10
CONNECT_BATCH = 50
ROUTING_USERS = 4
ROUTING_WARMUP = 5
CONNECT_TIMEOUT = 60.0
REPO = REPO_SRC.parent


def raise_fd_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` raised to the hard limit (children inherit it); the new value."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- the shared database and Redis ----------------------------------------------------------------


@contextlib.contextmanager
def shared_database(tmp: Path) -> Iterator[tuple[str, str]]:
    """``(url, description)``: a throw-away PostgreSQL (``scripts/test-postgres``), else SQLite."""
    script = REPO / "scripts" / "test-postgres"
    found = subprocess.run([str(script), "find"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        yield f"sqlite:///{tmp / 'controlplane.db'}", "SQLite (one file)"
        return
    # its own directory under /tmp: the server may run as another user (`postgres` when we are root)
    pg_dir = Path(tempfile.mkdtemp(prefix="clawlet-bench-pg-"))
    url = subprocess.run(
        [str(script), "start", str(pg_dir)], capture_output=True, text=True, check=True
    ).stdout.strip()
    version = Path(found.stdout.strip()).parent.name
    try:
        yield url, f"PostgreSQL {version}"
    finally:
        subprocess.run([str(script), "stop", str(pg_dir)], capture_output=True, check=False)


@contextlib.contextmanager
def shared_redis(tmp: Path) -> Iterator[str | None]:
    """A throw-away ``redis-server`` on a free port (no persistence); ``None`` when not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    log = (tmp / "redis.log").open("wb")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start (see {tmp / 'redis.log'})")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


# -- the instances ---------------------------------------------------------------------------------


@dataclass
class Instance:
    """One ``clawlet control-plane serve`` process."""

    name: str
    cluster: LocalCluster
    rss_before: int = 0
    uss_before: int = 0
    rss_after: int = 0
    uss_after: int = 0
    cpu_hold: float = 0.0
    connected_before: int = 0
    connected_reported: int = -1

    @property
    def added(self) -> int:
        """Connections added between the two memory readings."""
        return max(1, self.connected_reported - self.connected_before)

    @property
    def pid(self) -> int:
        return self.cluster.processes["control-plane"].pid

    @property
    def base_url(self) -> str:
        return self.cluster.base_url

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://", 1) + "/ws/vm"

    def memory(self) -> tuple[int, int]:
        rollup = smaps_rollup(self.pid)
        return rollup.get("Rss", 0), rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)


def cli(env: dict[str, str], data_dir: Path, *args: str) -> str:
    """``clawlet control-plane --data-dir DIR ARGS``; its output."""
    command = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", str(data_dir), *args]
    done = subprocess.run(command, env=env, cwd=data_dir, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"clawlet control-plane {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


# -- the measurements ------------------------------------------------------------------------------


@dataclass
class Routing:
    """``GET /api/sessions`` sent to one instance: latencies, statuses, how many went through the
    user's simulated exec plane."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    through_exec_plane: int = 0

    @property
    def routed(self) -> bool:
        total = sum(self.statuses.values())
        return total > 0 and self.statuses[200] == total and self.through_exec_plane == total

    def why_not(self) -> str:
        shown = ", ".join(f"{status} ×{count}" for status, count in sorted(self.statuses.items()))
        if self.statuses[200] and self.through_exec_plane < self.statuses[200]:
            shown += f"; {self.statuses[200] - self.through_exec_plane} answered by the control plane itself"
        return shown


@dataclass
class ScaleResult:
    planes: int
    hold: float
    heartbeat: float
    database: str
    redis: str
    fd_limit: int
    instances: list[Instance] = field(default_factory=list)
    connect_times: list[float] = field(default_factory=list)
    connect_wall: float = 0.0
    refused: list[str] = field(default_factory=list)
    baseline_rtts: list[float] = field(default_factory=list)
    hold_rtts: list[float] = field(default_factory=list)
    hold_sent: int = 0
    still_connected: int = 0
    errors: list[str] = field(default_factory=list)
    routing: dict[str, dict[str, Routing]] = field(default_factory=dict)
    """``{"baseline" | "all": {"A": …, "B": …}}``."""
    bench_cpu: float = 0.0
    load: str = field(default_factory=lambda: " ".join(f"{value:.1f}" for value in os.getloadavg()))
    """The load average when the figure started."""


async def connect_batch(sims: list[SimExecPlane], result: ScaleResult) -> None:
    async def one(sim: SimExecPlane) -> None:
        began = time.perf_counter()
        try:
            await sim.connect(timeout=CONNECT_TIMEOUT)
        except Exception as exc:
            result.refused.append(f"{sim.user_id}: {type(exc).__name__}: {exc}")
            return
        result.connect_times.append(time.perf_counter() - began)

    await asyncio.gather(*(one(sim) for sim in sims))


def make_sims(
    plane: ControlPlane, users: list[str], instances: list[Instance], offset: int, heartbeat: float
) -> list[SimExecPlane]:
    """One plane per user, on A and B alternately (by the user's index), with fresh credentials."""
    sims = []
    for index, user in enumerate(users, start=offset):
        credentials = plane.issue_vm_credentials(user)
        target = instances[index % 2]
        sims.append(SimExecPlane(target.ws_url, user, credentials.token, credentials.ticket, heartbeat))
    return sims


async def measure_routing(
    instances: list[Instance], tokens: dict[str, str], sims: dict[str, SimExecPlane], requests: int
) -> dict[str, Routing]:
    """``requests`` rounds of ``GET /api/sessions`` to A then B (alternating which goes first), for
    the routing users in turn; each round's request is timed alone."""
    found = {instance.name: Routing() for instance in instances}
    users = list(tokens)
    async with httpx.AsyncClient(timeout=30) as client:
        for number in range(ROUTING_WARMUP + requests):
            user = users[number % len(users)]
            order = instances if number % 2 == 0 else list(reversed(instances))
            for instance in order:
                served = sims[user].http_served
                began = time.perf_counter()
                try:
                    response = await client.get(
                        f"{instance.base_url}/api/sessions",
                        headers={"Authorization": f"Bearer {tokens[user]}"},
                    )
                    status = response.status_code
                except httpx.HTTPError:
                    status = 0
                elapsed = time.perf_counter() - began
                if number < ROUTING_WARMUP:
                    continue
                routing = found[instance.name]
                routing.statuses[status] += 1
                routing.latencies.append(elapsed)
                routing.through_exec_plane += sims[user].http_served > served
    return found


async def health_count(instance: Instance) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        try:
            return int(
                (await client.get(f"{instance.base_url}/health")).json().get("connected_exec_planes", -1)
            )
        except (httpx.HTTPError, ValueError):
            return -1


def rtts_since(sims: list[SimExecPlane], marks: dict[str, int]) -> list[float]:
    return [rtt for sim in sims for rtt in sim.heartbeat_rtts[marks.get(sim.user_id, 0) :]]


async def drive(
    plane: ControlPlane,
    instances: list[Instance],
    users: list[str],
    tokens: dict[str, str],
    args: argparse.Namespace,
    result: ScaleResult,
) -> None:
    heartbeat, requests = result.heartbeat, args.routing_requests
    sims: list[SimExecPlane] = []
    try:
        sims += make_sims(plane, users[:BASELINE_PLANES], instances, 0, heartbeat)
        await connect_batch(sims, result)
        if result.refused:
            raise RuntimeError(f"the baseline planes were refused: {result.refused[:3]}")
        progress(f"scale: {len(sims)} baseline planes connected; holding {3 * heartbeat:g} s")
        await asyncio.sleep(3 * heartbeat)
        result.baseline_rtts = rtts_since(sims, {})
        by_user = {sim.user_id: sim for sim in sims}
        result.routing["baseline"] = await measure_routing(instances, tokens, by_user, requests)
        for instance in instances:  # warm: what the connections add from here on is theirs
            instance.rss_before, instance.uss_before = instance.memory()
            instance.connected_before = await health_count(instance)
        began = time.perf_counter()
        for first in range(BASELINE_PLANES, len(users), CONNECT_BATCH):
            batch = make_sims(plane, users[first : first + CONNECT_BATCH], instances, first, heartbeat)
            sims += batch
            await connect_batch(batch, result)
        result.connect_wall = time.perf_counter() - began
        progress(
            f"scale: {sum(sim.connected for sim in sims)} planes connected in {result.connect_wall:.1f} s, "
            f"{len(result.refused)} refused; holding {result.hold:g} s"
        )
        marks = {sim.user_id: len(sim.heartbeat_rtts) for sim in sims}
        sent = sum(sim.heartbeats_sent for sim in sims)
        cpu = [process_cpu(instance.pid) for instance in instances]
        await asyncio.sleep(result.hold)
        result.hold_rtts = rtts_since(sims, marks)
        result.hold_sent = sum(sim.heartbeats_sent for sim in sims) - sent
        for instance, before in zip(instances, cpu, strict=True):
            instance.cpu_hold = process_cpu(instance.pid) - before
            instance.rss_after, instance.uss_after = instance.memory()
            instance.connected_reported = await health_count(instance)
        result.still_connected = sum(sim.connected for sim in sims)
        result.errors = [f"{sim.user_id}: {error}" for sim in sims for error in sim.errors]
        by_user = {sim.user_id: sim for sim in sims}
        result.routing["all"] = await measure_routing(instances, tokens, by_user, requests)
    finally:
        await asyncio.gather(*(sim.close() for sim in sims))


def run_scale(tmp: Path, args: argparse.Namespace) -> ScaleResult:
    """Start everything (see the module docstring), measure, stop everything."""
    planes: int = args.exec_planes
    root = tmp / "scale"
    root.mkdir(parents=True)
    fd_limit = raise_fd_limit()
    with shared_database(root) as (database_url, database), shared_redis(root) as redis_url:
        secret = new_jwt_secret()
        env = {
            **clean_environ(),
            "CLAWLET_HOME": str(root / "home"),
            "CLAWLET_CP_DATABASE_URL": database_url,
            "CLAWLET_CP_JWT_SECRET": secret,
            "CLAWLET_LOG_LEVEL": "WARNING",
        }
        if redis_url:
            env["CLAWLET_REDIS_URL"] = redis_url
        result = ScaleResult(
            planes,
            args.hold_seconds,
            args.heartbeat_seconds,
            database,
            f"one Redis via CLAWLET_REDIS_URL ({redis_url})"
            if redis_url
            else "no Redis (redis-server not found)",
            fd_limit,
        )
        admin_dir = root / "admin"
        admin_dir.mkdir()
        users = [f"sim{index:04d}" for index in range(planes)]
        # the routing users are on A (even indices) and made with the CLI, as an operator would
        routing_users = [users[index] for index in range(0, 2 * ROUTING_USERS, 2)][: len(users)]
        tokens = {user: cli(env, admin_dir, "add-user", user) for user in routing_users}
        config = ControlPlaneConfig(
            data_dir=admin_dir, jwt_secret=secret, database_url=database_url, public_url="http://127.0.0.1:1"
        )
        plane = ControlPlane(config)
        try:
            for user in users:
                if user not in tokens:
                    plane.create_user(user, user, {})
            progress(f"scale: {planes} users in {database}")
            for name in ("A", "B"):
                directory = root / f"instance-{name}"
                directory.mkdir()
                cluster = LocalCluster(directory, [], free_port(), base_env=env, workdir=directory)
                result.instances.append(Instance(name, cluster))
                cluster.start_control_plane()
            cpu = process_cpu(os.getpid())
            asyncio.run(drive(plane, result.instances, users, tokens, args, result))
            result.bench_cpu = process_cpu(os.getpid()) - cpu
        except Exception:
            for instance in result.instances:
                log = instance.cluster.data_dir / "logs" / "control-plane.log"
                if log.exists():
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                    print(f"--- instance {instance.name} (tail) ---\n{tail}", file=sys.stderr)
            raise
        finally:
            plane.close()
            for instance in result.instances:
                instance.cluster.stop()
    return result


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


# -- the report ------------------------------------------------------------------------------------


def _ms(values: list[float], pct: float) -> str:
    return f"{percentile(values, pct) * 1000:.1f}" if values else "-"


def _ratio(a: list[float], b: list[float], pct: float) -> str:
    if not a or not b:
        return "-"
    low = percentile(b, pct)
    return f"{percentile(a, pct) / low:.2f}x" if low > 0 else "-"


def scale_report(result: ScaleResult) -> None:
    mib, kib = 2**20, 1024
    planes, base = result.planes, BASELINE_PLANES
    print(
        f"\n=== scale: {planes} simulated exec planes on two control-plane instances (A, B: "
        f"`clawlet control-plane serve` processes) sharing {result.database}, {result.redis}; a "
        f"heartbeat every {result.heartbeat:g} s; {os.cpu_count()} CPU cores, load average {result.load} "
        f"at the start; RLIMIT_NOFILE {result.fd_limit} (inherited by the instances)"
    )
    times = result.connect_times
    print(
        f"connect: {len(times)}/{planes} got init ({CONNECT_BATCH} at a time after the first {base}: "
        f"{result.connect_wall:.1f} s; time to init p50 {_ms(times, 50)} ms, p99 {_ms(times, 99)} ms), "
        f"{len(result.refused)} failed"
    )
    reported = ", ".join(f"{i.name} {i.connected_reported}" for i in result.instances)
    print(
        f"held {result.hold:g} s: {result.still_connected}/{len(times)} still connected (the instances' "
        f"/health: {reported}); heartbeats sent {result.hold_sent}, acknowledgements {len(result.hold_rtts)} "
        "(one in flight at the start or the end counts on one side only)"
    )
    print(f"{'heartbeat round trip':<26}{'n':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    held, baseline = result.hold_rtts, result.baseline_rtts
    for label, rtts in ((f"{base} planes (baseline)", baseline), (f"{planes} planes (held)", held)):
        worst = f"{max(rtts) * 1000:.1f}" if rtts else "-"
        print(f"{label:<26}{len(rtts):>7}{_ms(rtts, 50):>9}{_ms(rtts, 99):>9}{worst:>9}")
    print(
        f"  ratio {planes} / {base} planes: p50 {_ratio(held, baseline, 50)}, "
        f"p99 {_ratio(held, baseline, 99)}"
    )
    print(
        f"{'instance':<10}{'conns':>7}{'RSS before':>12}{'after':>9}{'per conn':>10}{'USS before':>12}"
        f"{'after':>9}{'per conn':>10}{'CPU-s held':>12}{'ms/heartbeat':>14}"
    )
    beats = max(1, len(held)) / max(1, len(result.instances))
    for i in result.instances:
        rss = (i.rss_after - i.rss_before) / i.added / kib
        uss = (i.uss_after - i.uss_before) / i.added / kib
        print(
            f"{i.name:<10}{i.connected_reported:>7}{i.rss_before / mib:>11.1f}M{i.rss_after / mib:>8.1f}M"
            f"{rss:>9.1f}K{i.uss_before / mib:>11.1f}M{i.uss_after / mib:>8.1f}M{uss:>9.1f}K"
            f"{i.cpu_hold:>12.2f}{i.cpu_hold / beats * 1000:>14.2f}"
        )
    print(
        "  (memory from /proc/<pid>/smaps_rollup: after the hold minus after the baseline (its planes "
        "connected, routing done), ÷ the connections added meanwhile; ms/heartbeat: the instance's "
        f"CPU over the hold ÷ half the acknowledged heartbeats); the bench process (all {planes} clients) "
        f"used {result.bench_cpu:.1f} CPU-s"
    )
    print(f"routing: GET /api/sessions of {ROUTING_USERS} users whose planes are on A, sent to A and to B")
    print(
        f"{'connected':<12}{'A n':>6}{'A p50':>9}{'A p99':>9}{'B n':>6}{'B p50':>9}{'B p99':>9}"
        f"{'B/A p50':>9}{'p99':>8}"
    )
    for phase, label in (("baseline", f"{base} planes"), ("all", f"{planes} planes")):
        routing = result.routing.get(phase)
        if routing is None:
            continue
        a, b = routing["A"], routing["B"]
        if not (a.routed and b.routed):
            print(f"{label:<12}routing: not available (A: {a.why_not()}; B: {b.why_not()})")
            continue
        x, y = a.latencies, b.latencies
        print(
            f"{label:<12}{len(x):>6}{_ms(x, 50):>9}{_ms(x, 99):>9}{len(y):>6}{_ms(y, 50):>9}{_ms(y, 99):>9}"
            f"{_ratio(y, x, 50):>9}{_ratio(y, x, 99):>8}"
        )
    print(
        "  (ms, client-side; A and B alternate request by request; B / A: what routing through the "
        "other instance costs)"
    )
    for error in result.refused[:3] + result.errors[:3]:
        print(f"  error: {error}")


def scale_failed(result: ScaleResult) -> bool:
    """A plane was refused or lost its connection."""
    return bool(result.refused) or result.still_connected < len(result.connect_times)

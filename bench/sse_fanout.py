"""Inbox SSE fan-out: how long until 1,000 connected clients all have a new task's event.

One run starts, on loopback and fully offline, a ``clawlet serve`` child process (throw-away
``CLAWLET_HOME``, the offline demo model) so that the clients do not share the server's GIL. Then,
for each client count (the baselines ``--baselines``, default 1 and 100, then ``--clients``,
default 1000):

1. it opens that many ``GET /api/v1/events`` streams (asyncio protocols on raw sockets, in batches
   of ``--connect-batch``) and waits until each has received the server's first frame,
   ``retry: 3000``, which the server sends once the stream is subscribed;
2. ``--rounds`` times: it notes the time, ``POST /api/v1/tasks`` (httpx, same event loop) with a
   content whose title carries a unique marker, and records when each client's socket delivers
   the ``task.created`` frame with that marker. It reports the time until every client has it
   (max), the per-client receive times (p50/p99, nearest rank, pooled over rounds) and how long
   the POST took. The task then runs in the background (the demo model streams its answer for
   ~0.8 s, and every client receives its ``task.updated`` / ``message.*`` events); the next round
   starts only after every client has seen the task finish;
3. it closes every connection and waits until the sockets are closed.

It prints one row per client count and the ratios against the first baseline (1 client).
The client is one Python process on one event loop, so at 1,000 clients its own reading of the
sockets is part of the figure; compare runs on the same machine only.

Run from the repository root (about 30 s with the defaults)::

    .venv/bin/python bench/sse_fanout.py [--clients 1000] [--baselines 1,100] [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support import ClawletProcess, percentile

EVENTS_PATH = "/api/v1/events"
FD_HEADROOM = 256  # files, sqlite, the loop's own descriptors, httpx
CONNECT_TIMEOUT = 60.0
CREATED_TIMEOUT = 60.0
FINISH_TIMEOUT = 120.0


class StreamError(Exception):
    pass


@dataclass
class Round:
    """One published task: its marker (in the title) and when each client saw it."""

    marker: bytes
    expected: int
    start: float = 0.0
    created_at: list[float] = field(default_factory=list)
    finished: int = 0
    all_created: asyncio.Event = field(default_factory=asyncio.Event)
    all_finished: asyncio.Event = field(default_factory=asyncio.Event)
    first_frame: bytes = b""


class SSEClient(asyncio.Protocol):
    """One ``GET /api/v1/events`` stream: HTTP/1.1, chunked body, SSE frames matched as bytes.

    The receive time is taken as soon as ``data_received`` runs, before any parsing."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.subscribed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.round: Round | None = None
        self.error: str | None = None
        self.closing = False
        self._raw = b""
        self._headers_done = False
        self._body = b""

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self._raw += data
        try:
            if not self._headers_done and not self._read_headers():
                return
            self._read_chunks()
            while b"\n\n" in self._body:
                frame, self._body = self._body.split(b"\n\n", 1)
                self._frame(frame, now)
        except StreamError as exc:
            self._fail(str(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing and self.error is None:
            self.error = f"the server closed the stream ({exc or 'EOF'})"
        if not self.subscribed.done():
            self.subscribed.set_exception(StreamError(f"closed before subscribing: {exc}"))
        if not self.closed.done():
            self.closed.set_result(None)

    # -- parsing ---------------------------------------------------------------------------------

    def _read_headers(self) -> bool:
        end = self._raw.find(b"\r\n\r\n")
        if end < 0:
            return False
        head, self._raw = self._raw[:end].decode("latin-1"), self._raw[end + 4 :]
        status_line, *lines = head.split("\r\n")
        if " 200 " not in f"{status_line} ":
            raise StreamError(f"unexpected response: {status_line}")
        if not any(line.lower().replace(" ", "") == "transfer-encoding:chunked" for line in lines):
            raise StreamError("expected a chunked event stream")
        self._headers_done = True
        return True

    def _read_chunks(self) -> None:
        while True:
            line_end = self._raw.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self._raw[:line_end].split(b";", 1)[0], 16)
            if size == 0:
                raise StreamError("the server ended the stream")
            if len(self._raw) < line_end + 2 + size + 2:
                return
            start = line_end + 2
            self._body += self._raw[start : start + size]
            self._raw = self._raw[start + size + 2 :]

    def _frame(self, frame: bytes, now: float) -> None:
        current = self.round
        if frame.startswith(b"retry:"):
            if not self.subscribed.done():
                self.subscribed.set_result(None)
        elif current is None or current.marker not in frame:
            return
        elif frame.startswith(b"event: task.created\n"):
            current.created_at.append(now)
            if not current.first_frame:
                current.first_frame = frame
            if len(current.created_at) == current.expected:
                current.all_created.set()
        elif frame.startswith(b"event: task.updated\n") and (
            b'"status":"completed"' in frame or b'"status":"failed"' in frame
        ):
            current.finished += 1
            if current.finished == current.expected:
                current.all_finished.set()

    def _fail(self, message: str) -> None:
        self.error = message
        if not self.subscribed.done():
            self.subscribed.set_exception(StreamError(message))
        if self.transport is not None:
            self.transport.close()


@dataclass
class Result:
    clients: int
    connect: float
    all_received: list[float]
    per_client: list[float]
    post: list[float]


def ensure_fd_limit(clients: int) -> tuple[int, int]:
    """Raise the soft open-files limit for ``clients`` streams (the server child inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = clients + FD_HEADROOM
    if soft >= needed:
        return soft, hard
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(
            f"error: {clients} clients need about {needed} open files in this process and in the "
            f"server, but the limit is {soft} (hard limit {hard}). Raise it (e.g. `ulimit -n {needed}` "
            f"as a user allowed to, or in limits.conf) or use fewer --clients."
        )
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError) as exc:
        raise SystemExit(f"error: cannot raise the open-files limit from {soft} to {needed}: {exc}") from exc
    return needed, hard


async def connect_all(port: int, count: int, batch: int) -> list[SSEClient]:
    loop = asyncio.get_running_loop()
    request = (
        f"GET {EVENTS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
    ).encode()
    clients: list[SSEClient] = []
    try:
        for first in range(0, count, batch):
            size = min(batch, count - first)
            made = await asyncio.gather(
                *(loop.create_connection(lambda: SSEClient(request), "127.0.0.1", port) for _ in range(size))
            )
            opened = [protocol for _, protocol in made]
            clients.extend(opened)
            await asyncio.wait_for(
                asyncio.gather(*(client.subscribed for client in opened)), timeout=CONNECT_TIMEOUT
            )
    except BaseException:
        await close_all(clients)
        raise
    return clients


async def close_all(clients: list[SSEClient]) -> None:
    for client in clients:
        client.closing = True
        if client.transport is not None:
            client.transport.close()
    pending = [client.closed for client in clients if client.transport is not None]
    if pending:
        await asyncio.wait(pending, timeout=30)


async def run_rounds(
    url: str, clients: list[SSEClient], rounds: int
) -> tuple[list[float], list[float], list[float]]:
    """(all received per round, every client's receive time, POST durations), in seconds."""
    all_received: list[float] = []
    per_client: list[float] = []
    posts: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await http.get("/health/live")  # the connection is open before the first timed POST
        for number in range(rounds):
            marker = f"fan{number}x{uuid.uuid4().hex[:8]}"
            current = Round(marker.encode(), len(clients))
            for client in clients:
                client.round = current
            current.start = time.perf_counter()
            response = await http.post("/api/v1/tasks", json={"content": f"{marker} fan-out check"})
            posts.append(time.perf_counter() - current.start)
            if response.status_code != 201:
                raise RuntimeError(f"POST /api/v1/tasks → {response.status_code}: {response.text[:200]}")
            task_id = response.json()["id"]
            try:
                await asyncio.wait_for(current.all_created.wait(), timeout=CREATED_TIMEOUT)
            except TimeoutError:
                raise RuntimeError(
                    f"only {len(current.created_at)} of {len(clients)} clients got task.created "
                    f"within {CREATED_TIMEOUT:g} s"
                ) from None
            if f'"id":"{task_id}"'.encode() not in current.first_frame:
                raise RuntimeError(
                    f"the task.created frame is not the created task's: {current.first_frame[:200]!r}"
                )
            times = [at - current.start for at in current.created_at]
            all_received.append(max(times))
            per_client.extend(times)
            try:  # untimed: the next round starts once the task's run and its events are over
                await asyncio.wait_for(current.all_finished.wait(), timeout=FINISH_TIMEOUT)
            except TimeoutError:
                raise RuntimeError(
                    f"only {current.finished} of {len(clients)} clients saw the task finish "
                    f"within {FINISH_TIMEOUT:g} s"
                ) from None
            broken = [client.error for client in clients if client.error]
            if broken:
                raise RuntimeError(f"{len(broken)} streams failed, e.g. {broken[0]}")
            await asyncio.sleep(0.2)
    return all_received, per_client, posts


async def measure(url: str, port: int, count: int, rounds: int, batch: int) -> Result:
    start = time.perf_counter()
    clients = await connect_all(port, count, batch)
    connect = time.perf_counter() - start
    try:
        all_received, per_client, posts = await run_rounds(url, clients, rounds)
    finally:
        await close_all(clients)
    await asyncio.sleep(0.5)  # the server notices the disconnects and unsubscribes
    return Result(count, connect, all_received, per_client, posts)


def ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def report(results: list[Result]) -> None:
    print(
        f"{'clients':>7}{'connect':>10}{'all received':>14}{'(max)':>8}{'per-client p50':>16}"
        f"{'p99':>8}{'POST median':>13}{'(max)':>8}"
    )
    for result in results:
        print(
            f"{result.clients:>7}{result.connect:>9.2f}s{ms(statistics.median(result.all_received)):>14}"
            f"{ms(max(result.all_received)):>8}{ms(percentile(result.per_client, 50)):>16}"
            f"{ms(percentile(result.per_client, 99)):>8}{ms(statistics.median(result.post)):>13}"
            f"{ms(max(result.post)):>8}"
        )
    print("(milliseconds from just before the POST; 'all received' = median over rounds of the last client)")
    for result in results:
        rounds = ", ".join(ms(value) for value in result.all_received)
        print(f"  {result.clients} clients, all received per round: {rounds}")
    base = results[0]
    for result in results[1:]:
        print(
            f"ratio {result.clients}/{base.clients} clients (median): all received "
            f"{statistics.median(result.all_received) / statistics.median(base.all_received):.1f}x, "
            f"per-client p50 {percentile(result.per_client, 50) / percentile(base.per_client, 50):.1f}x, "
            f"POST {statistics.median(result.post) / statistics.median(base.post):.1f}x"
        )


def parse_counts(raw: str) -> list[int]:
    try:
        counts = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {raw!r}") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError("client counts must be >= 1")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000, help="connected clients in the main case (1000)")
    parser.add_argument(
        "--baselines",
        type=parse_counts,
        default=[1, 100],
        help="smaller client counts measured first (1,100)",
    )
    parser.add_argument("--rounds", type=int, default=10, help="tasks published per client count (10)")
    parser.add_argument("--connect-batch", type=int, default=100, help="connections opened at once (100)")
    args = parser.parse_args(argv)
    if min(args.clients, args.rounds, args.connect_batch) < 1:
        parser.error("clients, rounds and connect-batch must be >= 1")
    counts = sorted({*args.baselines, args.clients})
    soft, hard = ensure_fd_limit(max(counts))
    # a plain `kill` also runs the clean-up below (closing the streams, stopping the server)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    with tempfile.TemporaryDirectory(prefix="clawlet-bench-sse-") as tmp:
        server = ClawletProcess(Path(tmp) / "home")
        try:
            url = server.start()
            results = [
                asyncio.run(measure(url, server.port, count, args.rounds, args.connect_batch))
                for count in counts
            ]
        except Exception:
            print(f"--- server log (tail) ---\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()

    print(
        f"SSE fan-out: clawlet serve subprocess, {args.rounds} rounds per client count, "
        f"{os.cpu_count()} CPUs, open-files limit {soft} (hard {hard})"
    )
    report(results)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted (streams closed, server stopped)", file=sys.stderr)
        raise SystemExit(130) from None

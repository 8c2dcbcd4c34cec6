"""The OpenClaw gateway while one client sends a 7 MB ``chat.send``: do the others stay served?

One run starts, on loopback and fully offline, a ``clawlet serve`` child process (throw-away
``CLAWLET_HOME``, the offline demo model) so that the clients do not share the server's GIL, and
connects ``--clients`` gateway clients (default 50, scopes read + write). Then two phases, the
baseline first:

- **baseline**: every client calls ``health`` again and again (one request at a time) while
  ``--connects`` new connections (default 200) open at once, each timed from the socket's opening
  to its ``hello-ok``, given ``--connect-timeout`` seconds (default 10);
- **big frame**: the same, while one more client sends a ``chat.send`` whose message is
  ``--big-mb`` MB of words (default 7: inside the 8 MiB frame limit) and waits for its answer.

A phase lasts until every new connection has its answer or gave up, the big client has its
answer (if any), and at least ``--min-seconds`` (default 3) have passed; the ``health`` loops then
stop. It prints, per phase, the ``health`` latency p50/p99/max over all clients (request sent to
response read, nearest rank), the failed ``health`` requests, the new connections that succeeded,
and the big-frame / baseline ratios. Event frames (``tick``, ``chat``) are read as bytes and not
parsed, so what the client spends on them is only the reading.

Run from the repository root (about 20 s with the defaults)::

    .venv/bin/python bench/gateway_flood.py [--clients 50] [--connects 200] [--big-mb 7]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from support import ClawletProcess, percentile

REQUEST_TIMEOUT = 60.0
BIG_ANSWER_TIMEOUT = 60.0
CONNECT_PARAMS: dict[str, Any] = {
    "minProtocol": 3,
    "maxProtocol": 4,
    "client": {"id": "gateway-client", "version": "1.0.0", "platform": "linux", "mode": "backend"},
    "role": "operator",
    "scopes": ["operator.read", "operator.write"],
}
_ids = itertools.count(1)


class GatewayClient:
    """One gateway connection: requests answered by id; events read as bytes and dropped."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, timeout: float) -> GatewayClient:
        ws = await connect(url, open_timeout=timeout, max_size=None, ping_interval=None)
        client = cls(ws)
        try:
            reply = await asyncio.wait_for(client.request("connect", CONNECT_PARAMS), timeout)
        except BaseException:
            await client.close()
            raise
        if not reply.get("ok"):
            await client.close()
            raise RuntimeError(f"connect refused: {reply}")
        return client

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                raw = data if isinstance(data, bytes) else data.encode()
                if not raw.startswith(b'{"type":"res"'):
                    continue  # an event (the challenge, ticks, chat): not measured
                frame = json.loads(raw)
                future = self.waiting.pop(str(frame.get("id")), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except ConnectionClosed:
            pass
        finally:
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("the gateway closed the connection"))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = f"r{next(_ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        await self.ws.send(json.dumps({"type": "req", "id": request_id, "method": method, "params": params}))
        return await future

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


@dataclass
class Phase:
    name: str
    health: list[float] = field(default_factory=list)
    health_failures: int = 0
    connects_ok: int = 0
    connect_times: list[float] = field(default_factory=list)
    connect_errors: dict[str, int] = field(default_factory=dict)
    big_answer: str = "-"
    seconds: float = 0.0


async def health_loop(client: GatewayClient, phase: Phase, stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        try:
            reply = await asyncio.wait_for(client.request("health", {}), REQUEST_TIMEOUT)
        except (TimeoutError, ConnectionError, ConnectionClosed):
            phase.health_failures += 1
            return
        if reply.get("ok"):
            phase.health.append(time.perf_counter() - began)
        else:
            phase.health_failures += 1


async def one_connect(url: str, delay: float, timeout: float, phase: Phase) -> None:
    await asyncio.sleep(delay)
    began = time.perf_counter()
    try:
        client = await asyncio.wait_for(GatewayClient.open(url, timeout), timeout)
    except Exception as exc:  # timeouts, refusals, resets: counted by kind
        kind = type(exc).__name__
        phase.connect_errors[kind] = phase.connect_errors.get(kind, 0) + 1
        return
    phase.connect_times.append(time.perf_counter() - began)
    phase.connects_ok += 1
    await client.close()


async def big_send(url: str, megabytes: float, phase: Phase) -> None:
    words = itertools.cycle(["lorem", "ipsum", "dolor", "sit", "amet", "consectetur"])
    target = int(megabytes * 1_000_000)
    parts: list[str] = []
    size = 0
    while size < target:
        word = next(words)
        parts.append(word)
        size += len(word) + 1
    message = " ".join(parts)
    client = await GatewayClient.open(url, REQUEST_TIMEOUT)
    began = time.perf_counter()
    try:
        params = {"sessionKey": "agent:main:flood", "message": message, "idempotencyKey": "flood-1"}
        reply = await asyncio.wait_for(client.request("chat.send", params), BIG_ANSWER_TIMEOUT)
        elapsed = time.perf_counter() - began
        if reply.get("ok"):
            phase.big_answer = f"ok {reply.get('payload')} after {elapsed:.2f} s"
        else:
            error = reply.get("error", {})
            phase.big_answer = f"{error.get('code')}: {error.get('message')} after {elapsed:.2f} s"
    except (TimeoutError, ConnectionError, ConnectionClosed) as exc:
        phase.big_answer = f"no answer ({type(exc).__name__}) after {time.perf_counter() - began:.2f} s"
    finally:
        await client.close()


async def run_phase(
    name: str, url: str, clients: list[GatewayClient], args: argparse.Namespace, big: bool
) -> Phase:
    phase = Phase(name)
    stop = asyncio.Event()
    began = time.perf_counter()
    loops = [asyncio.create_task(health_loop(client, phase, stop)) for client in clients]
    bounded = [
        asyncio.create_task(one_connect(url, args.connect_delay, args.connect_timeout, phase))
        for _ in range(args.connects)
    ]
    if big:
        bounded.append(asyncio.create_task(big_send(url, args.big_mb, phase)))
    bounded.append(asyncio.create_task(asyncio.sleep(args.min_seconds)))
    await asyncio.gather(*bounded)
    stop.set()
    await asyncio.gather(*loops)
    phase.seconds = time.perf_counter() - began
    return phase


def report(phases: list[Phase], args: argparse.Namespace) -> None:
    print(
        f"gateway flood: {args.clients} clients calling health, {args.connects} new connections at once "
        f"({args.connect_timeout:g} s each), big frame {args.big_mb:g} MB chat.send; {os.cpu_count()} CPUs"
    )
    print(
        f"{'phase':<10} {'health n':>8} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'failed':>6} "
        f"{'connects':>9} {'conn p50':>9} {'wall s':>7}"
    )
    for phase in phases:
        ms = [value * 1000 for value in phase.health] or [float("nan")]
        conn = [value * 1000 for value in phase.connect_times] or [float("nan")]
        print(
            f"{phase.name:<10} {len(phase.health):>8} {percentile(ms, 50):>9.1f} {percentile(ms, 99):>9.1f} "
            f"{max(ms):>9.1f} {phase.health_failures:>6} {phase.connects_ok:>5}/{args.connects:<3} "
            f"{percentile(conn, 50):>9.1f} {phase.seconds:>7.1f}"
        )
        if phase.connect_errors:
            print(f"  failed connects: {phase.connect_errors}")
    base, load = phases
    if base.health and load.health:
        p50 = percentile(load.health, 50) / percentile(base.health, 50)
        worst = max(load.health) / max(base.health)
        print(f"ratio big frame / baseline: health p50 {p50:.2f}x, max {worst:.2f}x")
    print(f"big client's answer: {load.big_answer}")


async def bench(url: str, args: argparse.Namespace) -> list[Phase]:
    clients = await asyncio.gather(*(GatewayClient.open(url, 30) for _ in range(args.clients)))
    try:
        baseline = await run_phase("baseline", url, clients, args, big=False)
        loaded = await run_phase("big frame", url, clients, args, big=True)
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
    return [baseline, loaded]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--connects", type=int, default=200)
    parser.add_argument("--connect-timeout", type=float, default=10.0)
    parser.add_argument("--connect-delay", type=float, default=1.0)
    parser.add_argument("--big-mb", type=float, default=7.0)
    parser.add_argument("--min-seconds", type=float, default=10.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="clawlet-gateway-flood-") as tmp,
        ClawletProcess(Path(tmp) / "home") as server,
    ):
        phases = asyncio.run(bench(f"ws://127.0.0.1:{server.port}/gateway", args))
    report(phases, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

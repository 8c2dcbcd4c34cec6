"""The simulated execution planes of bench/cluster.py's scale figure (clawlet.testing.sim_exec_plane).

Twenty of them against a real ``clawlet control-plane serve`` process (real tickets and JWTs from
``ControlPlane.issue_vm_credentials``): every one gets ``init``, stays connected and has its
heartbeats acknowledged. The HTTP-over-WebSocket frames (cluster mode v2's tunnel) are checked
against the scripted control plane (tests/support), which can send any frame.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.controlplane.cli import build_config
from clawlet.controlplane.server import ControlPlane
from clawlet.testing.sim_exec_plane import (
    SIMULATED_HEADER,
    HttpReply,
    HttpRequest,
    SimExecPlane,
    default_handler,
)
from tests.conftest import free_port
from tests.support.scripted_control_plane import ScriptedControlPlane

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

DEADLINE = 60.0


async def until(condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def connected_on_health(url: str) -> int:
    async with httpx.AsyncClient(timeout=10) as client:
        return int((await client.get(f"{url}/health")).json().get("connected_exec_planes", -1))


async def test_twenty_simulated_exec_planes_stay_connected_and_get_heartbeats_acknowledged(
    tmp_path: Path,
) -> None:
    users = [f"sim{index:02d}" for index in range(20)]
    cluster = LocalCluster(tmp_path / "cluster", users, free_port())
    sims: list[SimExecPlane] = []
    try:
        cluster.prepare_users()
        cluster.start_control_plane()
        plane = ControlPlane(build_config(cluster.settings, cluster.cp_dir, cluster.base_url))
        try:
            credentials = [plane.issue_vm_credentials(user) for user in users]
        finally:
            plane.close()
        sims = [
            SimExecPlane(c.ws_url, c.user_id, c.token, c.ticket, heartbeat_interval=0.2) for c in credentials
        ]
        inits = await asyncio.gather(*(sim.connect(timeout=DEADLINE) for sim in sims))
        assert [init["user_id"] for init in inits] == users
        assert all(init["heartbeat_ack"] is True for init in inits)
        await until(lambda: all(sim.acknowledged >= 3 for sim in sims), "3 acknowledged heartbeats each")
        assert all(sim.connected for sim in sims)
        assert all(0 < rtt < DEADLINE for sim in sims for rtt in sim.heartbeat_rtts)
        assert [sim.errors for sim in sims] == [[] for _ in sims]
        assert await connected_on_health(cluster.base_url) == len(users)

        await sims[0].close()  # a closed plane is no longer connected, on either side
        assert not sims[0].connected
        await until_count(cluster.base_url, len(users) - 1)
    finally:
        await asyncio.gather(*(sim.close() for sim in sims))
        cluster.stop()


async def until_count(url: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while await connected_on_health(url) != count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the control plane never reported {count} connected exec planes")
        await asyncio.sleep(0.05)


def http_request(request_id: str, path: str, body: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http_request",
        "id": request_id,
        "method": "GET",
        "path": path,
        "query": "limit=5",
        "headers": [["accept", "application/json"]],
        "body": base64.b64encode(body).decode(),
    }


async def test_http_requests_are_answered_resumed_and_cancelled() -> None:
    gate = asyncio.Event()
    seen: list[HttpRequest] = []

    async def handler(user_id: str, request: HttpRequest) -> HttpReply:
        seen.append(request)
        if request.path == "/slow":
            await gate.wait()
        return default_handler(user_id, request)

    async with ScriptedControlPlane() as plane:
        sim = SimExecPlane(
            plane.url,
            "alice",
            plane.issue_token("alice"),
            plane.issue_ticket("alice"),
            heartbeat_interval=3600,
            handler=handler,
        )
        await sim.connect()
        conn = await plane.wait_connections(1)

        def of(kind: str, request_id: str) -> list[dict[str, Any]]:
            return [frame for frame in conn.frames(kind) if frame.get("id") == request_id]

        await conn.send(http_request("r1", "/api/sessions", b"{}"))
        await plane.wait_for(lambda: of("http_body", "r1"))
        assert seen[0] == HttpRequest(
            "r1", "GET", "/api/sessions", "limit=5", [("accept", "application/json")], b"{}"
        )
        (response,) = of("http_response", "r1")
        assert response["status"] == 200
        assert [SIMULATED_HEADER, "alice"] in response["headers"]
        (body,) = of("http_body", "r1")
        assert (body["n"], body["more"]) == (1, False)
        assert json.loads(base64.b64decode(body["body"]))[0]["id"] == "sim-alice"
        assert sim.http_served == 1

        # the real tunnel's rules (clawlet.execplane.tunnel): `after` counts http_response as n = 0
        await conn.send({"type": "http_resume", "id": "r1", "after": 0})  # the body again
        await plane.wait_for(lambda: len(of("http_body", "r1")) == 2)
        await conn.send({"type": "http_resume", "id": "r1", "after": -1})  # the response and the body
        await plane.wait_for(lambda: len(of("http_response", "r1")) == 2 and len(of("http_body", "r1")) == 3)
        await conn.send(http_request("r1", "/api/sessions"))  # a repeat is not run again: resent
        await plane.wait_for(lambda: len(of("http_response", "r1")) == 3 and len(of("http_body", "r1")) == 4)
        await conn.send({"type": "http_resume", "id": "r9", "after": 2})  # unknown: a lost last frame
        await plane.wait_for(lambda: of("http_body", "r9"))
        assert of("http_body", "r9") == [
            {"type": "http_body", "id": "r9", "n": 3, "body": "", "more": False, "lost": True}
        ]
        await conn.send(http_request("r2", "/slow"))
        await until(lambda: len(seen) == 2, "the slow request to start")
        await conn.send({"type": "http_cancel", "id": "r2"})  # the app is told; an answer still ends it
        await until(lambda: sim.http_cancelled == 1, "the cancel")
        gate.set()
        await plane.wait_for(lambda: of("http_body", "r2"))
        await conn.send(http_request("r3", "/nowhere"))
        await plane.wait_for(lambda: of("http_body", "r3"))
        assert of("http_response", "r3")[0]["status"] == 404
        assert len(of("http_body", "r1")) == 4 and sim.http_resumed == 3 and sim.http_served == 3
        assert [request.id for request in seen] == ["r1", "r2", "r3"]
        assert sim.errors == [] and sim.connected
        await sim.close()

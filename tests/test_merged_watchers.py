"""Every edge that relays a run's text follows the run with ``merge_text`` (issue 17): text chunks
that piled up while it was busy come as one event, so under load ``/api/agent`` writes fewer, longer
``text_delta`` lines (as ``/v1`` and ``/api/chat`` do) and the gateway's pump handles fewer events
(its ``chat`` events carry the reply so far, whatever the chunks were). Real server, demo model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from clawlet.runtime.manager import Run
from tests.conftest import LiveServer
from tests.support.gateway_schema import ProtocolSchema
from tests.test_gateway_server import READ, WRITE, gateway


@pytest.fixture
def follows(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """``merge_text`` of every ``Run.events`` a watcher starts."""
    seen: list[bool] = []
    events = Run.events

    def recorded(run: Run, keepalive: float | None = None, *, merge_text: bool = False) -> AsyncIterator[Any]:
        seen.append(merge_text)
        return events(run, keepalive, merge_text=merge_text)

    monkeypatch.setattr(Run, "events", recorded)
    return seen


def test_the_native_endpoint_merges_piled_up_text(server: LiveServer, follows: list[bool]) -> None:
    response = httpx.post(f"{server.url}/api/agent", json={"prompt": "hello"}, timeout=60)
    assert response.status_code == 200, response.text
    lines = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    text = "".join(line["text"] for line in lines if line["type"] == "text_delta")
    assert text == lines[-1]["result"]
    assert follows == [True]


async def test_the_gateway_follows_a_run_with_merged_text(
    server: LiveServer, schema: ProtocolSchema, follows: list[bool]
) -> None:
    async with gateway(server, schema, scopes=(READ, WRITE)) as client:
        params = {"sessionKey": "agent:main:merged", "message": "hello", "idempotencyKey": "run-m"}
        await client.ok("chat.send", params)
        [*_, final] = await client.run_events("run-m")
    assert final["state"] == "final"
    assert follows == [True]

"""The scripted OpenAI-compatible server's own transport: every accepted connection has Nagle's
algorithm off (``TCP_NODELAY``), on both event loops it can run on, so a streamed chunk is not
held back waiting for the client's (delayed) ACK of the previous one."""

from __future__ import annotations

import socket

import httpx
import pytest

from clawlet.aio import ENV_EVENT_LOOP
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_accepted_connections_have_tcp_nodelay(loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(loop)
    monkeypatch.setenv(ENV_EVENT_LOOP, loop)
    with ScriptedOpenAIServer(lambda body: text_turn("one two three")) as llm, httpx.Client() as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with client.stream("POST", f"{llm.base_url}/chat/completions", json=body) as response:
            assert response.status_code == 200
            response.read()
            # The connection stays open (keep-alive): read the option on the server's side of it.
            assert llm._server is not None
            connections = list(llm._server.server_state.connections)
            assert len(connections) == 1
            transport = connections[0].transport  # type: ignore[attr-defined]
            assert transport is not None
            server_socket = transport.get_extra_info("socket")
            assert server_socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0

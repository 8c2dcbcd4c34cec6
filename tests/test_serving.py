"""clawlet's HTTP servers keep an idle keep-alive connection open longer than their clients do.

uvicorn's default closes one after 5 s, exactly when httpx (the OpenAI SDKs, LangChain) reuses it:
on a busy server a request sent on such a connection was lost with "Server disconnected without
sending a response" (seen in CI on ``test_one_turn.py::test_delete_while_a_turn_runs_or_starts``).
"""

from __future__ import annotations

import select
import socket
from pathlib import Path

import httpx
import openai
import pytest

from clawlet.serving import KEEP_ALIVE_SECONDS, uvicorn_options
from tests.conftest import ServeProcess

#: Longer than uvicorn's default keep-alive (5 s): a connection idle this long was closed before.
IDLE_SECONDS = 6.5


def request(port: int) -> bytes:
    return f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length body, read whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def test_keep_alive_outlasts_the_clients_idle_expiry() -> None:
    """The servers' keep-alive is longer than what the common clients keep a connection for."""
    httpx_expiry = httpx.Limits().keepalive_expiry
    openai_expiry = openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert httpx_expiry is not None and openai_expiry is not None
    assert max(httpx_expiry, openai_expiry, 15.0) < KEEP_ALIVE_SECONDS  # 15 s: aiohttp's
    assert uvicorn_options()["timeout_keep_alive"] == KEEP_ALIVE_SECONDS


@pytest.mark.slow
def test_clawlet_serve_keeps_an_idle_connection_open(clawlet_home: Path, serve: list[ServeProcess]) -> None:
    """A real ``clawlet serve``: a connection idle longer than uvicorn's default still answers."""
    server = ServeProcess(clawlet_home)
    serve.append(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(request(server.port))
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        # the server would make the socket readable (EOF) if it closed the idle connection
        readable, _, _ = select.select([sock], [], [], IDLE_SECONDS)
        assert not readable, sock.recv(100)
        sock.sendall(request(server.port))
        assert read_response(sock).startswith(b"HTTP/1.1 200")

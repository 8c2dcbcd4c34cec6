"""A model answer that arrives in one burst reaches the turn's watchers chunk by chunk, the first at
once: the model step lets each chunk out before it parses the next (clawlet.engine.token_release)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from clawlet.config import Settings
from clawlet.events import TextDelta
from clawlet.services import build_services

CHUNKS = 200


def burst_response() -> bytes:
    """A streamed chat completion of ``CHUNKS`` text chunks, headers and body as one write."""
    frames = [{"role": "assistant", "content": ""}] + [{"content": f"w{n} "} for n in range(CHUNKS)]
    body = "".join(
        "data: "
        + json.dumps(
            {
                "id": "chatcmpl-burst",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
        )
        + "\n\n"
        for delta in frames
    )
    end = {"id": "chatcmpl-burst", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body += "data: " + json.dumps({**end, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body += "\n\ndata: [DONE]\n\n"
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return (head + body).encode()


def read_request(conn: socket.socket) -> None:
    """Read one HTTP request (headers and its ``Content-Length`` body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += conn.recv(65536)


@pytest.fixture
def burst_upstream() -> Iterator[str]:
    """An OpenAI-compatible upstream on loopback that sends its whole streamed answer at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                read_request(conn)
                conn.sendall(burst_response())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    listener.close()
    thread.join(timeout=10)


@pytest.mark.slow
async def test_the_first_chunk_of_a_burst_goes_out_before_the_rest_is_parsed(burst_upstream: str) -> None:
    settings = Settings(provider="openai", llm_base_url=burst_upstream, llm_model="m", llm_api_key="k")
    services = build_services(settings)
    run = await services.sessions.start_turn("burst", "hello", title=False)
    published_at_first = None
    async for event in run.events():
        if isinstance(event, TextDelta) and published_at_first is None:
            # how many text chunks the turn had published when this watcher got the first one
            published_at_first = sum(isinstance(each, TextDelta) for each in run.log)
    await run.wait()
    assert run.answer.text == "".join(f"w{n} " for n in range(CHUNKS))
    assert published_at_first is not None
    assert published_at_first < CHUNKS // 2  # not the whole burst first (before: all 200)

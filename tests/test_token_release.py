"""A model answer that arrives in one burst reaches the turn's watchers as it is parsed, the first
chunk at once: the model step lets it out before it parses the rest (clawlet.engine.token_release),
and the chunks already buffered behind it go out joined (clawlet.llm.chunk_join)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from uuid import uuid4

import pytest

from clawlet.config import Settings
from clawlet.engine import token_release
from clawlet.engine.token_release import TokenRelease
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
async def test_the_first_chunk_of_a_burst_goes_out_alone_and_the_rest_joined(burst_upstream: str) -> None:
    """The first text goes out at once, before the rest of the burst is parsed; the chunks behind it,
    all buffered, are relayed joined (clawlet.llm.chunk_join), not one event per chunk."""
    settings = Settings(provider="openai", llm_base_url=burst_upstream, llm_model="m", llm_api_key="k")
    services = build_services(settings)
    run = await services.sessions.start_turn("burst", "hello", title=False)
    first: TextDelta | None = None
    published_at_first = ""
    async for event in run.events():
        if isinstance(event, TextDelta) and first is None:
            first = event
            # the text the turn had published when this watcher got the first chunk
            published_at_first = "".join(each.text for each in run.log if isinstance(each, TextDelta))
    await run.wait()
    whole = "".join(f"w{n} " for n in range(CHUNKS))
    assert run.answer.text == whole
    assert first is not None and first.text == "w0 "
    assert len(published_at_first) < len(whole) // 2  # not the whole burst first (before: all of it)
    texts = [each.text for each in run.log if isinstance(each, TextDelta)]
    assert "".join(texts) == whole and len(texts) <= CHUNKS // 8  # joined (before: one per chunk)


def hops(loop: asyncio.AbstractEventLoop, count: int, then: Callable[[], None]) -> None:
    """``then`` after ``count`` turns of the loop (a text passing LangGraph's stream and the turn)."""
    if count == 0:
        then()
    else:
        loop.call_soon(hops, loop, count - 1, then)


async def test_the_first_text_goes_all_the_way_out_before_the_model_step_parses_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the callback of the chunk after a model call's first text (LangGraph hands a chunk to its
    stream in a handler that runs after this one), the model step gives the loop as many turns as
    the text takes to be passed on, then lets the watchers it woke run, before the next chunk is
    parsed; after that, one release per interval (monkeypatched huge here). Before, one turn per
    chunk: the text moved one hop per chunk parsed."""
    monkeypatch.setattr(token_release, "RELEASE_INTERVAL", 1e9)
    release = TokenRelease()
    call = uuid4()
    loop = asyncio.get_running_loop()
    ran: list[str] = []

    def pass_on() -> None:
        release.passed_on()
        loop.call_soon(ran.append, "watcher")  # the turn published the text: its watcher wakes

    await release.on_llm_new_token("first", run_id=call)
    hops(loop, 4, pass_on)  # LangGraph's handler put the text into its stream
    await release.on_llm_new_token("second", run_id=call)
    assert ran == ["watcher"]

    loop.call_soon(ran.append, "later")
    await release.on_llm_new_token("third", run_id=call)  # now one release per interval
    assert ran == ["watcher"]
    await asyncio.sleep(0)
    assert ran == ["watcher", "later"]

    next_call = uuid4()
    await release.on_llm_new_token("next call", run_id=next_call)  # a new model call: its first text
    hops(loop, 2, pass_on)
    await release.on_llm_new_token("more", run_id=next_call)
    assert ran[-1] == "watcher" and len(ran) == 3


async def test_a_first_text_nobody_passes_on_holds_the_model_step_only_a_few_turns() -> None:
    """A model call whose text the turn does not relay (one inside a tool, say) is not held until
    it is passed on: the step goes on after a bounded number of turns."""
    release = TokenRelease()
    call = uuid4()
    loop = asyncio.get_running_loop()
    never: list[str] = []
    await release.on_llm_new_token("first", run_id=call)
    hops(loop, token_release.MAX_TURNS_FOR_FIRST_TEXT + 10, lambda: never.append("passed"))
    await release.on_llm_new_token("second", run_id=call)
    assert never == [] and not release.passed

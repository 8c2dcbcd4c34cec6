"""A streamed chat completion's body read by clawlet.llm.sse_chunks gives exactly the chunks the
openai SDK's own SSE decoder gives, however the body is cut into reads (CR, LF and CRLF line ends,
a CRLF or a UTF-8 character split between reads, multi-line data, comments, other fields)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from openai import APIError
from openai._streaming import SSEDecoder

from clawlet.llm.sse_chunks import SseChunks

BODY = b"".join(
    [
        b'data: {"a": 1}\n\n',
        b": a comment\r\n",
        b'event: message\r\ndata: {"b":\r\ndata: 2}\r\n\r\n',
        b'retry: 10\rdata: {"c": "\xe4\xb8\x96\xe7\x95\x8c"}\r\r',
        b'data:{"d":4}\n\nunknown: field\n\n\n',
        b'data: {"choices": [{"delta": {"content": "\xe4\xbd\xa0\xe5\xa5\xbd"}}]}\r\n\r\n',
        b"data: [DONE]\n\n",
        b'data: {"after": "done"}\n\n',
    ]
)


def expected(body: bytes) -> list[Any]:
    """What the SDK's stream yields for a chat completion: each event's data as JSON, up to [DONE]."""
    chunks = []
    for event in SSEDecoder().iter_bytes(iter([body])):
        if event.data.startswith("[DONE]"):
            break
        chunks.append(event.json())
    return chunks


def response(pieces: list[bytes]) -> httpx2.Response:
    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    return httpx2.Response(
        200, content=body(), request=httpx2.Request("POST", "http://upstream/v1/chat/completions")
    )


async def read(pieces: list[bytes]) -> list[Any]:
    return [chunk async for chunk in SseChunks(response(pieces))]


async def test_every_way_of_cutting_the_body_reads_what_the_sdk_reads() -> None:
    want = expected(BODY)
    assert len(want) == 5 and want[2] == {"c": "世界"} and want[1] == {"b": 2}
    assert await read([BODY]) == want
    assert await read([BODY[i : i + 1] for i in range(len(BODY))]) == want
    for cut in range(1, len(BODY)):
        assert await read([BODY[:cut], BODY[cut:]]) == want, cut


async def test_the_body_ends_without_done() -> None:
    body = b'data: {"a": 1}\n\ndata: {"unfinished": true}'
    assert await read([body]) == expected(body) == [{"a": 1}]


async def test_an_error_event_raises_the_sdks_api_error() -> None:
    body = b'data: {"a": 1}\n\ndata: {"error": {"message": "the upstream broke"}}\n\n'
    chunks = SseChunks(response([body]))
    assert await chunks.__anext__() == {"a": 1}
    with pytest.raises(APIError, match="the upstream broke") as raised:
        await chunks.__anext__()
    assert raised.value.body == {"message": "the upstream broke"}

    chunks = SseChunks(response([b'data: {"error": "no message"}\n\n']))
    with pytest.raises(APIError, match="An error occurred during streaming"):
        await chunks.__anext__()


async def test_an_event_without_data_is_skipped() -> None:
    """(The SDK parses an id-only event's empty data as JSON and fails.)"""
    assert await read([b'id: 7\n\ndata: {"a": 1}\n\n\n\nid: 8\n\n']) == [{"a": 1}]


async def test_data_that_is_not_json_raises_as_in_the_sdk() -> None:
    with pytest.raises(json.JSONDecodeError):
        await read([b"data: not json\n\n"])


async def test_the_events_of_one_read_are_taken_without_waiting() -> None:
    """A read's events are split at once: the second is there for the taking (no further read)."""
    reads = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal reads
        reads += 1
        yield b'data: {"a": 1}\n\ndata: {"a": 2}\n\n'
        reads += 1

    chunks = SseChunks(httpx2.Response(200, content=body(), request=httpx2.Request("GET", "http://x")))
    assert [await chunks.__anext__(), await chunks.__anext__()] == [{"a": 1}, {"a": 2}]
    assert reads == 1

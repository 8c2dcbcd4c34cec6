"""The chunks of a streamed chat completion read straight off its response body.

The openai SDK's ``AsyncStream`` reads a streamed answer through four nested async generators (its
stream, its events, its SSE decoder, the HTTP body) and a regular-expression line splitter, a few
of which run for every chunk even when a whole burst is in one read. :class:`SseChunks` reads the
same body the same way the SDK does for a chat completion, in one place:

- the server-sent events: lines ended by CR, LF or CRLF, ``data:`` lines joined by a newline,
  comments and other fields ignored, an event without data skipped (the SDK fails parsing its
  empty data);
- each event's data parsed as JSON only when it is taken;
- ``[DONE]`` ends the stream (the rest of an HTTP/1.1 body drained so the connection is reused);
- an event carrying an ``error`` object raises the SDK's :class:`~openai.APIError`, the HTTP
  client's timeouts and failures its :class:`~openai.APITimeoutError` and
  :class:`~openai.APIConnectionError`.

All events of a read are split at once, so taking the next one of them never waits.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import httpx2
from openai import APIConnectionError, APIError, APITimeoutError
from openai._httpx2 import request_exceptions, timeout_exceptions
from openai._streaming_cleanup import drain_response_async

DONE = "[DONE]"


class SseChunks:
    """One streamed chat completion's chunks (JSON values), in order; ``StopAsyncIteration`` at its end."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self.pieces = response.aiter_bytes()
        self.rest = b""
        """The bytes after the last complete line (and a CR that may start a CRLF)."""
        self.lines: list[str] = []
        """The data lines of the event being read."""
        self.events: deque[str] = deque()
        """The data of the events read and not yet taken."""
        self.ended = False

    def __aiter__(self) -> SseChunks:
        return self

    async def __anext__(self) -> Any:
        while not self.events:
            if self.ended:
                raise StopAsyncIteration
            try:
                piece = await self.pieces.__anext__()
            except StopAsyncIteration:
                self.read(b"", last=True)
                await self.end(drain=False)
                continue
            except timeout_exceptions() as error:
                raise APITimeoutError(request=self.response.request) from error
            except request_exceptions() as error:
                raise APIConnectionError(request=self.response.request) from error
            self.read(piece)
        data = self.events.popleft()
        if data.startswith(DONE):
            await self.end(drain=self.response.http_version == "HTTP/1.1")
            raise StopAsyncIteration
        chunk = json.loads(data)
        if isinstance(chunk, dict) and chunk.get("error"):
            body = chunk["error"]
            message = body.get("message") if isinstance(body, dict) else None
            if not message or not isinstance(message, str):
                message = "An error occurred during streaming"
            raise APIError(message=message, request=self.response.request, body=body)
        return chunk

    async def end(self, *, drain: bool) -> None:
        """The stream is over: nothing more is taken, and the response is closed (drained first)."""
        self.ended = True
        self.events.clear()
        if drain:
            await drain_response_async(self.response)
        await self.response.aclose()

    def read(self, piece: bytes, *, last: bool = False) -> None:
        """Split the complete lines of ``rest + piece`` into events (at the body's end, the rest too)."""
        text = self.rest + piece
        if text.endswith(b"\r") and not last:
            text, self.rest = text[:-1], b"\r"  # the CR of a CRLF whose LF comes in the next read
        else:
            self.rest = b""
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self.rest = lines.pop() + self.rest
        if last and self.rest:
            lines.append(self.rest)
            self.rest = b""
        for raw in lines:
            if not raw:  # a blank line ends the event
                if self.lines:
                    self.events.append("\n".join(self.lines))
                    self.lines = []
                continue
            name, _, value = raw.decode("utf-8").partition(":")
            if name == "data":
                self.lines.append(value[1:] if value.startswith(" ") else value)

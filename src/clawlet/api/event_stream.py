"""Server-Sent Events: the encoding every SSE edge shares and the SSE :class:`EventStream`.

:func:`sse_frame` (a named event), :func:`sse_data` (a bare ``data:`` line), :data:`KEEPALIVE` (a
comment), :class:`FrameTemplate` (a frame sent once per text chunk, encoded but for its one
changing value) and :class:`SseEventStream`, the base of the workbench, chat completions and
native streams (:mod:`clawlet.event_stream` is the translator base).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from clawlet.api.sse_response import SseResponse
from clawlet.event_stream import EventStream
from clawlet.events import Event

KEEPALIVE = ": keep-alive\n\n"
"""An SSE comment: keeps proxies and clients from timing out while nothing happens."""

KEEPALIVE_SECONDS = 15.0
"""How long a stream stays silent before it sends :data:`KEEPALIVE`."""


_encode = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder on every call."""


def sse_frame(event_type: str, data: dict[str, Any]) -> str:
    """One named SSE event; the JSON also carries ``type`` so either parsing style works."""
    return f"event: {event_type}\ndata: {_encode({'type': event_type, **data})}\n\n"


def sse_data(payload: dict[str, Any]) -> str:
    """One bare ``data:`` SSE line carrying ``payload`` as JSON (OpenAI's and the native style)."""
    return f"data: {_encode(payload)}\n\n"


HOLE = "\x00clawlet-hole\x00"
"""Where a :class:`FrameTemplate`'s value goes (a string no payload holds)."""


class FrameTemplate:
    """A frame sent again and again with one value changing (each text chunk's): ``fill(value)``
    is the frame ``frame(payload)`` makes with ``value`` where ``payload`` holds :data:`HOLE`, the
    same text, but only ``value`` is encoded each time."""

    def __init__(self, frame: str) -> None:
        self.before, hole, self.after = frame.partition(_encode(HOLE))
        if not hole:
            raise ValueError("the frame has no HOLE")

    def fill(self, value: Any) -> str:
        return f"{self.before}{_encode(value)}{self.after}"


class SseEventStream(EventStream[str]):
    """An :class:`EventStream` whose items are SSE text: keep-alive comments while the run is
    silent, and :meth:`response` to send it."""

    def on_keepalive(self) -> Iterable[str]:
        return (KEEPALIVE,)

    def response(self, events: AsyncIterator[Event | None], headers: Mapping[str, str]) -> SseResponse:
        """The streamed HTTP response for ``events`` (unbuffered by proxies, never cached)."""
        return SseResponse(self.batches(events), headers)

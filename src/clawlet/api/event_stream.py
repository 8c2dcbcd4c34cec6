"""Server-Sent Events: the encoding every SSE edge shares and the SSE :class:`EventStream`.

:func:`sse_frame` (a named event), :func:`sse_data` (a bare ``data:`` line), :data:`KEEPALIVE` (a
comment) and :class:`SseEventStream`, the base of the workbench, chat completions and native
streams (:mod:`clawlet.event_stream` is the translator base).
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


def sse_frame(event_type: str, data: dict[str, Any]) -> str:
    """One named SSE event; the JSON also carries ``type`` so either parsing style works."""
    payload = json.dumps({"type": event_type, **data}, ensure_ascii=False)
    return f"event: {event_type}\ndata: {payload}\n\n"


def sse_data(payload: dict[str, Any]) -> str:
    """One bare ``data:`` SSE line carrying ``payload`` as JSON (OpenAI's and the native style)."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class SseEventStream(EventStream[str]):
    """An :class:`EventStream` whose items are SSE text: keep-alive comments while the run is
    silent, and :meth:`response` to send it."""

    def on_keepalive(self) -> Iterable[str]:
        return (KEEPALIVE,)

    def response(self, events: AsyncIterator[Event | None], headers: Mapping[str, str]) -> SseResponse:
        """The streamed HTTP response for ``events`` (unbuffered by proxies, never cached)."""
        return SseResponse(self.transform(events), headers)

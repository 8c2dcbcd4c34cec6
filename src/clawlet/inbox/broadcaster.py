"""``EventBroadcaster``: fans inbox events out to SSE clients, globally or per task.

Each event is encoded once as an SSE frame and queued to every interested subscriber; a client
that stops reading (its queue fills up) is dropped rather than slowing everyone else down, and
reconnects (browsers' EventSource does so by itself). Subscriptions end when the client
disconnects: the SSE response is cancelled and its ``finally`` unsubscribes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30.0
QUEUE_LIMIT = 1_000
RETRY_MS = 3_000
"""Asked of EventSource clients: reconnect 3 s after a drop (the seed's client does the same)."""

_CLOSE = object()


def sse_event(event: str, data: Any) -> str:
    """One SSE frame whose ``data`` is the JSON object itself (the seed's inbox format)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


class Subscription:
    def __init__(self, task_id: str | None) -> None:
        self.task_id = task_id
        self.queue: asyncio.Queue[object] = asyncio.Queue(QUEUE_LIMIT)
        self.dropped = False


class EventBroadcaster:
    def __init__(self, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self._subscribers: set[Subscription] = set()

    @property
    def client_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: str, data: Any, task_id: str | None = None) -> int:
        """Queue an event for global subscribers and for those of ``task_id``; returns how many."""
        frame = sse_event(event, data)
        delivered = 0
        for subscription in list(self._subscribers):
            if subscription.task_id is not None and subscription.task_id != task_id:
                continue
            try:
                subscription.queue.put_nowait(frame)
                delivered += 1
            except asyncio.QueueFull:
                log.warning("dropping an SSE client that stopped reading (%d events queued)", QUEUE_LIMIT)
                self._drop(subscription)
        return delivered

    def _drop(self, subscription: Subscription) -> None:
        subscription.dropped = True
        self._subscribers.discard(subscription)
        # make room for the close marker so the stream ends promptly
        while not subscription.queue.empty():
            subscription.queue.get_nowait()
        subscription.queue.put_nowait(_CLOSE)

    def subscribe(self, task_id: str | None = None) -> Subscription:
        subscription = Subscription(task_id)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    async def stream(self, task_id: str | None = None) -> AsyncIterator[str]:
        """The SSE body for one client: a retry hint, then events (all, or ``task_id``'s), with a
        heartbeat every ``heartbeat_seconds`` of silence. The subscription starts when the body
        does and ends however it ends."""
        subscription = self.subscribe(task_id)
        try:
            yield f"retry: {RETRY_MS}\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(subscription.queue.get(), timeout=self.heartbeat_seconds)
                except TimeoutError:
                    yield sse_event("heartbeat", {"timestamp": int(time.time() * 1000)})
                    continue
                if item is _CLOSE:
                    return
                assert isinstance(item, str)
                yield item
        finally:
            self.unsubscribe(subscription)

    def close_all(self) -> None:
        """End every stream (server shutdown)."""
        for subscription in list(self._subscribers):
            self._drop(subscription)

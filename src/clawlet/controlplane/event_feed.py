"""How the events one control-plane instance stores reach a session's subscribers on every other.

The instance holding a user's ``/ws/vm`` socket stores the session's events in the shared event log
(:mod:`clawlet.controlplane.event_log`) and hands them to its own subscribers at once. For the
subscribers on other instances it publishes, after each stored batch, a small **notice** on the
session's broker channel (:func:`session_channel`): ``{"instance": <its id>, "n": <the highest n
stored>}``, and ``{"instance", "stopped": true}`` when the session is stopped there. An instance
listens to that channel only while it has a subscriber of the session (``ControlPlane._watch``); on
a notice it reads the events it does not have from the log, by ``n`` — so the broker carries no
event, and a lost notice (pub/sub is at most once) costs only time: every ``CATCH_UP_SECONDS`` of
silence the listener looks at the log's counter itself.

:class:`EventNotices` is the publishing side: notices are coalesced per session (one message per
session for whatever was stored while the previous ones went out) and published in order by one
task, so the link's writer never waits for the broker, and a broker outage costs only the notices
(logged once per outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from clawlet.controlplane.broker import Broker, BrokerUnavailable

log = logging.getLogger(__name__)

CATCH_UP_SECONDS: Final = 10.0
"""Silence on a session's channel after which its listener reads the log's counter (a notice the
broker lost is made up for within this long)."""


def session_channel(session_id: str) -> str:
    """The broker channel of the control plane's session ``session_id`` (its session key)."""
    return f"events.{session_id}"


class EventNotices:
    """Publishes the notices of the sessions this instance stores events of (see the module
    docstring). :meth:`stored` and :meth:`stopped` never wait: they queue, and a task started at
    the first one publishes; :meth:`aclose` ends it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._pending: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def stored(self, session_id: str, n: int) -> None:
        """The log holds the session's events up to ``n`` now."""
        notice = self._notice(session_id)
        notice["n"] = max(int(notice.get("n", 0)), n)

    def stopped(self, session_id: str) -> None:
        """The session was stopped here: its subscriptions everywhere end."""
        self._notice(session_id)["stopped"] = True

    def _notice(self, session_id: str) -> dict[str, Any]:
        notice = self._pending.get(session_id)
        if notice is None:
            notice = self._pending[session_id] = {"instance": self.broker.instance_id}
        if self._task is None:
            self._task = asyncio.create_task(self._publish_forever(), name="control-plane-event-notices")
        self._wake.set()
        return notice

    async def _publish_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            for session_id, notice in pending.items():
                try:
                    await self.broker.publish(session_channel(session_id), notice)
                except BrokerUnavailable as exc:
                    if not self._failing:
                        log.warning("event notices not published (other instances catch up later): %s", exc)
                    self._failing = True
                else:
                    if self._failing:
                        log.info("event notices are published again")
                    self._failing = False

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

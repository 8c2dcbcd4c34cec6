"""``RemoteAdapter``: the runtime of cluster mode's HTTP API — a user's turn runs on that user's
execution plane, reached through the control plane's routing API.

Each turn: ``start_session`` (idempotent: the execution plane ignores a repeated start of a running
session, and a restarted execution plane gets the session back), a subscription to the session's
events, then ``user_message``. The execution plane sends its run's clawlet events in their JSON
encoding (:mod:`clawlet.cluster.events`); they are decoded back into the very same events and
yielded as they are — text, thinking, retrievals, tools with their call ids, new segments, token
usage, approvals and questions — except the run's own lifecycle, which the control plane's
``SessionManager`` produces itself (its ``RunStarted`` and title, from the turn's outcome):

=====================================  ===========================================================
the execution plane's event            here
=====================================  ===========================================================
``RunFinished``                        the turn ends
``RunCancelled``                       the turn ends as cancelled
``RunFailed {error}``                  the turn fails with that error
``RunStarted``, ``Title``              skipped (the control plane's own take their place)
anything else                          yielded unchanged
=====================================  ===========================================================

An event that does not decode (an execution plane of another clawlet version) fails the turn
saying so.

A turn fails with a clear error when the user has no connected execution plane, or when it stays
disconnected for ``disconnect_grace`` seconds in the middle of a turn (short drops are fine: the
execution plane buffers its events and replays them on reconnect).

Session ids are namespaced: the control plane's session table is shared by every user, so the id
sent to the execution plane is ``<digest of user and workspace>.<session id>``
(:func:`remote_session_id`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator
from typing import Any, Final

from clawlet.cluster.control_plane import ControlPlane, SessionEvent
from clawlet.events import (
    Event,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunStarted,
    Title,
    event_from_json,
)
from clawlet.runtime.base import RunConfig, RuntimeAdapter, UserMessage
from clawlet.sessions.store import SESSION_ID_PATTERN

log = logging.getLogger(__name__)

DISCONNECT_GRACE: Final = 30.0
"""Seconds a turn waits for a disconnected execution plane to come back before it fails."""
POLL_SECONDS: Final = 1.0
CANCEL_WAIT: Final = 10.0
MAX_SESSION_ID: Final = 128


class RemoteRunFailed(Exception):
    """The execution plane reported ``RunFailed``, sent what is not an event, or could not be reached."""


def remote_session_id(user_id: str, workspace: str, session_id: str) -> str:
    """The control plane's id of ``session_id`` in ``workspace`` of ``user_id``: unique across users
    and workspaces, and a valid session id on the execution plane."""
    prefix = hashlib.sha256(f"{user_id}\0{workspace}".encode()).hexdigest()[:12]
    combined = f"{prefix}.{session_id}"
    if len(combined) > MAX_SESSION_ID or not SESSION_ID_PATTERN.fullmatch(combined):
        combined = f"{prefix}.{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"
    return combined


def decode_remote_event(data: Any) -> Event:
    """The clawlet event of one ``sse_event``'s ``data``; :class:`RemoteRunFailed` when it is not one."""
    try:
        return event_from_json(data)
    except ValueError as exc:
        raise RemoteRunFailed(
            f"the execution plane sent an event this control plane cannot read ({exc}); "
            "run the same clawlet version on both"
        ) from None


class RemoteAdapter(RuntimeAdapter):
    """One session of one user, run on that user's execution plane."""

    def __init__(
        self,
        plane: ControlPlane,
        user_id: str,
        workspace: str = "",
        *,
        disconnect_grace: float = DISCONNECT_GRACE,
    ) -> None:
        self.plane = plane
        self.user_id = user_id
        self.workspace = workspace
        self.disconnect_grace = disconnect_grace
        self.session_id: str | None = None
        self.remote_id: str | None = None
        self.config = RunConfig()
        self.turns = 0
        self.running = False
        self._turn_over = asyncio.Event()
        self._turn_over.set()

    async def start(self, session_id: str, config: RunConfig) -> None:
        # Nothing is sent yet: every turn (re)starts the remote session, so a missing execution
        # plane fails the turn (as an event the user sees) rather than the request.
        self.session_id = session_id
        self.remote_id = remote_session_id(self.user_id, self.workspace, session_id)
        self.config = config

    def _start_config(self) -> dict[str, Any]:
        config: dict[str, Any] = dict(self.config.options)
        if self.config.runtime_type not in ("", "engine"):
            config["runtime_type"] = self.config.runtime_type
        return config

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        if self.remote_id is None:
            raise RemoteRunFailed("the session was not started")
        self.turns += 1
        self.running = True
        self._turn_over.clear()
        try:
            await self.plane.start_session(self.user_id, self.remote_id, self._start_config())
            subscription = self.plane.subscribe(self.user_id, self.remote_id)
            async with subscription:
                await self.plane.send_user_message(self.user_id, self.remote_id, {"content": data.text})
                async for item in self._events(subscription):
                    event = decode_remote_event(item["data"])
                    if isinstance(event, RunFinished):
                        return
                    if isinstance(event, RunCancelled):
                        raise asyncio.CancelledError("cancelled on the execution plane")
                    if isinstance(event, RunFailed):
                        raise RemoteRunFailed(event.error or "the execution plane failed")
                    if not isinstance(event, RunStarted | Title):
                        yield event
            raise RemoteRunFailed("the session was stopped before the turn completed")
        finally:
            self.running = False
            self._turn_over.set()

    async def _events(self, subscription: Any) -> AsyncGenerator[SessionEvent, None]:
        """The subscription's events; fails once the execution plane has been away too long."""
        iterator = subscription.__aiter__()
        away_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                event: SessionEvent = await asyncio.wait_for(iterator.__anext__(), POLL_SECONDS)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if self.plane.is_connected(self.user_id):
                    away_since = None
                    continue
                away_since = away_since if away_since is not None else loop.time()
                if loop.time() - away_since >= self.disconnect_grace:
                    raise RemoteRunFailed(
                        f"the execution plane of user {self.user_id!r} disconnected during the turn "
                        f"and did not come back within {self.disconnect_grace:g} s"
                    ) from None
                continue
            yield event

    async def cancel(self) -> None:
        """Cancel on the execution plane and wait (at most ``CANCEL_WAIT`` s) for its
        ``execution_complete {cancelled}``, so that it cannot end the session's next turn."""
        if self.remote_id is None or not self.running:
            return
        try:
            await self.plane.cancel(self.user_id, self.remote_id)
        except Exception as exc:  # the run's task is cancelled by the caller anyway
            log.warning("could not cancel remote session %s: %s", self.remote_id, exc)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._turn_over.wait(), CANCEL_WAIT)

    async def stop(self) -> None:
        if self.remote_id is not None:
            with contextlib.suppress(Exception):
                await self.plane.stop_session(self.user_id, self.remote_id)
        self.session_id = None

    def get_snapshot(self) -> dict[str, Any]:
        return {
            "runtime_type": "remote",
            "session_id": self.session_id,
            "remote_session_id": self.remote_id,
            "user_id": self.user_id,
            "turns": self.turns,
            "running": self.running,
        }

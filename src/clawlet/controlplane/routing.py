"""The control plane's end of the HTTP tunnel: a user's request reaches their execution plane from
whichever control-plane instance it arrived at.

:class:`TunnelRouter` belongs to one :class:`~clawlet.controlplane.server.ControlPlane` (one
instance) and talks to the others through the broker (:mod:`clawlet.controlplane.broker`: in-process by
default, Redis with ``CLAWLET_REDIS_URL``). One path for every case, the single machine included:

* The instance holding a user's ``/ws/vm`` socket has **claimed** that user (a presence record that
  expires if the instance dies). :meth:`TunnelRouter.exchange` looks the holder up, subscribes to the
  request's reply channel ``http.<id>``, and publishes the ``http_request`` frame to the holder's
  channel ``instance.<instance_id>``.
* The holder sends the frame to the execution plane and publishes each ``http_response`` /
  ``http_body`` frame the execution plane answers with to the reply channel, until the last one.
* The requesting instance yields them in order, dropping repeats by ``n``. While it waits, every
  ``POLL_SECONDS`` of silence it looks at the presence record: when another instance holds the user
  now (the old one died; the execution plane reconnected through the load balancer), it asks the new
  holder to ``http_resume`` after the last ``n`` it has. An instance whose execution plane
  reconnects to it resumes the requests it was carrying itself. A user nobody holds for
  ``grace`` seconds ends the exchange with :class:`ExecPlaneOffline`.
* A consumer that stops early (the client went away) makes the holder send ``http_cancel``.
* :meth:`TunnelRouter.deliver` hands any other frame for a user's execution plane to the instance
  holding its socket (the ``response`` to a request that finished on another instance).

Pub/sub is at most once; the resume covers what a broker or instance failure drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from clawlet.cluster.protocol import (
    FrameError,
    HttpFrame,
    HttpRequestFrame,
    http_cancel_frame,
    http_resume_frame,
    parse_frame,
)
from clawlet.controlplane.broker import Broker
from clawlet.logs import swallowed

log = logging.getLogger(__name__)

CARRY_SECONDS: Final = 3600.0
"""A carried request whose answer never ended is forgotten after this long (its socket went to
another instance for good)."""
POLL_SECONDS: Final = 1.0
"""Silence after which a waiting exchange checks who holds the user's execution plane."""
OFFLINE_GRACE: Final = 30.0
"""How long an exchange waits for a user's execution plane to come back before it fails."""

SendToUser = Callable[[str, Mapping[str, Any]], Awaitable[bool]]
"""Sends a frame over this instance's socket of a user; ``False`` when this instance has none."""


class ExecPlaneOffline(Exception):
    """No instance holds the user's execution plane (within the grace period)."""


def instance_channel(instance_id: str) -> str:
    return f"instance.{instance_id}"


def reply_channel(request_id: str) -> str:
    return f"http.{request_id}"


@dataclass
class _Carried:
    """A request this instance forwards to its execution-plane socket for some requester."""

    user_id: str
    reply: str
    last_n: int = -1
    since: float = field(default_factory=time.monotonic)


class TunnelRouter:
    """See the module docstring. ``send_to_user`` is the control plane's socket writer."""

    def __init__(
        self,
        broker: Broker,
        send_to_user: SendToUser,
        *,
        grace: float = OFFLINE_GRACE,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.broker = broker
        self.send_to_user = send_to_user
        self.grace = grace
        self.poll_seconds = poll_seconds
        self._carried: dict[str, _Carried] = {}
        self._listener: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="tunnel-router")
        await self._ready.wait()

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError), swallowed(log, "routing: the listener failed"):
                await self._listener

    async def _listen(self) -> None:
        async with self.broker.subscribe(instance_channel(self.broker.instance_id)) as messages:
            self._ready.set()
            async for message in messages:
                try:
                    await self._on_instance_message(message)
                except Exception:
                    log.exception("tunnel: could not carry a %s", message.get("op"))

    # -- the holder's side -------------------------------------------------------------------------

    async def connected(self, user_id: str) -> None:
        """This instance now holds ``user_id``'s socket: claim it, resume what it was carrying."""
        await self.broker.claim(user_id)
        for request_id, carried in list(self._carried.items()):
            if carried.user_id == user_id:
                await self.send_to_user(user_id, http_resume_frame(request_id, carried.last_n))

    async def disconnected(self, user_id: str) -> None:
        await self.broker.release(user_id)

    async def deliver(self, instance_id: str, user_id: str, frame: Mapping[str, Any]) -> None:
        """Have ``instance_id`` send ``frame`` over its socket of ``user_id`` (at most once)."""
        message = {"op": "deliver", "user_id": user_id, "frame": dict(frame)}
        await self.broker.publish(instance_channel(instance_id), message)

    async def _on_instance_message(self, message: Mapping[str, Any]) -> None:
        op, user_id, reply = message.get("op"), message.get("user_id"), message.get("reply")
        frame = message.get("frame")
        if not isinstance(user_id, str) or not isinstance(frame, Mapping):
            return
        if op == "deliver":
            if not await self.send_to_user(user_id, frame):
                log.info("no socket of user %s here for a %s frame", user_id, frame.get("type"))
            return
        if not isinstance(reply, str):
            return
        request_id = str(frame.get("id", ""))
        self._forget_stale()
        if op == "cancel":
            self._carried.pop(request_id, None)
        else:
            carried = self._carried.setdefault(request_id, _Carried(user_id, reply))
            if op == "resume":
                carried.last_n = int(frame.get("after", -1))
        if not await self.send_to_user(user_id, frame):
            log.info("tunnel: no socket of user %s here for %s %s", user_id, op, request_id)

    def _forget_stale(self) -> None:
        now = time.monotonic()
        for request_id, carried in list(self._carried.items()):
            if now - carried.since > CARRY_SECONDS:
                del self._carried[request_id]

    async def from_exec_plane(self, user_id: str, frame: HttpFrame) -> None:
        """An ``http_response`` / ``http_body`` frame from ``user_id``'s execution plane."""
        carried = self._carried.get(frame["id"])
        if carried is None or carried.user_id != user_id:
            log.debug("tunnel: a frame of request %s nobody waits for", frame["id"])
            return
        if frame["type"] == "http_body":
            carried.last_n = max(carried.last_n, frame["n"])
            if not frame["more"]:
                del self._carried[frame["id"]]
        else:
            carried.last_n = max(carried.last_n, 0)
        await self.broker.publish(carried.reply, dict(frame))

    # -- the requester's side ----------------------------------------------------------------------

    async def exchange(self, user_id: str, request: HttpRequestFrame) -> AsyncGenerator[HttpFrame, None]:
        """The execution plane's answer to ``request``, frame by frame (``http_response`` first).

        Raises :class:`ExecPlaneOffline` when no instance holds the user (before anything was
        yielded, at once; later, after ``grace`` seconds). A request nothing came back for yet is
        sent again, whole, to a new holder (the execution plane runs an id once: a repeat resends
        what it has); one that has begun answering is resumed after its last frame."""
        request_id = request["id"]
        holder = await self.broker.holder(user_id)
        if holder is None:
            raise ExecPlaneOffline(user_id)
        last_n, finished = -1, False
        asked_after: int | None = None
        async with self.broker.subscribe(reply_channel(request_id)) as replies:
            await self._to_instance(holder, "request", user_id, request)
            frames = replies.__aiter__()
            loop = asyncio.get_running_loop()
            away_since: float | None = None
            try:
                while not finished:
                    try:
                        message = await asyncio.wait_for(frames.__anext__(), self.poll_seconds)
                    except TimeoutError:
                        now_holder = await self.broker.holder(user_id)
                        if now_holder is None:
                            away_since = away_since if away_since is not None else loop.time()
                            if loop.time() - away_since >= self.grace:
                                raise ExecPlaneOffline(user_id) from None
                            continue
                        away_since = None
                        if now_holder != holder:
                            holder = now_holder
                            log.info("tunnel: request %s continues through instance %s", request_id, holder)
                            if last_n < 0:  # nothing came back: the execution plane may never have had it
                                await self._to_instance(holder, "request", user_id, request)
                            else:
                                await self._to_instance(
                                    holder, "resume", user_id, http_resume_frame(request_id, last_n)
                                )
                        continue
                    frame = _http_frame(message)
                    if frame is None:
                        continue
                    n = frame["n"] if frame["type"] == "http_body" else 0
                    if n <= last_n:
                        continue  # a repeat (resumed, or carried twice)
                    if n > last_n + 1 and not (n == 1 and last_n == -1 and frame.get("lost")):
                        # a gap: frames went where nobody carried this request yet (the socket had
                        # just moved) or the broker dropped them. Ask for everything after the last
                        # one in order, once per gap; what came out of order comes again.
                        if asked_after != last_n:
                            asked_after = last_n
                            await self._to_instance(
                                holder, "resume", user_id, http_resume_frame(request_id, last_n)
                            )
                        continue
                    last_n = n
                    finished = frame["type"] == "http_body" and not frame["more"]
                    yield frame
            finally:
                if not finished:
                    with swallowed(
                        log, "routing: cancelling request %s on instance %s failed", request_id, holder
                    ):
                        await self._to_instance(holder, "cancel", user_id, http_cancel_frame(request_id))

    async def _to_instance(self, instance_id: str, op: str, user_id: str, frame: Mapping[str, Any]) -> None:
        message = {
            "op": op,
            "user_id": user_id,
            "reply": reply_channel(str(frame["id"])),
            "frame": dict(frame),
        }
        await self.broker.publish(instance_channel(instance_id), message)


def _http_frame(message: Mapping[str, Any]) -> HttpFrame | None:
    try:
        frame = parse_frame(message)
    except FrameError as exc:
        log.warning("tunnel: dropping a bad reply frame: %s", exc)
        return None
    if frame["type"] == "http_response" or frame["type"] == "http_body":
        return frame
    return None

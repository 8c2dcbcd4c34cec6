"""The control planes' message broker: presence records and publish/subscribe channels.

Every ``clawlet control-plane serve`` process has a broker with its own ``instance_id`` (a uuid hex).

- **Presence**: :meth:`Broker.claim` records "this instance holds user X's exec-plane socket"
  (overwriting another holder: the exec plane reconnected here), :meth:`Broker.holder` says which
  instance holds it, :meth:`Broker.release` drops the record only if this instance still holds it.
  Records live ``presence_ttl`` seconds (default 15) and a background task refreshes every record
  this instance claimed every ``presence_ttl / 3``: when the process dies they expire by themselves.
  A refresh that finds the record held by another instance forgets it (that instance took the
  socket over); one that finds it gone (expired while this process stalled, or a broker restart
  lost it) writes it again, since this instance still holds the socket.
- **Channels**: :meth:`Broker.publish` sends a JSON object to every current subscriber of a channel
  on any instance; :meth:`Broker.subscribe` is an async context manager and iterator of those
  messages, subscribed once ``__aenter__`` returns (a publish made after it is received). Delivery is
  at most once: a message published while a subscriber's broker is disconnected is lost, which is
  why the control plane keeps a durable event log and HTTP responses can be resumed
  (``http_resume``).

Two implementations: :class:`LocalBroker` (in-process; the single-machine default, used when
``CLAWLET_REDIS_URL`` is unset) and :class:`clawlet.controlplane.redis_broker.RedisBroker` (Redis, for any
number of instances). :func:`broker_from_url` picks one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Final, Protocol
from urllib.parse import urlsplit, urlunsplit

logger = logging.getLogger(__name__)

ENV_REDIS_URL: Final = "CLAWLET_REDIS_URL"
DEFAULT_PRESENCE_TTL: Final = 15.0
DEFAULT_MAX_QUEUED: Final = 10_000
"""Messages a subscriber may fall behind by; more are dropped (and logged) for that subscriber."""
REDIS_SCHEMES: Final = ("redis", "rediss", "unix")


class BrokerUnavailable(RuntimeError):
    """The broker's server cannot be reached (the message never contains a password)."""


class Subscription:
    """One subscriber to one channel: ``async with broker.subscribe(ch) as sub: async for msg in sub``.

    Each message is a fresh ``dict`` (the published JSON object). Iteration ends when the broker is
    closed. The broker delivers with :meth:`_deliver`; it opens and closes the subscription on the
    server with the two callbacks it passes in."""

    def __init__(
        self,
        channel: str,
        opener: Callable[[Subscription], Awaitable[None]],
        closer: Callable[[Subscription], Awaitable[None]],
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self.channel = channel
        self.dropped = 0
        """Messages lost because this subscriber fell more than ``max_queued`` behind."""
        self._opener = opener
        self._closer = closer
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(max_queued)
        self._ended = False

    async def __aenter__(self) -> Subscription:
        await self._opener(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await self._closer(self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._ended and self._queue.empty():
            raise StopAsyncIteration
        message = await self._queue.get()
        if message is None:
            raise StopAsyncIteration
        return message

    def _deliver(self, message: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning(
                    "broker subscriber of %r is behind: %d message(s) dropped", self.channel, self.dropped
                )

    def _end(self) -> None:
        """The broker closed: iteration stops once the queued messages are read."""
        if not self._ended:
            self._ended = True
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(None)


class Broker(Protocol):
    """What the control plane uses (see the module docstring)."""

    instance_id: str

    async def start(self) -> None: ...
    async def aclose(self) -> None: ...
    async def publish(self, channel: str, message: Mapping[str, Any]) -> int: ...
    def subscribe(self, channel: str) -> Subscription: ...
    async def claim(self, user_id: str) -> None: ...
    async def release(self, user_id: str) -> None: ...
    async def holder(self, user_id: str) -> str | None: ...


def encode_message(message: Mapping[str, Any]) -> str:
    """A message's wire form: compact JSON of an object (``TypeError`` for anything else)."""
    if not isinstance(message, Mapping):
        raise TypeError(f"a broker message is a JSON object, not {type(message).__name__}")
    return json.dumps(dict(message), ensure_ascii=False, separators=(",", ":"))


def decode_message(data: str | bytes) -> dict[str, Any] | None:
    """The message of a wire form, ``None`` (logged) when it is not a JSON object."""
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        logger.warning("broker: ignored a message that is not a JSON object")
        return None
    return message


class PresenceBroker(ABC):
    """What both implementations share: the instance id, the claimed users and their refresher."""

    def __init__(self, *, instance_id: str | None = None, presence_ttl: float = DEFAULT_PRESENCE_TTL) -> None:
        if presence_ttl <= 0:
            raise ValueError("presence_ttl must be positive")
        self.instance_id = instance_id or uuid.uuid4().hex
        self.presence_ttl = presence_ttl
        self._held: dict[str, int] = {}
        """user id → the number of this instance's latest claim (a refresh racing a claim or a
        release must not undo it)."""
        self._claims = 0
        self._refresher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._connect()
        self._refresher = asyncio.create_task(
            self._refresh_forever(), name=f"broker-presence-{self.instance_id}"
        )

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        for user_id in sorted(self._held):
            try:
                await self.release(user_id)
            except BrokerUnavailable as exc:  # the record expires by itself
                logger.warning("broker: could not release %s's presence: %s", user_id, exc)
        self._held.clear()
        await self._disconnect()

    async def claim(self, user_id: str) -> None:
        self._claims += 1
        self._held[user_id] = self._claims
        await self._set_presence(user_id)

    async def release(self, user_id: str) -> None:
        self._held.pop(user_id, None)
        await self._delete_presence_if_held(user_id)

    async def refresh_presence(self) -> None:
        """Refresh every record this instance holds once (the background task calls this)."""
        for user_id, claim in sorted(self._held.items()):
            refreshed = await self._refresh_presence(user_id)
            if user_id not in self._held:  # released meanwhile: undo a record the refresh wrote
                await self._delete_presence_if_held(user_id)
            elif not refreshed and self._held[user_id] == claim:  # (not claimed again meanwhile)
                del self._held[user_id]
                logger.info("broker: %s's exec plane is now held by another instance", user_id)

    async def _refresh_forever(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.presence_ttl / 3)
            try:
                await self.refresh_presence()
            except BrokerUnavailable as exc:
                if not failing:
                    logger.warning("broker: presence not refreshed: %s", exc)
                failing = True
            else:
                if failing:
                    logger.info("broker: presence refreshed again")
                failing = False

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.presence_ttl * 1000))

    @abstractmethod
    async def _connect(self) -> None: ...
    @abstractmethod
    async def _disconnect(self) -> None: ...
    @abstractmethod
    async def _set_presence(self, user_id: str) -> None: ...
    @abstractmethod
    async def _delete_presence_if_held(self, user_id: str) -> None: ...
    @abstractmethod
    async def _refresh_presence(self, user_id: str) -> bool:
        """Extend the record if this instance holds it (write it if nobody does); False if another does."""


class LocalHub:
    """The state :class:`LocalBroker` s share: presence records and subscribers of one process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.presence: dict[str, tuple[str, float]] = {}
        """user id → (instance id, expiry on ``clock``)."""
        self.subscribers: dict[str, dict[Subscription, str]] = {}
        """channel → {subscription: the instance id of its broker}."""

    def holder(self, user_id: str) -> str | None:
        record = self.presence.get(user_id)
        if record is None or record[1] <= self.clock():
            self.presence.pop(user_id, None)
            return None
        return record[0]


class LocalBroker(PresenceBroker):
    """The in-process broker (no network): one control-plane process, or several brokers on one
    :class:`LocalHub` in tests. Same semantics as Redis, TTLs included."""

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        presence_ttl: float = DEFAULT_PRESENCE_TTL,
        hub: LocalHub | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        super().__init__(instance_id=instance_id, presence_ttl=presence_ttl)
        self.hub = hub or LocalHub()
        self.max_queued = max_queued
        self._mine: set[Subscription] = set()

    async def publish(self, channel: str, message: Mapping[str, Any]) -> int:
        data = encode_message(message)
        subscribers = self.hub.subscribers.get(channel, {})
        for subscription in list(subscribers):
            decoded = decode_message(data)
            if decoded is not None:
                subscription._deliver(decoded)
        return len(set(subscribers.values()))

    def subscribe(self, channel: str) -> Subscription:
        return Subscription(channel, self._open, self._close, self.max_queued)

    async def holder(self, user_id: str) -> str | None:
        return self.hub.holder(user_id)

    async def _open(self, subscription: Subscription) -> None:
        self.hub.subscribers.setdefault(subscription.channel, {})[subscription] = self.instance_id
        self._mine.add(subscription)

    async def _close(self, subscription: Subscription) -> None:
        self._mine.discard(subscription)
        subscribers = self.hub.subscribers.get(subscription.channel, {})
        subscribers.pop(subscription, None)
        if not subscribers:
            self.hub.subscribers.pop(subscription.channel, None)

    async def _connect(self) -> None:
        return None

    async def _disconnect(self) -> None:
        for subscription in list(self._mine):
            await self._close(subscription)
            subscription._end()

    async def _set_presence(self, user_id: str) -> None:
        self.hub.presence[user_id] = (self.instance_id, self.hub.clock() + self.presence_ttl)

    async def _delete_presence_if_held(self, user_id: str) -> None:
        if self.hub.holder(user_id) == self.instance_id:
            del self.hub.presence[user_id]

    async def _refresh_presence(self, user_id: str) -> bool:
        if self.hub.holder(user_id) in (None, self.instance_id):
            await self._set_presence(user_id)
            return True
        return False


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: what logs and errors may show."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unparseable URL>"


def check_redis_url(url: str | None) -> None:
    """Refuse a ``CLAWLET_REDIS_URL`` that cannot name a Redis server, with a message that
    never shows its password (``ValueError``); ``None`` or blank (in-process broker) is fine."""
    if not url or not url.strip():
        return
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ValueError(f"{ENV_REDIS_URL} is not a valid URL ({redacted_url(url)}): bad port") from None
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"{ENV_REDIS_URL} must start with redis://, rediss:// or unix:// (got {redacted_url(url)})"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError(f"{ENV_REDIS_URL} names no host (got {redacted_url(url)})")
    if parts.scheme != "unix" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise ValueError(f"{ENV_REDIS_URL}'s path must be a database number (got {redacted_url(url)})")
    if parts.scheme == "unix" and not parts.path:
        raise ValueError(f"{ENV_REDIS_URL} names no socket path (got {redacted_url(url)})")


def broker_from_url(
    url: str | None, *, instance_id: str | None = None, presence_ttl: float = DEFAULT_PRESENCE_TTL
) -> Broker:
    """A :class:`LocalBroker` when ``url`` is ``None`` or blank, else a ``RedisBroker`` for it
    (``ValueError`` for a URL that cannot be one; nothing is connected before ``start``)."""
    if not url or not url.strip():
        return LocalBroker(instance_id=instance_id, presence_ttl=presence_ttl)
    check_redis_url(url)
    from clawlet.controlplane.redis_broker import RedisBroker

    return RedisBroker(url.strip(), instance_id=instance_id, presence_ttl=presence_ttl)

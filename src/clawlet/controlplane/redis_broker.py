"""The Redis broker (:mod:`clawlet.controlplane.broker`'s contract over ``redis.asyncio``).

Keys and channels start with ``prefix`` (default ``clawlet:``): a presence record is
``<prefix>presence:<user>`` = instance id, written with ``SET … PX <ttl>``; refreshed and released
by Lua scripts that compare the holder first (atomic on the server); a channel ``name`` is the Redis
channel ``<prefix>channel:<name>``.

All subscriptions of one broker share one pub/sub connection (a reader task fans messages out to the
local :class:`~clawlet.controlplane.broker.Subscription` s), which is also always subscribed to
``<prefix>broker:<instance id>`` so it stays in subscribed mode, and is pinged when idle. When that
connection drops (or stops answering), the reader reconnects with backoff and subscribes again to
every channel that still has a local subscriber; **messages published meanwhile are lost** (Redis
pub/sub is at most once: the control plane's event log and ``http_resume`` make up for it). Commands
(publish, presence) run on a connection pool that retries twice and otherwise raise
:class:`~clawlet.controlplane.broker.BrokerUnavailable`; the presence refresher keeps trying and writes
records again that a Redis restart lost. No error or log line shows the URL's password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import RedisError

from clawlet.controlplane.broker import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_PRESENCE_TTL,
    ENV_REDIS_URL,
    BrokerUnavailable,
    PresenceBroker,
    Subscription,
    check_redis_url,
    decode_message,
    encode_message,
    redacted_url,
)
from clawlet.logs import swallowed

logger = logging.getLogger(__name__)

T = TypeVar("T")

RECONNECT_DELAYS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_REFRESH: Final = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
"""


class RedisBroker(PresenceBroker):
    """Presence and channels on a Redis server shared by every control-plane instance."""

    def __init__(
        self,
        url: str,
        *,
        instance_id: str | None = None,
        presence_ttl: float = DEFAULT_PRESENCE_TTL,
        prefix: str = "clawlet:",
        max_queued: int = DEFAULT_MAX_QUEUED,
        ping_interval: float = 5.0,
        subscribe_timeout: float = 10.0,
    ) -> None:
        super().__init__(instance_id=instance_id, presence_ttl=presence_ttl)
        check_redis_url(url)
        self.url = redacted_url(url)
        """The server's URL as logs may show it (password masked)."""
        self.prefix = prefix
        self.max_queued = max_queued
        self.ping_interval = ping_interval
        self.subscribe_timeout = subscribe_timeout
        options: dict[str, Any] = {
            "decode_responses": True,
            "encoding_errors": "replace",
            "socket_connect_timeout": 5.0,
            "socket_timeout": 10.0,
        }
        try:
            retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)
            self._commands = Redis.from_url(url, retry=retry, **options)
            self._pubsub_client = Redis.from_url(url, retry=Retry(NoBackoff(), 0), **options)
        except ValueError as exc:
            raise ValueError(f"{ENV_REDIS_URL} is not a usable Redis URL ({self.url}): {exc}") from None
        password = urlsplit(url).password
        self._password = unquote(password) if password else None
        self._keepalive = f"{prefix}broker:{self.instance_id}"
        self._release = self._commands.register_script(_RELEASE)
        self._refresh = self._commands.register_script(_REFRESH)
        self._local: dict[str, set[Subscription]] = {}
        """channel name → this broker's subscribers."""
        self._confirmed: set[str] = set()
        """Redis channels the current pub/sub connection is subscribed to (the server said so)."""
        self._unanswered: dict[str, int] = {}
        """Redis channel → SUBSCRIBE commands sent on the current connection and not yet confirmed:
        a channel counts as subscribed only when the last one is (not by the answer to an earlier
        SUBSCRIBE that an UNSUBSCRIBE followed)."""
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None

    # -- channels -------------------------------------------------------------------------------

    async def publish(self, channel: str, message: Mapping[str, Any]) -> int:
        data = encode_message(message)
        return int(await self._call("publish", self._commands.publish(self._wire(channel), data)))

    def subscribe(self, channel: str) -> Subscription:
        return Subscription(channel, self._open, self._close, self.max_queued)

    def _wire(self, channel: str) -> str:
        return f"{self.prefix}channel:{channel}"

    async def _open(self, subscription: Subscription) -> None:
        if self._reader is None:
            raise BrokerUnavailable("the broker is not started")
        wire = self._wire(subscription.channel)
        async with self._lock:
            subscribers = self._local.setdefault(subscription.channel, set())
            subscribers.add(subscription)
            if len(subscribers) == 1 and self._pubsub is not None:
                self._unanswered[wire] = self._unanswered.get(wire, 0) + 1
                self._confirmed.discard(wire)  # a late answer to a SUBSCRIBE before an UNSUBSCRIBE
                with contextlib.suppress(RedisError, OSError):  # the reader reconnects and subscribes
                    await self._pubsub.subscribe(wire)
        try:
            await self._subscribed(wire)
        except BaseException:
            await self._close(subscription)
            raise

    async def _close(self, subscription: Subscription) -> None:
        async with self._lock:
            subscribers = self._local.get(subscription.channel)
            if subscribers is None or subscription not in subscribers:
                return
            subscribers.discard(subscription)
            if subscribers:
                return
            del self._local[subscription.channel]
            wire = self._wire(subscription.channel)
            self._confirmed.discard(wire)
            if self._pubsub is not None:
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.unsubscribe(wire)

    async def _subscribed(self, wire: str) -> None:
        """Return once the server confirmed the subscription to ``wire``."""
        if wire in self._confirmed:
            return
        waiter = self._waiters.get(wire)
        if waiter is None:
            waiter = self._waiters[wire] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.subscribe_timeout)
        except TimeoutError:
            raise BrokerUnavailable(
                f"Redis at {self.url} did not confirm a subscription within {self.subscribe_timeout:g} s"
            ) from None

    # -- the pub/sub connection -------------------------------------------------------------------

    async def _connect(self) -> None:
        await self._call("connect", self._commands.ping())
        self._reader = asyncio.create_task(self._read_forever(), name=f"broker-reader-{self.instance_id}")
        await self._subscribed(self._keepalive)

    async def _read_forever(self) -> None:
        failures = 0
        while True:
            pubsub = self._pubsub_client.pubsub()
            try:
                async with self._lock:
                    channels = [self._keepalive, *(self._wire(c) for c in self._local)]
                    self._unanswered = dict.fromkeys(channels, 1)
                    await pubsub.subscribe(*channels)
                    self._pubsub = pubsub
                if failures:
                    logger.info("broker: reconnected to Redis at %s", self.url)
                    failures = 0
                await self._read(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: reconnect
                if not failures:
                    logger.warning(
                        "broker: lost Redis at %s (%s); reconnecting, messages published meanwhile are lost",
                        self.url,
                        self._scrub(exc),
                    )
                failures += 1
            finally:
                self._pubsub = None
                self._confirmed.clear()
                self._unanswered.clear()
                with swallowed(logger, "redis broker: closing the subscription failed"):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS)) - 1])

    async def _read(self, pubsub: PubSub) -> None:
        loop = asyncio.get_running_loop()
        heard = loop.time()
        while True:
            raw = await pubsub.get_message(timeout=self.ping_interval)
            if raw is not None:
                heard = loop.time()
                self._dispatch(raw)
                continue
            silent = loop.time() - heard
            if silent > 3 * self.ping_interval:
                raise ConnectionError("the server stopped answering pings")
            if silent >= self.ping_interval:
                async with self._lock:
                    await pubsub.ping()

    def _dispatch(self, raw: dict[str, Any]) -> None:
        kind, wire = raw.get("type"), raw.get("channel")
        if kind == "subscribe" and isinstance(wire, str):
            unanswered = self._unanswered.pop(wire, 1) - 1
            if unanswered > 0:
                self._unanswered[wire] = unanswered
                return
            self._confirmed.add(wire)
            waiter = self._waiters.pop(wire, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif kind == "message" and isinstance(wire, str) and wire.startswith(f"{self.prefix}channel:"):
            name = wire[len(self.prefix) + len("channel:") :]
            for subscription in list(self._local.get(name, ())):
                message = decode_message(raw.get("data") or "")
                if message is not None:
                    subscription._deliver(message)

    async def _disconnect(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for subscribers in list(self._local.values()):
            for subscription in subscribers:
                subscription._end()
        self._local.clear()
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(BrokerUnavailable("the broker was closed"))
        self._waiters.clear()
        await self._commands.aclose()
        await self._pubsub_client.aclose()

    # -- presence ---------------------------------------------------------------------------------

    def _key(self, user_id: str) -> str:
        return f"{self.prefix}presence:{user_id}"

    async def holder(self, user_id: str) -> str | None:
        value = await self._call("holder", self._commands.get(self._key(user_id)))
        return value if isinstance(value, str) else None

    async def _set_presence(self, user_id: str) -> None:
        await self._call("claim", self._commands.set(self._key(user_id), self.instance_id, px=self.ttl_ms))

    async def _delete_presence_if_held(self, user_id: str) -> None:
        await self._call("release", self._release(keys=[self._key(user_id)], args=[self.instance_id]))

    async def _refresh_presence(self, user_id: str) -> bool:
        result = await self._call(
            "refresh", self._refresh(keys=[self._key(user_id)], args=[self.instance_id, self.ttl_ms])
        )
        return bool(result)

    # -- errors -----------------------------------------------------------------------------------

    async def _call(self, what: str, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except (RedisError, OSError) as exc:
            raise BrokerUnavailable(f"Redis at {self.url}: {what} failed: {self._scrub(exc)}") from None

    def _scrub(self, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        return text.replace(self._password, "***") if self._password else text

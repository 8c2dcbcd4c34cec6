"""The control planes' broker (clawlet.controlplane.broker): one contract, run against the in-process
LocalBroker and against RedisBroker on a real redis-server.

The Redis server is the one ``scripts/test`` starts (``CLAWLET_TEST_REDIS_URL``), else one this module
starts itself with ``scripts/test-redis`` (so running this file alone works); without either the
Redis cases are skipped. The restart test always starts its own server (it stops and starts it).
Every test uses its own key/channel prefix, so tests sharing a server never see each other's data.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clawlet.controlplane.broker import (
    Broker,
    BrokerUnavailable,
    LocalBroker,
    LocalHub,
    PresenceBroker,
    Subscription,
    broker_from_url,
    check_redis_url,
)
from clawlet.controlplane.redis_broker import RedisBroker
from tests.support.redis import (
    HAVE_REDIS_SERVER,
    NO_REDIS_SERVER,
    ROOT,
    SHARED_REDIS_URL,
    SKIP_REASON,
    RedisServer,
    requires_redis_server,
)

DEADLINE = 30.0
"""Seconds any awaited condition may take (generous: the suite runs on a loaded machine)."""


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shared server's URL, else a server started for this module."""
    if SHARED_REDIS_URL:
        yield SHARED_REDIS_URL
        return
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own (it may stop and restart it)."""
    if not HAVE_REDIS_SERVER:
        pytest.skip(NO_REDIS_SERVER)
    server = RedisServer(tmp_path / "redis")
    try:
        server.start()
        yield server
    finally:
        server.stop()


MakeBroker = Callable[..., Awaitable[PresenceBroker]]


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.slow)])  # Redis: slow
async def make_broker(request: pytest.FixtureRequest) -> AsyncIterator[MakeBroker]:
    """Starts brokers that see each other (one LocalHub, or one Redis server and prefix); all are
    closed afterwards."""
    made: list[PresenceBroker] = []
    hub = LocalHub()
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    async def make(*, instance_id: str | None = None, presence_ttl: float = 15.0) -> PresenceBroker:
        broker: PresenceBroker
        if url:
            broker = RedisBroker(url, instance_id=instance_id, presence_ttl=presence_ttl, prefix=prefix)
        else:
            broker = LocalBroker(instance_id=instance_id, presence_ttl=presence_ttl, hub=hub)
        await broker.start()
        made.append(broker)
        return broker

    yield make
    for broker in made:
        await broker.aclose()


async def next_message(subscription: Subscription) -> dict[str, Any]:
    return await asyncio.wait_for(anext(subscription), DEADLINE)


async def eventually(condition: Callable[[], Awaitable[bool]], what: str, deadline: float = DEADLINE) -> None:
    """Wait until ``condition()`` holds, checking every 50 ms, or fail after ``deadline`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not await condition():
        if loop.time() > end:
            pytest.fail(f"not within {deadline:g} s: {what}")
        await asyncio.sleep(0.05)


# -- the contract, on both implementations -------------------------------------------------------------


async def test_messages_arrive_in_order_as_the_json_objects_published(make_broker: MakeBroker) -> None:
    a, b = await make_broker(), await make_broker()
    sent = [
        {
            "n": n,
            "text": "你好，世界：第" + str(n) + "条",
            "nested": {"list": [1, 2.5, None, True]},
            "empty": "",
        }
        for n in range(200)
    ]
    async with b.subscribe("replies") as subscription:
        for message in sent:
            assert await a.publish("replies", message) == 1  # one broker listens
        received = [await next_message(subscription) for _ in sent]
    assert received == sent
    with pytest.raises(TypeError):
        await a.publish("replies", ["not", "an", "object"])  # type: ignore[arg-type]


async def test_a_publish_after_subscribe_returns_is_received(make_broker: MakeBroker) -> None:
    a, b = await make_broker(), await make_broker()
    for n in range(30):  # fresh channels: each one's first subscription goes to the server
        async with b.subscribe(f"request-{n}") as subscription:
            await a.publish(f"request-{n}", {"n": n})
            assert await next_message(subscription) == {"n": n}
    assert await a.publish("nobody-listens", {"lost": True}) == 0
    async with b.subscribe("nobody-listens") as late:
        await a.publish("nobody-listens", {"lost": False})
        assert await next_message(late) == {"lost": False}  # the earlier message is not replayed


async def test_every_subscriber_on_every_broker_gets_each_message(make_broker: MakeBroker) -> None:
    a, b = await make_broker(instance_id="instance-a"), await make_broker(instance_id="instance-b")
    async with a.subscribe("events") as on_a, b.subscribe("events") as on_b1, b.subscribe("events") as on_b2:
        assert await a.publish("events", {"kind": "TextDelta", "text": "hi"}) == 2  # two brokers
        for subscription in (on_a, on_b1, on_b2):
            assert await next_message(subscription) == {"kind": "TextDelta", "text": "hi"}
        async with b.subscribe("other") as other:
            await b.publish("other", {"only": "other"})
            await b.publish("events", {"second": 2})
            assert await next_message(other) == {"only": "other"}
        for subscription in (on_a, on_b1, on_b2):
            assert await next_message(subscription) == {"second": 2}
    assert await a.publish("events", {"after": "exit"}) == 0


async def test_presence_claim_overwrite_and_release_only_if_held(make_broker: MakeBroker) -> None:
    a, b = await make_broker(instance_id="instance-a"), await make_broker(instance_id="instance-b")
    assert await a.holder("alice") is None
    await a.claim("alice")
    assert await b.holder("alice") == "instance-a"  # each sees the other's presence
    await b.claim("alice")  # alice's exec plane reconnected to b
    assert await a.holder("alice") == "instance-b"
    await a.release("alice")  # a's socket closed late: b's record stays
    assert await b.holder("alice") == "instance-b"
    await a.claim("bob")
    await b.claim("bob")
    await a.refresh_presence()  # a sees b holds bob now and forgets bob
    assert await a.holder("bob") == "instance-b"
    await b.release("bob")
    assert await a.holder("bob") is None
    await a.refresh_presence()  # ... so it does not write bob's record again
    assert await a.holder("bob") is None
    await b.release("alice")
    assert await a.holder("alice") is None


async def test_aclose_releases_what_the_instance_holds_and_ends_subscriptions(
    make_broker: MakeBroker,
) -> None:
    a, b = await make_broker(instance_id="instance-a"), await make_broker(instance_id="instance-b")
    await a.claim("alice")
    await a.claim("carol")
    await b.claim("bob")
    async with a.subscribe("x") as subscription:
        await a.aclose()
        with pytest.raises(StopAsyncIteration):
            await next_message(subscription)
    assert [await b.holder(user) for user in ("alice", "carol", "bob")] == [None, None, "instance-b"]


@pytest.mark.slow
async def test_refresh_keeps_a_record_alive_past_several_ttls(make_broker: MakeBroker) -> None:
    ttl = 1.5
    a = await make_broker(instance_id="instance-a", presence_ttl=ttl)
    observer = await make_broker()
    await a.claim("alice")
    loop = asyncio.get_running_loop()
    until = loop.time() + 3 * ttl

    async def three_ttls_held() -> bool:
        assert await observer.holder("alice") == "instance-a"
        return loop.time() > until

    await eventually(three_ttls_held, "three TTLs passed", deadline=DEADLINE + 3 * ttl)


async def test_a_record_nobody_refreshes_expires() -> None:
    now = [100.0]
    hub = LocalHub(clock=lambda: now[0])
    broker = LocalBroker(instance_id="gone", presence_ttl=15.0, hub=hub)  # never started: no refresher
    await broker.claim("alice")
    now[0] += 14.9
    assert await broker.holder("alice") == "gone"
    now[0] += 0.2
    assert await broker.holder("alice") is None
    await broker.refresh_presence()  # it still holds the socket: the record is written again
    assert await broker.holder("alice") == "gone"


class GatedRefresh(LocalBroker):
    """A LocalBroker whose refresh of a record waits for ``gate`` before or after it reaches the hub."""

    def __init__(self, *, gate_first: bool, **options: Any) -> None:
        super().__init__(**options)
        self.gate_first = gate_first
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def _refresh_presence(self, user_id: str) -> bool:
        if self.gate_first:
            self.waiting.set()
            await self.gate.wait()
        refreshed = await super()._refresh_presence(user_id)
        if not self.gate_first:
            self.waiting.set()
            await self.gate.wait()
        return refreshed


async def test_a_release_during_a_refresh_stays_released() -> None:
    broker = GatedRefresh(gate_first=True, instance_id="a")
    await broker.claim("alice")
    refresh = asyncio.create_task(broker.refresh_presence())
    await asyncio.wait_for(broker.waiting.wait(), DEADLINE)
    await broker.release("alice")  # the socket closed while the refresh was on its way
    broker.gate.set()
    await refresh  # it wrote the record again, and saw the release: removed again
    assert await broker.holder("alice") is None


async def test_a_claim_during_a_refresh_that_lost_the_record_is_kept() -> None:
    now = [100.0]
    hub = LocalHub(clock=lambda: now[0])
    a = GatedRefresh(gate_first=False, instance_id="a", hub=hub)
    b = LocalBroker(instance_id="b", hub=hub)
    await a.claim("bob")
    await b.claim("bob")
    refresh = asyncio.create_task(a.refresh_presence())  # finds b holds bob ...
    await asyncio.wait_for(a.waiting.wait(), DEADLINE)
    await a.claim("bob")  # ... while bob's exec plane came back to a
    a.gate.set()
    await refresh
    a.gate_first = True  # (the gate stays open)
    now[0] += 10
    await a.refresh_presence()  # a still refreshes bob's record
    now[0] += 10
    assert await b.holder("bob") == "a"


# -- Redis only --------------------------------------------------------------------------------------

HOLDER_PROCESS = textwrap.dedent(
    """
    import asyncio, os, sys
    from clawlet.controlplane.redis_broker import RedisBroker

    async def main() -> None:
        broker = RedisBroker(
            os.environ["REDIS_URL"], instance_id="doomed", presence_ttl=1.5, prefix=os.environ["PREFIX"]
        )
        await broker.start()
        await broker.claim("alice")
        print("claimed", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_presence_expires_after_the_holder_is_killed(redis_url: str, tmp_path: Path) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    env = {**os.environ, "REDIS_URL": redis_url, "PREFIX": prefix, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER_PROCESS],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    observer = RedisBroker(redis_url, prefix=prefix)
    try:
        await observer.start()
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 120)  # type: ignore[union-attr]
        assert line.strip() == "claimed", process.stderr.read() if process.stderr else ""
        loop = asyncio.get_running_loop()
        until = loop.time() + 3.0  # two TTLs: the process's refresher keeps the record

        async def held_two_ttls() -> bool:
            assert await observer.holder("alice") == "doomed"
            return loop.time() > until

        await eventually(held_two_ttls, "two TTLs passed", deadline=DEADLINE + 3)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=DEADLINE)

        async def expired() -> bool:
            return await observer.holder("alice") is None

        await eventually(expired, "the killed holder's record expired")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE)
        await observer.aclose()


@pytest.mark.slow
@requires_redis_server
async def test_pubsub_and_presence_work_again_after_redis_restarts(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clawlet.controlplane")
    password = own_redis.url.split(":")[2].split("@")[0]
    options: dict[str, Any] = {"presence_ttl": 1.0, "ping_interval": 0.5, "subscribe_timeout": DEADLINE}
    a = RedisBroker(own_redis.url, instance_id="instance-a", **options)
    b = RedisBroker(own_redis.url, instance_id="instance-b", **options)
    await a.start()
    await b.start()
    try:
        await a.claim("alice")
        async with b.subscribe("events") as subscription:
            await a.publish("events", {"before": True})
            assert await next_message(subscription) == {"before": True}

            own_redis.kill()
            with pytest.raises(BrokerUnavailable) as raised:
                await a.publish("events", {"lost": True})
            assert password not in str(raised.value)
            late_entered = asyncio.Event()

            async def subscribe_late() -> dict[str, Any]:
                async with b.subscribe("late") as late:
                    late_entered.set()
                    return await next_message(late)

            late_task = asyncio.create_task(subscribe_late())

            async def late_waiting() -> bool:
                return "late" in b._local

            await eventually(late_waiting, "the late subscription is waiting for the server")
            assert not late_entered.is_set()  # not subscribed while the server is down
            own_redis.restart()  # same port and password, no data: presence records are gone
            await asyncio.wait_for(late_entered.wait(), DEADLINE)
            await a.publish("late", {"late": "入"})  # right after __aenter__: received
            assert await asyncio.wait_for(late_task, DEADLINE) == {"late": "入"}

            async def delivered_again() -> bool:  # b's subscription is re-made on the new server
                try:
                    await a.publish("events", {"after": True})
                except BrokerUnavailable:
                    return False
                try:
                    return await asyncio.wait_for(anext(subscription), 0.2) == {"after": True}
                except TimeoutError:
                    return False

            await eventually(delivered_again, "a message published after the restart arrived")

        async def alice_back() -> bool:  # a's refresher writes the lost record again
            try:
                return await b.holder("alice") == "instance-a"
            except BrokerUnavailable:
                return False

        await eventually(alice_back, "alice's presence written again")
        async with a.subscribe("fresh") as fresh:
            await b.publish("fresh", {"new": "订阅"})
            assert await next_message(fresh) == {"new": "订阅"}
    finally:
        await a.aclose()
        await b.aclose()
    assert "lost Redis" in caplog.text and "reconnected" in caplog.text
    assert password not in caplog.text


# -- URLs, errors and configuration ------------------------------------------------------------------


def test_broker_from_url_picks_the_implementation() -> None:
    assert isinstance(broker_from_url(None), LocalBroker)
    assert isinstance(broker_from_url("  "), LocalBroker)
    broker = broker_from_url("redis://:pw@127.0.0.1:6379/0", instance_id="cp-1")
    assert isinstance(broker, RedisBroker)
    assert broker.instance_id == "cp-1"
    assert broker.url == "redis://:***@127.0.0.1:6379/0"
    assert len(LocalBroker().instance_id) == 32 and LocalBroker().instance_id != LocalBroker().instance_id
    _: Broker = broker  # both satisfy the protocol (mypy checks this line)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cr3t-pw@127.0.0.1:6379",
        "redis://:s3cr3t-pw@127.0.0.1:notaport/0",
        "redis://:s3cr3t-pw@/0",
        "redis://:s3cr3t-pw@127.0.0.1:6379/notadb",
    ],
)
def test_a_bad_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ValueError, match="CLAWLET_REDIS_URL") as raised:
        broker_from_url(url)
    assert "s3cr3t-pw" not in str(raised.value)


async def test_an_unreachable_server_fails_start_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.conftest import free_port

    broker = RedisBroker(f"redis://:s3cr3t-pw@127.0.0.1:{free_port()}/0")
    with pytest.raises(BrokerUnavailable, match="not started"):
        async with broker.subscribe("x"):
            pass
    with pytest.raises(BrokerUnavailable, match=r"Redis at redis://:\*\*\*@127\.0\.0\.1") as raised:
        await broker.start()
    assert "s3cr3t-pw" not in str(raised.value) and "s3cr3t-pw" not in caplog.text
    await broker.aclose()


@pytest.mark.slow
def test_serve_refuses_a_bad_redis_url_at_startup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clawlet.config import Settings
    from clawlet.controlplane.cli import build_config, serve

    monkeypatch.setenv("CLAWLET_REDIS_URL", "redis://127.0.0.1:6379/0")
    assert build_config(Settings(), tmp_path / "cp").redis_url == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("CLAWLET_REDIS_URL", "htp://admin:s3cr3t-pw@redis:6379")
    assert serve(Settings(), tmp_path / "cp", "127.0.0.1", 1, None) == 2
    err = capsys.readouterr().err
    assert "CLAWLET_REDIS_URL must start with redis://" in err and "s3cr3t-pw" not in err
    check_redis_url(None)

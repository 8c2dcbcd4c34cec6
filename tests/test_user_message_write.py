"""``UserMessageWrite``: a write on the loop runs at start or, when needed, once at the first need
(on the turn's loop); a worker thread's starts at once; a failed write is what waiting raises."""

from __future__ import annotations

import asyncio
import threading

import pytest

from clawlet.runtime.user_message import UserMessageWrite


def test_a_write_on_the_loop_when_needed_runs_once_at_the_first_need_never_from_another_thread() -> None:
    writers: list[str] = []

    def save() -> None:
        writers.append(threading.current_thread().name)

    async def scenario() -> str:
        write = UserMessageWrite(save, on_the_loop=True, when_needed=True).start()
        assert writers == [] and not write.done  # nothing yet: it waits to be needed
        await asyncio.to_thread(write.run_now)  # a request made on a worker thread: not there
        assert writers == [] and not write.done
        write.run_now()
        write.run_now()
        assert write.done and await write.wait()
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert writers == [loop_thread]


def test_a_write_on_the_loop_not_when_needed_is_done_at_start() -> None:
    writers: list[str] = []

    async def scenario() -> str:
        write = UserMessageWrite(lambda: writers.append(threading.current_thread().name), on_the_loop=True)
        assert write.start().done
        return threading.current_thread().name

    assert writers == [asyncio.run(scenario())]


def test_a_write_on_a_worker_thread_starts_at_once() -> None:
    started = threading.Event()
    writers: list[str] = []

    def save() -> None:
        writers.append(threading.current_thread().name)
        started.set()

    async def scenario() -> str:
        write = UserMessageWrite(save, on_the_loop=False).start()
        assert await asyncio.to_thread(started.wait, 60)  # without anyone waiting for it
        assert await write.wait()
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert len(writers) == 1 and writers[0] != loop_thread


@pytest.mark.parametrize(("on_the_loop", "when_needed"), [(True, True), (True, False), (False, False)])
def test_a_failed_write_is_what_waiting_for_it_raises(on_the_loop: bool, when_needed: bool) -> None:
    def save() -> None:
        raise OSError("disk full")

    async def scenario() -> None:
        write = UserMessageWrite(save, on_the_loop=on_the_loop, when_needed=when_needed).start()
        write.run_now()  # never raises
        assert await write.wait(raising=False) is False
        with pytest.raises(OSError, match="disk full"):
            await write.wait()

    asyncio.run(scenario())

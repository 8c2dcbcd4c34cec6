"""``UserMessageWrite``: a lone turn's write runs once, on the turn's loop, when first needed; a
worker thread's starts at once; a failed write is what waiting for it raises."""

from __future__ import annotations

import asyncio
import threading

import pytest

from clawlet.runtime.user_message import UserMessageWrite


def test_a_write_on_the_loop_runs_once_when_first_needed_and_never_from_another_thread() -> None:
    writers: list[str] = []

    def save() -> None:
        writers.append(threading.current_thread().name)

    async def scenario() -> str:
        write = UserMessageWrite(save, on_the_loop=True).start()
        assert writers == [] and not write.done  # nothing yet: it waits to be needed
        await asyncio.to_thread(write.run_now)  # a request made on a worker thread: not there
        assert writers == [] and not write.done
        write.run_now()
        write.run_now()
        assert write.done and await write.wait()
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert writers == [loop_thread]


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


@pytest.mark.parametrize("on_the_loop", [True, False])
def test_a_failed_write_is_what_waiting_for_it_raises(on_the_loop: bool) -> None:
    def save() -> None:
        raise OSError("disk full")

    async def scenario() -> None:
        write = UserMessageWrite(save, on_the_loop=on_the_loop).start()
        write.run_now()  # never raises
        assert await write.wait(raising=False) is False
        with pytest.raises(OSError, match="disk full"):
            await write.wait()

    asyncio.run(scenario())

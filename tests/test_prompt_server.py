"""clawlet.testing.prompt_server: the test servers' uvicorn loop notices ``should_exit`` between
its 0.1 s ticks, and still ticks as uvicorn does."""

from __future__ import annotations

import asyncio

import pytest
import uvicorn
from starlette.applications import Starlette

from clawlet.testing import prompt_server
from clawlet.testing.prompt_server import EXIT_CHECK_SECONDS, PromptServer


def test_the_loop_ends_at_the_first_look_after_should_exit_not_at_the_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = PromptServer(uvicorn.Config(Starlette()))
    ticks: list[int] = []
    slept: list[float] = []

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        return server.should_exit  # what uvicorn's on_tick answers, limits aside

    async def sleep(seconds: float) -> None:  # no time passes: the loop's looks are counted
        slept.append(seconds)
        if len(slept) == 13:  # in the second tick's interval
            server.should_exit = True

    server.on_tick = on_tick  # type: ignore[method-assign]
    monkeypatch.setattr(prompt_server.asyncio, "sleep", sleep)
    asyncio.run(server.main_loop())
    # uvicorn's own loop would have slept 0.1 s thirteen times, ticking fourteen
    assert slept == [EXIT_CHECK_SECONDS] * 13
    assert ticks == [0, 1, 2]

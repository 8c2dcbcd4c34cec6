"""A uvicorn server, for a background thread of a test or benchmark, that stops as soon as asked.

uvicorn's main loop looks at ``should_exit`` (set from another thread to stop it) once every 0.1 s,
so stopping waited 50 ms on average before the shutdown even began: for the hundreds of servers the
tests start and stop, that was a tenth of the fast set's time. :class:`PromptServer` runs the same
ticks (``on_tick``: the ``Date`` header, ``limit_max_requests``) at the same 0.1 s interval, and
looks at ``should_exit`` every 10 ms between them. What it serves, and how it shuts down (open
connections, the lifespan), is uvicorn's, unchanged.
"""

from __future__ import annotations

import asyncio

import uvicorn

#: Seconds between two looks at ``should_exit`` (uvicorn's tick stays 0.1 s).
EXIT_CHECK_SECONDS = 0.01


class PromptServer(uvicorn.Server):
    """:class:`uvicorn.Server` whose main loop notices ``should_exit`` within 10 ms."""

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000  # as uvicorn counts its ticks
            for _ in range(round(0.1 / EXIT_CHECK_SECONDS)):
                if self.should_exit:
                    break
                await asyncio.sleep(EXIT_CHECK_SECONDS)

"""Each test gets the model's HTTP client afresh (tests/conftest.py ``fresh_model_clients``).

LangChain keeps one client per base URL for the process; a test's scripted upstream may get the
port an earlier test's had, and that earlier client's connections belong to a closed event loop.
"""

from __future__ import annotations

import asyncio

from clawlet.config import Settings
from clawlet.llm.providers import build_chat_model
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import forget_process_wide_model_clients


def answer(base_url: str) -> str:
    """One streamed answer in a loop of its own, as one test's server has."""
    settings = Settings(provider="openai", llm_base_url=base_url, llm_model="m", llm_api_key="k")

    async def turn() -> str:
        return "".join([chunk.text async for chunk in build_chat_model(settings).astream("hello")])

    return asyncio.run(turn())


def test_an_upstream_on_a_port_an_earlier_test_had() -> None:
    """Without the ``forget_process_wide_model_clients()`` call (what the autouse fixture does after
    each test) the second answer fails: "RuntimeError: Event loop is closed" (langchain-openai 1.7)."""
    with ScriptedOpenAIServer(lambda body: text_turn("first")) as earlier:
        port = earlier.port
        assert answer(earlier.base_url) == "first"
    forget_process_wide_model_clients()
    with ScriptedOpenAIServer(lambda body: text_turn("second"), port=port) as later:
        assert answer(later.base_url) == "second"

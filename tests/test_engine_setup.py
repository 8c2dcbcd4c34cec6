"""What a turn does before its model call is done once, not per request: the tools are built once
per engine, and LangSmith's per-middleware span bookkeeping stays on the event loop (no thread
hop) while tracing is off."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path
from typing import Any

import langsmith
import pytest
from langchain_core.tools import BaseTool
from langsmith import _runtime_overrides as overrides
from langsmith._internal import _aiter

from clawlet.config import Settings
from clawlet.engine import agent as agent_module
from clawlet.engine import tracing
from clawlet.engine.context import DEFAULT_CONTEXT
from clawlet.events import TextDelta
from clawlet.memory.stores import KnowledgeBase
from clawlet.services import build_services
from clawlet.testing.function_model import FunctionModel
from tests.test_prompt_cache import settle


async def test_tools_are_built_once_for_many_turns(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[int] = []
    real = agent_module.build_tools

    def counting(*args: Any, **kwargs: Any) -> list[BaseTool]:
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(agent_module, "build_tools", counting)
    model = FunctionModel(lambda messages, info: "ok")
    engine = build_services(settings, model=model).engine
    for n in range(3):
        assert [event async for event in engine.stream(f"hello {n}", [])] == [TextDelta("ok")]
    assert "terminal" in await engine.available_tool_names()
    assert len(model.calls) == 3 and len(builds) == 1


async def test_tools_are_built_again_when_the_mcp_tools_change(settings: Settings) -> None:
    engine = build_services(settings).engine
    first = engine.tools()
    assert engine.tools() is first
    assert engine.find_tool("terminal") is next(tool for tool in first if tool.name == "terminal")
    engine._mcp_fingerprint = "something else"  # as if mcp.json changed
    await engine.prepare()
    assert engine.tools() is not first
    assert [tool.name for tool in engine.tools()] == [tool.name for tool in first]


def test_span_bookkeeping_stays_on_the_loop_while_tracing_is_off(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_services(settings)  # the engine installs the hook
    hops: list[str] = []
    real = _aiter._default_aio_to_thread

    async def counting(*args: Any, **kwargs: Any) -> Any:
        hops.append(threading.current_thread().name)
        return await real(*args, **kwargs)

    monkeypatch.setattr(_aiter, "_default_aio_to_thread", counting)
    services = build_services(settings)

    async def turn() -> str:
        run = await services.sessions.start_turn("traced", "hello", title=False)
        await run.wait()
        return run.answer.text

    assert asyncio.run(turn())
    assert hops == []


async def test_with_tracing_on_the_bookkeeping_goes_to_a_thread() -> None:
    calls: list[str] = []

    async def default(ctx: contextvars.Context, func: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("thread")
        return ctx.run(func, *args, **kwargs)

    def work() -> str:
        return threading.current_thread().name

    here = threading.current_thread().name
    assert await tracing.inline_when_untraced(default, contextvars.copy_context(), work) == here
    assert calls == []
    with langsmith.tracing_context(enabled=True):
        await tracing.inline_when_untraced(default, contextvars.copy_context(), work)
    assert calls == ["thread"]


def test_an_override_installed_by_someone_else_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    async def theirs(default: Any, ctx: contextvars.Context, func: Any, *args: Any, **kwargs: Any) -> Any:
        return await default(ctx, func, *args, **kwargs)

    monkeypatch.setattr(overrides, "_runtime_overrides", overrides.RuntimeOverrides(aio_to_thread=theirs))
    tracing.install()
    assert overrides.get_runtime_overrides().aio_to_thread is theirs


def test_the_tool_list_matches_the_registry(settings: Settings) -> None:
    engine = build_services(settings).engine
    expected = agent_module.build_tools(settings, KnowledgeBase(settings.paths, None), engine.runtime_config)
    assert engine.tool_names() == [tool.name for tool in expected]


async def test_nothing_resolves_the_home_again_before_a_model_call(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settings.paths`` resolves the home (a syscall per path component) on every use: the engine
    resolves it once."""
    engine = build_services(settings).engine
    engine.system_prompt()
    settle(settings.paths.root)  # files written long ago are not read again (tests/test_prompt_cache.py)
    engine.system_prompt()
    await engine.resolve_context(DEFAULT_CONTEXT)
    resolved: list[Path] = []
    real = Path.resolve

    def counting(self: Path, strict: bool = False) -> Path:
        resolved.append(self)
        return real(self, strict)

    monkeypatch.setattr(Path, "resolve", counting)
    await engine.resolve_context(DEFAULT_CONTEXT)
    engine.system_prompt()
    assert resolved == []

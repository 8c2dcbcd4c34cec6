"""clawlet's programs run on uvloop when it is installed, on asyncio's loop when
``CLAWLET_EVENT_LOOP=asyncio`` says so, and a wrong value is a clear error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop

from clawlet import aio
from clawlet.cli import main


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(aio.ENV_EVENT_LOOP, raising=False)
    assert isinstance(aio.run(running_loop()), uvloop.Loop)
    assert aio.uvicorn_loop() == "uvloop"


@pytest.mark.parametrize("value", ["asyncio", " AsyncIO "])
def test_asyncio_when_asked(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(aio.ENV_EVENT_LOOP, value)
    loop = aio.run(running_loop())
    assert not isinstance(loop, uvloop.Loop) and isinstance(loop, asyncio.BaseEventLoop)
    assert aio.uvicorn_loop() == "asyncio"


def test_a_wrong_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(aio.ENV_EVENT_LOOP, "trio")
    with pytest.raises(ValueError, match="CLAWLET_EVENT_LOOP must be auto, uvloop or asyncio"):
        aio.run(running_loop())


def test_the_result_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(aio.ENV_EVENT_LOOP, "uvloop")

    async def answer() -> str:
        await asyncio.sleep(0)
        return "42"

    assert aio.run(answer()) == "42"


def test_the_cli_refuses_a_wrong_value_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(aio.ENV_EVENT_LOOP, "trio")
    assert main(["--home", str(tmp_path), "serve"]) == 2
    assert "error: CLAWLET_EVENT_LOOP must be auto, uvloop or asyncio, not 'trio'" in capsys.readouterr().err

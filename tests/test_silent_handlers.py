"""A best-effort step that fails is logged with its traceback, never swallowed silently
(:func:`clawlet.logs.swallowed`): the inbox executor's shutdown, the gateway connection's sending and
closing, and the exec plane's session runtime made ahead of the first turn."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import clawlet.inbox.executor as executor_module
from clawlet.config import Settings
from clawlet.execplane.client import ControlPlaneClient
from clawlet.execplane.daemon import ExecPlane, SessionRuntime
from clawlet.gateway import operator
from clawlet.gateway.server import Connection
from clawlet.inbox.backends import Outcome
from clawlet.inbox.broadcaster import EventBroadcaster
from clawlet.inbox.db import create_db_engine, migrate
from clawlet.inbox.executor import TaskExecutor
from clawlet.inbox.ids import new_ulid
from clawlet.inbox.models import Message, Task
from clawlet.inbox.repository import InboxRepository
from clawlet.logs import swallowed
from clawlet.runtime.base import RunConfig


async def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if text in record.getMessage()]


def test_swallowed_logs_the_failure_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("clawlet.test")
    with caplog.at_level(logging.DEBUG), swallowed(log, "step %s failed", "one", level=logging.INFO):
        raise ValueError("broken")
    (record,) = logged(caplog, "step one failed")
    assert record.levelno == logging.INFO and record.exc_info is not None
    assert record.exc_info[0] is ValueError
    with pytest.raises(asyncio.CancelledError), swallowed(log, "not this"):
        raise asyncio.CancelledError  # only Exception is swallowed, as contextlib.suppress(Exception)


class StuckBackend:
    """An inbox backend whose run never ends and whose ``abort`` fails."""

    name = "stuck"

    async def run(self, task: Task, content: str, message_id: str, on_text: Any) -> Outcome:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def abort(self, task: Task) -> None:
        raise RuntimeError("the backend is gone")

    def waiting_for(self, task: Task) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


async def test_the_inbox_logs_what_fails_while_it_shuts_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'inbox.db'}")
    migrate(engine)
    repository = InboxRepository(engine)
    task = Task(new_ulid(), "main", "t", False, "pending", 1000, 1000, None)
    message = Message(new_ulid(), task.id, "user", "hello", 1000)
    repository.create_task(task, message)
    executor = TaskExecutor(repository, EventBroadcaster(), StuckBackend())  # type: ignore[arg-type]
    executor.start(task.id, "hello", message.id, from_pending=True)
    await until(lambda: getattr(repository.get_task(task.id), "status", "") == "running", "the run")

    async def cannot_finish(*args: Any) -> None:
        raise RuntimeError("the database is gone")

    monkeypatch.setattr(executor, "_finish", cannot_finish)
    monkeypatch.setattr(executor_module, "SHUTDOWN_GRACE", 0.05)  # the stuck run is then cancelled
    with caplog.at_level(logging.WARNING, logger="clawlet.inbox.executor"):
        await executor.shutdown()
    (abort,) = logged(caplog, f"inbox task {task.id}: the stuck backend could not abort it")
    (finish,) = logged(caplog, f"inbox task {task.id}: could not mark it stopped")
    assert abort.exc_info is not None and "the backend is gone" in str(abort.exc_info[1])
    assert finish.exc_info is not None and "the database is gone" in str(finish.exc_info[1])
    engine.dispose()


class BrokenTransport:
    """A WebSocket whose peer vanished: every send and the close fail."""

    async def send_text(self, text: str) -> None:
        raise ConnectionResetError("peer gone")

    async def receive_text(self) -> str | None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        raise ConnectionResetError("already closed")


async def test_the_gateway_logs_a_failed_send_and_close(caplog: pytest.LogCaptureFixture) -> None:
    conn = Connection(BrokenTransport(), "test", 1 << 20, operator.StabilityLog())
    with caplog.at_level(logging.DEBUG, logger="clawlet.gateway.server"):
        conn.start()
        assert conn.send({"type": "event", "event": "tick", "payload": {}})
        await until(lambda: conn.closing, "the connection to close after the failed send")
        conn.abort(1011, "gone")
        await until(lambda: bool(logged(caplog, "closing the connection failed")), "the close")
        await conn.finish()
    (sent,) = logged(caplog, "gateway: sending failed")
    (closed,) = logged(caplog, "gateway: closing the connection failed (gone)")
    assert sent.exc_info is not None and "peer gone" in str(sent.exc_info[1])
    assert closed.exc_info is not None and "already closed" in str(closed.exc_info[1])


async def test_the_exec_plane_logs_a_runtime_it_could_not_make_ahead_of_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = ControlPlaneClient("ws://127.0.0.1:9/ws/vm", "u1", "token", None, state_dir=tmp_path / "cp")
    plane = ExecPlane(client, tmp_path / "state", Settings())
    adapter = SessionRuntime(plane, "", engine=None)  # type: ignore[arg-type]  # refused before it is used
    with caplog.at_level(logging.DEBUG, logger="clawlet.execplane.daemon"):
        await adapter.start("s1", RunConfig(runtime_type="no-such-runtime"))
    (record,) = logged(caplog, "session s1: its runtime could not be made yet")
    assert record.exc_info is not None and "unknown runtime_type 'no-such-runtime'" in str(record.exc_info[1])

"""Shared fixtures: every test gets its own clawlet home, clean provider settings, no network.

Network access is blocked by pytest-socket (see ``addopts`` in pyproject.toml); only loopback is
allowed, so an accidental call to a real LLM provider fails the test run. Before that, the provider
factory refuses to build a chat model for an endpoint off loopback (``CLAWLET_LOOPBACK_MODELS_ONLY``,
set for every test and inherited by the processes tests start): tests use an in-process model
(``clawlet.testing.function_model``) or the scripted server (``clawlet.testing.scripted_openai``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from clawlet.api.app import create_app
from clawlet.config import Settings
from clawlet.home import init_home
from clawlet.serving import uvicorn_options
from clawlet.testing.prompt_server import PromptServer
from tests.support.ast_parse_lock import serialise_ast_parse
from tests.support.gateway_schema import ProtocolSchema, SchemaUnavailable, load_protocol_schema
from tests.support.slow_programs import STARTED, check_slow_programs, note_slow_programs

#: httpx's module-level helpers (``httpx.get``, ``httpx.post``, ...) give up after 5 s by default,
#: and the tests call them ~230 times against live servers in this process, which on a machine at
#: load 10 may take longer to answer one request. clawlet's own code never calls them (it passes
#: its own timeouts to its clients), so here they get a generous default instead. Each call also
#: builds a client, and with it a TLS context loading every CA certificate (~15% of the fast set's
#: time in the main thread, for requests to http://127.0.0.1): they share one, built the same way.
TEST_HTTP_TIMEOUT = 60.0
TEST_TLS_CONTEXT = httpx.create_ssl_context()
for _helper in ("get", "post", "put", "patch", "delete", "head", "options", "request", "stream"):
    _function = getattr(httpx, _helper)
    _defaults = getattr(_function, "__wrapped__", _function).__kwdefaults__
    _defaults.update(timeout=TEST_HTTP_TIMEOUT, verify=TEST_TLS_CONTEXT)

serialise_ast_parse()  # threads may render tracebacks while pytest renders one (CPython gh-106905)
note_slow_programs()  # a test that starts `clawlet serve`, a browser, Redis... must be marked slow


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    STARTED.clear()  # what the previous test started is not this one's
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    result = yield  # the fixtures torn down first
    check_slow_programs(item)
    return result


PROVIDER_ENV = (
    "DEEPSEEK_API_KEY",
    "DEEPSEEK_BASE_URL",
    "DEEPSEEK_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "EMBEDDING_MODEL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_MODEL",
    "DATABASE_URL",
    "OPENCLAW_GATEWAY_URL",
    "OPENCLAW_GATEWAY_TOKEN",
    "OPENCLAW_GATEWAY_TIMEOUT",
    "OPENCLAW_STATE_DIR",
    "API_KEY",
    "API_KEYS",
)


@pytest.fixture(autouse=True)
def clawlet_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point CLAWLET_HOME at a fresh temp dir and drop any provider settings from the environment."""
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWLET_HOME", str(home))
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    import os

    for name in list(os.environ):
        if name.startswith("CLAWLET_") and name != "CLAWLET_HOME":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLAWLET_LOOPBACK_MODELS_ONLY", "1")  # no test reaches a real provider
    monkeypatch.chdir(tmp_path)  # so no stray .env from the repository is read
    # openclaw.json (the inbox's agent list) never comes from the real ~/.openclaw
    monkeypatch.setenv("OPENCLAW_CONFIG_PATH", str(tmp_path / "openclaw" / "openclaw.json"))
    return home


@pytest.fixture
def settings(clawlet_home: Path) -> Settings:
    s = Settings()
    init_home(s.paths)
    return s


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """A real uvicorn server on loopback, running the clawlet app in a background thread."""

    def __init__(self, settings: Settings, *, demo_token_delay: float = 0.0, port: int | None = None) -> None:
        self.settings = settings
        self.port = port or free_port()
        self.app = create_app(settings, demo_token_delay=demo_token_delay)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            timeout_graceful_shutdown=3,
            **uvicorn_options(),  # what `clawlet serve` runs with
        )
        self.server = PromptServer(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 120  # generous: the suite must pass on a loaded machine
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)


@pytest.fixture
def live_server(settings: Settings) -> Iterator[Callable[..., LiveServer]]:
    """Factory: ``live_server()`` starts the app for ``settings`` (or given settings)."""
    started: list[LiveServer] = []

    def start(
        custom: Settings | None = None, *, demo_token_delay: float = 0.0, port: int | None = None
    ) -> LiveServer:
        server = LiveServer(custom or settings, demo_token_delay=demo_token_delay, port=port).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(live_server: Callable[..., LiveServer]) -> LiveServer:
    return live_server()


def parse_sse(text: str) -> list[tuple[str, dict[str, object]]]:
    """Parse an SSE body into (event, data) pairs, skipping comments."""
    import json

    events = []
    for block in text.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:].strip())
        if name and data is not None:
            events.append((name, data))
    return events


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Check an error answer's status and ``error.code``; the error object."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def lines_of(path: Path) -> list[str]:
    """The file's lines ([] if it does not exist): a side effect counted."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def run_async(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def host_processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes, as this host's ``/proc`` shows them, whose command line contains
    ``marker``: how tests see what a sandboxed tool left running (its own PIDs are namespaced)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (entry / "cmdline").read_bytes():
                continue
            if "State:\tZ" in (entry / "status").read_text():
                continue
        except OSError:  # it ended while being looked at
            continue
        found.append(int(entry.name))
    return found


def parent_pid(pid: int) -> int | None:
    """The parent of host process ``pid`` (``None`` once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture(scope="session")
def schema() -> ProtocolSchema:
    """The OpenClaw gateway protocol's JSON Schema (the test skips when it cannot be installed)."""
    try:
        return load_protocol_schema()
    except SchemaUnavailable as exc:
        pytest.skip(f"the gateway protocol schema is unavailable (npm / registry): {exc}")


SERVE_DEADLINE = 120.0
"""Seconds a ``clawlet serve`` subprocess may take to start or stop (generous: loaded machines)."""


class ServeProcess:
    """A real ``clawlet serve`` subprocess on a free loopback port, its output in a log file."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.log = home.parent / f"serve-{self.port}.log"
        env = {**os.environ, "CLAWLET_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.handle = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clawlet", "serve", "--port", str(self.port)],
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + SERVE_DEADLINE
        while True:
            try:
                if httpx.get(f"{self.url}/api/status", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"clawlet serve did not start:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(SERVE_DEADLINE)
        self.handle.close()


@pytest.fixture
def serve(clawlet_home: Path) -> Iterator[list[ServeProcess]]:
    """The ``clawlet serve`` processes a test starts (append them); killed at the end."""
    started: list[ServeProcess] = []
    yield started
    for proc in started:
        proc.close()


#: LangChain's provider packages keep one HTTP client per base URL for the whole process
#: (``functools.lru_cache``), its pooled connections bound to the event loop that first used them.
#: ``clawlet serve`` runs one loop for its life, but the tests run a loop per server or scenario
#: in one process: a later test whose scripted upstream got a port an earlier one had would be
#: handed the earlier, closed loop's client ("RuntimeError: Event loop is closed" when its pool
#: closed an idle connection). Each test starts with no such client, as a new process would.
PROCESS_WIDE_CLIENT_CACHES = {
    "langchain_openai.chat_models._client_utils": ("_cached_async_httpx_client", "_cached_sync_httpx_client"),
    "langchain_anthropic._client_utils": ("_get_default_httpx_client", "_get_default_async_httpx_client"),
}


def forget_process_wide_model_clients() -> None:
    """Drop the clients of :data:`PROCESS_WIDE_CLIENT_CACHES` (of the packages imported so far),
    and collect them now: the openai SDK's client, collected later while another test's loop runs,
    closes itself from ``__del__`` with a task on that loop ("Task exception was never retrieved
    ... Event loop is closed", logged into that test)."""
    dropped = 0
    for module_name, names in PROCESS_WIDE_CLIENT_CACHES.items():
        module = sys.modules.get(module_name)
        for name in names:
            cached = getattr(module, name, None)
            if cached is not None and hasattr(cached, "cache_clear"):
                dropped += cached.cache_info().currsize
                cached.cache_clear()
    if dropped:
        gc.collect()


@pytest.fixture(autouse=True)
def fresh_model_clients() -> Iterator[None]:
    yield
    forget_process_wide_model_clients()


@pytest.fixture(autouse=True)
def restore_root_logging() -> Iterator[None]:
    """Put the root logger back after each test: code under test that calls ``configure_logging``
    points it at the ``sys.stderr`` pytest captures and closes, and server threads still running
    would then log to a closed file."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

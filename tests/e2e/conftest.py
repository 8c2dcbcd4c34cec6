"""Fixtures for the browser tests: a real ``clawlet serve`` per module and a Chromium page per test.

The tests need the built UI (``src/clawlet/web/index.html``, made by ``scripts/setup``) and
``/usr/bin/chromium`` (``scripts/test`` installs it when running as root); without either they are
skipped with a message saying so. Everything talks to 127.0.0.1 only. Screenshots go to
``$CLAWLET_E2E_ARTIFACTS`` (default ``test-output/screenshots``, git-ignored).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.conftest import PROVIDER_ENV

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
UI_INDEX = REPO / "src" / "clawlet" / "web" / "index.html"
DEADLINE_MS = 60_000
"""How long a browser action or an ``expect`` waits (Playwright's own defaults, 30 s for actions
and 5 s for ``expect``, are too short for a loaded machine)."""
expect.set_options(timeout=DEADLINE_MS)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.exists():
        return (
            "e2e: /usr/bin/chromium is missing; install it with `apt-get install -y chromium` "
            "(scripts/test does this when run as root)"
        )
    if not UI_INDEX.exists():
        return "e2e: the web UI is not built; run ./scripts/setup"
    return None


def artifacts_dir() -> Path:
    directory = Path(os.environ.get("CLAWLET_E2E_ARTIFACTS") or REPO / "test-output" / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    home: Path
    process: subprocess.Popen[bytes]
    #: the bearer token ``api`` sends (a server started with ``CLAWLET_API_TOKEN``)
    token: str | None = None

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.token:
            kwargs["headers"] = {"Authorization": f"Bearer {self.token}", **(kwargs.get("headers") or {})}
        return httpx.request(method, f"{self.url}{path}", timeout=30, **kwargs)


def start_serve(base: Path, port: int, env_extra: dict[str, str] | None = None) -> Server:
    """``clawlet serve`` on 127.0.0.1:``port`` with its home in ``base``, the demo model and no
    ``CLAWLET_*`` setting of the machine's but ``env_extra``; returns once ``/health/ready`` answers.
    Its output is appended to ``base/server.log``."""
    home = base / "home"
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_ENV and not k.startswith("CLAWLET_")}
    env.update({"CLAWLET_HOME": str(home), "CLAWLET_PROVIDER": "demo"})
    # the inbox's agents: an openclaw.json of the test's own, never the machine's ~/.openclaw
    env["OPENCLAW_CONFIG_PATH"] = str(base / "openclaw" / "openclaw.json")
    env.pop("OPENCLAW_STATE_DIR", None)
    env.update(env_extra or {})
    clawlet = Path(sys.executable).with_name("clawlet")
    with (base / "server.log").open("ab") as log:
        command = [str(clawlet), "serve", "--port", str(port)]
        process = subprocess.Popen(command, cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health/ready", timeout=10).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"clawlet serve did not start: {(base / 'server.log').read_text()}")
        time.sleep(0.1)
    return Server(url=url, home=home, process=process, token=(env_extra or {}).get("CLAWLET_API_TOKEN"))


def stop_serve(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    running = start_serve(tmp_path_factory.mktemp("e2e"), free_port())
    try:
        yield running
    finally:
        stop_serve(running)


TOKEN = "e2e-token-9f3k"


@dataclass
class TokenServer:
    """``clawlet serve`` with ``CLAWLET_API_TOKEN`` (the UIs then ask for it); ``restart`` starts it
    again on the same address, e.g. with another token."""

    base: Path
    port: int
    current: Server

    @property
    def url(self) -> str:
        return self.current.url

    @property
    def token(self) -> str:
        return self.current.token or ""

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.current.api(method, path, **kwargs)

    def restart(self, token: str) -> None:
        stop_serve(self.current)
        self.current = start_serve(self.base, self.port, {"CLAWLET_API_TOKEN": token})


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    base, port = tmp_path_factory.mktemp("e2e-token"), free_port()
    running = TokenServer(base, port, start_serve(base, port, {"CLAWLET_API_TOKEN": TOKEN}))
    try:
        yield running
    finally:
        stop_serve(running.current)


@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Playwright]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    browser = playwright_instance.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@dataclass
class PageErrors:
    """Console errors and uncaught page errors seen during a test; ``allow`` lists expected ones."""

    messages: list[str] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)

    def unexpected(self) -> list[str]:
        return [m for m in self.messages if not any(a in m for a in self.allow)]


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def page(browser: Browser, server: Server, page_errors: PageErrors) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
    page = context.new_page()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            page_errors.messages.append(f"console: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: page_errors.messages.append(f"pageerror: {error}"))
    page.set_default_timeout(DEADLINE_MS)
    try:
        yield page
    finally:
        context.close()
    assert page_errors.unexpected() == [], "errors in the browser console"


def screenshot(page: Page, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


MOBILE = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 2,
}


@pytest.fixture
def new_mobile_page(
    browser: Browser, server: Server, page_errors: PageErrors
) -> Iterator[Callable[..., Page]]:
    """Make pages in fresh phone-sized (390×844, touch) contexts; options override the defaults
    (English, service workers blocked so ``page.route`` sees every request). Console errors fail
    the test, as with ``page``."""
    contexts: list[BrowserContext] = []

    def make(**options: Any) -> Page:
        context = browser.new_context(**{**MOBILE, "locale": "en-US", "service_workers": "block", **options})
        contexts.append(context)
        page = context.new_page()

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                page_errors.messages.append(f"console: {message.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: page_errors.messages.append(f"pageerror: {error}"))
        page.set_default_timeout(DEADLINE_MS)
        return page

    try:
        yield make
    finally:
        for context in contexts:
            context.close()
    assert page_errors.unexpected() == [], "errors in the browser console"


@pytest.fixture
def mobile_page(new_mobile_page: Callable[..., Page]) -> Page:
    return new_mobile_page()


def create_task(server: Server, content: str, agent_id: str = "main") -> dict[str, Any]:
    """Start an inbox task through the API."""
    response = server.api("POST", "/api/v1/tasks", json={"content": content, "agentId": agent_id})
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


def wait_status(server: Server, task_id: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
    """Poll the task until its status is one of ``statuses``."""
    deadline = time.monotonic() + timeout
    while True:
        task: dict[str, Any] = server.api("GET", f"/api/v1/tasks/{task_id}").json()
        if task["status"] in statuses:
            return task
        assert time.monotonic() < deadline, f"task {task_id} is {task['status']}, not {statuses}"
        time.sleep(0.1)

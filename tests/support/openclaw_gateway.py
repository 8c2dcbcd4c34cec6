"""Run a real OpenClaw gateway (the ``openclaw`` npm package) for the real-OpenClaw tests.

Nothing here downloads anything. ``scripts/test`` installs the pinned Node.js 24 and OpenClaw into a
cache outside the clone (``scripts/test-openclaw install``) and sets two environment variables,
which a developer can also set by hand (``docs/openclaw-interop.md``):

``CLAWLET_OPENCLAW_BIN``
    the OpenClaw CLI entry: ``…/node_modules/openclaw/openclaw.mjs``, the
    ``…/node_modules/.bin/openclaw`` symlink to it, or the ``…/node_modules/openclaw`` directory
    (default: ``openclaw`` on ``PATH``).
``CLAWLET_OPENCLAW_NODE``
    a Node.js binary ≥ 24.16 (OpenClaw's ``engines``); default: ``node`` on ``PATH``.

:func:`real_openclaw` checks them with the product's own probe
(:func:`clawlet.runtime.openclaw_bridge.probe_openclaw_install`) and gives every real-OpenClaw test
the same installation, skip reason and ``CLAWLET_OPENCLAW_REQUIRED`` rule (:class:`RealOpenClaw`).
:class:`OpenClawGateway` writes an isolated config (``HOME`` and ``OPENCLAW_STATE_DIR`` in a temp
dir, loopback only, token auth, no update checks, telemetry, mDNS or catalog refresh, one model
provider pointing at a local OpenAI-compatible server), starts ``openclaw gateway --port N``,
waits until an operator ``connect`` on that port succeeds, and always stops the process.
:meth:`OpenClawInstall.cli` runs other ``openclaw`` commands (e.g. ``gateway call``) as a client.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from clawlet.runtime.openclaw_bridge import probe_openclaw_install

REQUIRED_ENV = "CLAWLET_OPENCLAW_REQUIRED"
"""``1`` turns "not installed / unusable" from a skip into a failure (``scripts/test`` sets it once it
has installed OpenClaw, so a broken installation cannot pass as skipped)."""
INSTALL_HINT = "`scripts/test-openclaw install` installs the pinned Node 24 and OpenClaw (scripts/test does)"

#: The environment of every OpenClaw process is built from scratch; only these are passed through.
PASSED_ENV = ("LANG", "LC_ALL", "TZ", "TMPDIR")


@dataclass(frozen=True)
class OpenClawInstall:
    """A Node binary and the OpenClaw CLI entry it runs."""

    node: Path
    entry: Path
    node_version: str
    openclaw_version: str

    def base_env(self, home: Path) -> dict[str, str]:
        """A minimal environment isolating OpenClaw under ``home`` (nothing from the real ``~``)."""
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        env.update(
            {
                "PATH": f"{self.node.parent}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
                "HOME": str(home),
                "OPENCLAW_STATE_DIR": str(home / "state"),
                "OPENCLAW_CONFIG_PATH": str(home / "state" / "openclaw.json"),
                "NO_COLOR": "1",
                "FORCE_COLOR": "0",
                "CI": "1",
            }
        )
        return env

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]

    def cli(self, home: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``openclaw <args>`` isolated under ``home`` and wait for it."""
        (home / "state").mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            self.command(*args),
            env=self.base_env(home),
            cwd=home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def find_openclaw() -> tuple[OpenClawInstall | None, str]:
    """The configured OpenClaw installation, or ``None`` and why the real-OpenClaw tests must skip."""
    probe = probe_openclaw_install()
    if not probe.available or probe.node is None or probe.openclaw_entry is None:
        return None, f"{probe.reason}; {INSTALL_HINT}"
    command = [str(probe.node), str(probe.openclaw_entry), "--version"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot run openclaw --version with {probe.node}: {exc}"
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()[-500:] or f"exit {result.returncode}"
        return None, f"openclaw --version failed with {probe.node}: {output}"
    version = result.stdout.strip()
    return OpenClawInstall(probe.node, probe.openclaw_entry, probe.node_version or "", version), ""


@dataclass(frozen=True)
class RealOpenClaw:
    """What every real-OpenClaw test module reads at import (the autouse ``clawlet_home`` fixture
    later removes ``CLAWLET_*`` variables): the installation or why there is none."""

    install: OpenClawInstall | None
    reason: str
    required: bool

    @property
    def skip(self) -> pytest.MarkDecorator:
        """Skip with the reason when there is no installation, unless it is required."""
        missing = self.install is None and not self.required
        return pytest.mark.skipif(missing, reason=self.reason or "installed")

    def require(self) -> OpenClawInstall:
        """The installation; fails the test when it is required but missing."""
        if self.install is None:
            pytest.fail(f"{REQUIRED_ENV} is set but OpenClaw is unusable: {self.reason}")
        return self.install


@functools.cache
def real_openclaw() -> RealOpenClaw:
    """:func:`find_openclaw` once per test process, and whether ``CLAWLET_OPENCLAW_REQUIRED`` is set."""
    install, reason = find_openclaw()
    required = os.environ.get(REQUIRED_ENV, "").strip().lower() in ("1", "true", "yes")
    return RealOpenClaw(install, reason, required)


def openclaw_config(
    *, token: str, llm_base_url: str, model: str, log_file: Path, provider: str = "scripted"
) -> dict[str, Any]:
    """An isolated local-gateway config whose only model is ``provider/model`` at ``llm_base_url``."""
    return {
        "gateway": {"mode": "local", "bind": "loopback", "auth": {"mode": "token", "token": token}},
        "update": {"checkOnStart": False},
        "telemetry": {"enabled": False},
        "discovery": {"mdns": {"mode": "off"}},
        "logging": {"file": str(log_file)},
        "models": {
            "catalogRefresh": {"enabled": False},
            "providers": {
                provider: {
                    "baseUrl": llm_base_url,
                    "apiKey": "sk-scripted-not-a-secret",
                    "api": "openai-completions",
                    "models": [
                        {"id": model, "name": "Scripted model", "contextWindow": 32_000, "maxTokens": 4096}
                    ],
                }
            },
        },
        "agents": {"defaults": {"model": {"primary": f"{provider}/{model}"}}},
    }


@dataclass
class OpenClawGateway:
    """One ``openclaw gateway`` process under ``home``; use it as a context manager."""

    install: OpenClawInstall
    home: Path
    port: int
    token: str
    llm_base_url: str
    model: str = "scripted-model"
    process: subprocess.Popen[bytes] | None = None
    startup_seconds: float | None = None
    _stdout: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """OpenClaw serves the gateway protocol at the root path."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    @property
    def config_file(self) -> Path:
        return self.state_dir / "openclaw.json"

    @property
    def log_file(self) -> Path:
        return self.home / "openclaw-gateway.log"

    @property
    def console_file(self) -> Path:
        return self.home / "openclaw-gateway.console.log"

    def write_config(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = openclaw_config(
            token=self.token, llm_base_url=self.llm_base_url, model=self.model, log_file=self.log_file
        )
        self.config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def start(self, timeout: float = 90.0) -> OpenClawGateway:
        self.write_config()
        self._stdout = self.console_file.open("wb")
        started = time.monotonic()
        self.process = subprocess.Popen(
            self.install.command("gateway", "--port", str(self.port)),
            env=self.install.base_env(self.home),
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() can end all of it
        )
        try:
            self._wait_ready(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, deadline: float) -> None:
        """Until an operator ``connect`` with the token succeeds.

        OpenClaw answers WebSocket upgrades (and sends ``connect.challenge``) a second or two
        before it accepts ``connect``: meanwhile it refuses with ``UNAVAILABLE`` "gateway starting;
        retry shortly" (``retryable``, ``retryAfterMs: 500``, ``details.reason:
        "startup-sidecars"``).
        """
        last_error = "no attempt yet"
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"openclaw gateway exited with code {self.process.returncode} before accepting"
                    f" connections:\n{self.log_tail()}"
                )
            try:
                error = self._try_connect()
                if error is None:
                    return
                last_error = error
            except (OSError, TimeoutError, WebSocketException, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"openclaw gateway did not accept an operator connect on {self.url} in time"
                    f" (last error: {last_error}):\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def _try_connect(self) -> str | None:
        """One handshake; ``None`` when ``hello-ok`` came back, else what went wrong."""
        with connect(self.url, open_timeout=2, close_timeout=1) as ws:
            challenge = json.loads(ws.recv(timeout=5))
            if challenge.get("event") != "connect.challenge":
                return f"first frame was not connect.challenge: {challenge!r:.200}"
            params = {
                "minProtocol": 3,
                "maxProtocol": 4,
                "client": {"id": "gateway-client", "version": "0", "platform": "linux", "mode": "backend"},
                "role": "operator",
                "scopes": ["operator.read"],
                "auth": {"token": self.token},
            }
            ws.send(json.dumps({"type": "req", "id": "ready", "method": "connect", "params": params}))
            while True:
                frame = json.loads(ws.recv(timeout=10))
                if frame.get("type") == "res" and frame.get("id") == "ready":
                    if frame.get("ok"):
                        return None
                    return f"connect refused: {json.dumps(frame.get('error'))[:300]}"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (OpenClaw drains and exits in about a second), then SIGKILL the group."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(process.pid, signal.SIGKILL)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    process.wait(10)
            # helpers still in the gateway's process group (its own session) go with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None

    def kill(self) -> None:
        """SIGKILL the gateway's process group: no drain, runs cut short mid-turn (as in a crash)."""
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        """The end of the gateway's console output (the JSON log file has the same messages)."""
        if not self.console_file.is_file():
            return "(no OpenClaw output captured)"
        text = self.console_file.read_text(encoding="utf-8", errors="replace").splitlines()
        return f"--- {self.console_file} (last {lines} lines; JSON log: {self.log_file}) ---\n" + "\n".join(
            text[-lines:]
        )

    def __enter__(self) -> OpenClawGateway:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

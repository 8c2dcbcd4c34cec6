"""``clawlet cluster``: a whole cluster on this machine, for development — one command.

It starts ``clawlet control-plane serve`` and one ``clawlet exec-plane`` per user, each a separate
OS process (as on real machines), creating the users on first use and printing a fresh API token
for each. Ctrl+C (or SIGTERM) stops them all; if one of them exits, the others are stopped too and
the command fails, saying which one.

Layout of ``--data-dir`` (default ``<clawlet home>/cluster``)::

    control-plane/        the control plane's data directory (database, secret, users' homes)
    exec-planes/<user>/   each user's execution plane state (the user's "machine")
    logs/<name>.log       each process's output
    tokens.json           the API tokens printed at start (mode 0600)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from clawlet.config import Settings
from clawlet.secret_env import ENVIRON_WITH_SECRETS
from clawlet.storage import atomic_write_text

DEFAULT_USERS: Final = "alice,bob"
READY_TIMEOUT: Final = 60.0


class ClusterFailed(Exception):
    """A process of the cluster did not start or exited."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cluster",
        help="run a local cluster for development: a control plane and one exec plane per user",
    )
    parser.add_argument(
        "--users", default=DEFAULT_USERS, help=f"comma-separated user ids (default {DEFAULT_USERS})"
    )
    parser.add_argument("--port", type=int, default=None, help="the control plane's port (default 8100)")
    parser.add_argument("--data-dir", default=None, help="where everything lives (default <home>/cluster)")


class LocalCluster:
    """The processes of a local cluster (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        users: list[str],
        port: int,
        *,
        base_env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        """``base_env``: the processes' environment (default: this process's, with the secrets it
        holds in memory: each process moves them out of its own environment again); ``workdir``:
        their working directory (default: this process's); ``settings``: what this process reads the
        control plane's database with (default: this process's environment)."""
        self.data_dir = data_dir
        self.settings = settings if settings is not None else Settings()
        self.base_env = dict(ENVIRON_WITH_SECRETS if base_env is None else base_env)
        self.workdir = workdir
        self.users = users
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.tokens: dict[str, str] = {}

    @property
    def cp_dir(self) -> Path:
        return self.data_dir / "control-plane"

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{name}.log").open("ab") as log_file:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "clawlet", *args],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**self.base_env, **(env or {})},
            )

    def prepare_users(self) -> None:
        """Create missing users and give each a fresh API token."""
        from clawlet.controlplane.cli import build_config
        from clawlet.controlplane.server import ControlPlane

        plane = ControlPlane(build_config(self.settings, self.cp_dir, self.base_url))
        try:
            for user in self.users:
                if plane.get_user(user) is None:
                    plane.create_user(user, user, {})
                self.tokens[user] = plane.issue_user_token(user, "clawlet cluster")
        finally:
            plane.close()
        path = self.data_dir / "tokens.json"
        atomic_write_text(path, json.dumps(self.tokens, indent=2) + "\n")
        path.chmod(0o600)

    def start(self) -> None:
        """Everything: users, the control plane, one execution plane per user, all connected."""
        self.prepare_users()
        self.start_control_plane()
        for user in self.users:
            self.start_exec_plane(user)
        self.wait_connected(len(self.users))

    def start_control_plane(self) -> None:
        """Start (or restart) the control plane and wait until it answers."""
        self._spawn(
            "control-plane",
            ["control-plane", "--data-dir", str(self.cp_dir), "serve", "--port", str(self.port)],
        )
        self._wait(lambda health: True, "the control plane to answer")

    def vm_credentials(self, user: str, *, ticket_ttl: float | None = None) -> dict[str, str]:
        """A fresh ticket and VM token for ``user``'s execution plane, as its environment.
        ``ticket_ttl``: the ticket's lifetime in seconds (default the control plane's 30 s; its
        expiry is stored with it, so the running control plane honours a shorter one — for tests)."""
        from clawlet.controlplane.cli import build_config
        from clawlet.controlplane.server import ControlPlane

        config = build_config(self.settings, self.cp_dir, self.base_url)
        if ticket_ttl is not None:
            config = dataclasses.replace(config, ticket_ttl=ticket_ttl)
        plane = ControlPlane(config)
        try:
            return plane.issue_vm_credentials(user).env()
        finally:
            plane.close()

    def start_exec_plane(self, user: str, env: dict[str, str] | None = None) -> str:
        """Start ``user``'s execution plane (with fresh credentials unless ``env`` gives them);
        returns its process name."""
        name = f"exec-plane-{user}"
        state = self.data_dir / "exec-planes" / user
        self._spawn(name, ["exec-plane", "--state-dir", str(state)], env or self.vm_credentials(user))
        return name

    def start_extra_exec_plane(self, name: str, env: dict[str, str]) -> str:
        """Start one more execution plane as process ``name`` (state in ``exec-planes/<name>``, log
        ``logs/<name>.log``) with the credentials in ``env`` (a :meth:`vm_credentials`): a second
        machine of a user, or one started with stale credentials; returns ``name``."""
        self._spawn(name, ["exec-plane", "--state-dir", str(self.data_dir / "exec-planes" / name)], env)
        return name

    def wait_exit(self, name: str, timeout: float = READY_TIMEOUT) -> int:
        """Wait for process ``name`` to end by itself, forget it, and return its exit code."""
        code = self.processes[name].wait(timeout=timeout)
        del self.processes[name]
        return code

    def wait_connected(self, count: int) -> None:
        self._wait(
            lambda health: health.get("connected_exec_planes", 0) >= count,
            f"{count} execution plane(s) to connect",
        )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Signal one process and wait for it; its exit code."""
        process = self.processes.pop(name)
        process.send_signal(sig)
        return process.wait(timeout=30)

    def _health(self) -> dict[str, Any] | None:
        try:
            url = f"{self.base_url}/health"  # always http://127.0.0.1
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
                data = json.loads(response.read())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            self.check_alive()
            health = self._health()
            if health is not None and ready(health):
                return
            time.sleep(0.2)
        raise ClusterFailed(f"timed out waiting for {what} (see {self.data_dir / 'logs'})")

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            code = process.poll()
            if code is not None:
                raise ClusterFailed(
                    f"{name} exited with code {code} (see {self.data_dir / 'logs' / (name + '.log')})"
                )

    def stop(self) -> None:
        """SIGTERM every process (execution planes first), SIGKILL what is left after 10 s."""
        ordered = sorted(self.processes.items(), key=lambda item: item[0] == "control-plane")
        for _name, process in ordered:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _name, process in ordered:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def describe(self) -> str:
        lines = [
            f"clawlet cluster · {len(self.users)} user(s) · data {self.data_dir}",
            f"  control plane  {self.base_url}  (workbench /, inbox /inbox; sign in with a user's token)",
        ]
        for user in self.users:
            lines.append(f"  {user:<14} token {self.tokens[user]}")
        first = self.users[0]
        lines += [
            f"  tokens saved to {self.data_dir / 'tokens.json'}; logs in {self.data_dir / 'logs'}",
            "  try:",
            f"    curl -N {self.base_url}/api/chat -H 'Authorization: Bearer {self.tokens[first]}' \\",
            '      -H \'Content-Type: application/json\' -d \'{"message": "hello", "session_id": "s1"}\'',
            "  Ctrl+C stops everything.",
        ]
        return "\n".join(lines)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from clawlet.controlplane.cli import DEFAULT_PORT
    from clawlet.controlplane.userdata import InvalidUserId, check_user_id

    try:
        users = [check_user_id(user.strip()) for user in args.users.split(",") if user.strip()]
    except InvalidUserId as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not users:
        print("error: --users names no user", file=sys.stderr)
        return 2
    data_dir = (Path(args.data_dir) if args.data_dir else settings.home / "cluster").expanduser().resolve()
    cluster = LocalCluster(data_dir, list(dict.fromkeys(users)), args.port or DEFAULT_PORT, settings=settings)

    def terminate(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        print(f"starting a control plane and {len(cluster.users)} execution plane(s) …", flush=True)
        cluster.start()
        print(cluster.describe(), flush=True)
        while True:
            cluster.check_alive()
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nstopping …", flush=True)
        return 0
    except ClusterFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        cluster.stop()

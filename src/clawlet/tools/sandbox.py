"""The OS sandbox the ``terminal``, ``python_repl`` and MCP stdio subprocesses run in (bubblewrap).

With ``CLAWLET_SANDBOX=auto`` (the default) every such subprocess runs under ``bwrap`` when it works
on this machine, and unsandboxed (as before) when it does not; ``bubblewrap`` requires it (tools
refuse to run without it) and ``off`` never uses it. Inside the sandbox:

* a new PID namespace (the server and every other host process are invisible in ``/proc``), a new
  IPC namespace, no capabilities, and ``--die-with-parent``;
* the system read-only (``/usr``, ``/etc``, ``/opt``, the ``/bin``-style links or directories and
  the Python interpreter's prefixes), a fresh ``/tmp``, a minimal ``/dev`` and the sandbox's ``/proc``;
* of the clawlet home only ``workspace/``, ``knowledge/``, ``skills/`` and ``scratch/`` (writable)
  and ``memory/`` and ``uploads/`` (read-only), at their real paths on an otherwise empty home: the
  transcripts, ``config.json``, ``mcp.json``, ``.env``, the databases and ``storage/`` are not there,
  and neither is the server's working directory nor anything else of the host's file system;
* the network as the host's unless the home's ``config.json`` says ``{"sandbox": {"network": false}}``
  (then a new network namespace with only its own loopback).

The result of probing bubblewrap is cached for the life of the process.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clawlet.config import RuntimeConfig, SandboxMode
from clawlet.tools.base import ToolError

log = logging.getLogger(__name__)

#: Home directories the tools may change.
WRITABLE_HOME_DIRS = ("workspace", "knowledge", "skills", "scratch")
#: Home directories the tools may read: the agent's memory (written by ``save_memory`` only) and
#: the documents received by ``PUT /process``.
READ_ONLY_HOME_DIRS = ("memory", "uploads")
#: The one home directory created for the sandbox if missing (a place for files kept between calls).
SCRATCH_DIR = "scratch"

_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PROBE_TIMEOUT = 10.0
INSTALL_HINT = "Install bubblewrap (Debian: apt-get install bubblewrap)."


class SandboxUnavailable(ToolError):
    """``CLAWLET_SANDBOX=bubblewrap`` but bubblewrap cannot be used here: the tool does not run."""


@dataclass(frozen=True)
class SandboxStatus:
    """Whether tool subprocesses run sandboxed, and if not, why."""

    kind: Literal["bubblewrap", "none"]
    reason: str = ""
    mode: SandboxMode = "auto"

    @property
    def active(self) -> bool:
        return self.kind == "bubblewrap"

    @property
    def refused(self) -> bool:
        """Required (``CLAWLET_SANDBOX=bubblewrap``) but unavailable: sandboxed tools refuse to run."""
        return self.mode == "bubblewrap" and not self.active

    def describe(self) -> str:
        """``bubblewrap`` or ``none (<reason>)``, as ``/health`` and ``clawlet serve`` say it."""
        return "bubblewrap" if self.active else f"none ({self.reason})"


def sandbox_status(mode: SandboxMode) -> SandboxStatus:
    """The sandbox tools get in ``mode`` on this machine."""
    if mode == "off":
        return SandboxStatus("none", "turned off by CLAWLET_SANDBOX=off", mode)
    reason = bubblewrap_problem()
    if reason is None:
        return SandboxStatus("bubblewrap", "", mode)
    if mode == "bubblewrap":
        reason += (
            "; CLAWLET_SANDBOX=bubblewrap requires it, so terminal, python_repl and MCP servers refuse to run"
        )
    return SandboxStatus("none", reason, mode)


@functools.cache
def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot be used here (``None`` when it works), probed once per process by
    running ``true`` in the same kind of sandbox the tools get."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (no bwrap on PATH)"
    with tempfile.TemporaryDirectory(prefix="clawlet-sandbox-probe-") as home:
        argv = bubblewrap_argv(["true"], home=Path(home), network=True)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False, cwd=home
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap could not be run ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return f"bwrap does not work here ({detail[-1] if detail else f'exit code {done.returncode}'})"
    return None


def _system_mounts() -> list[tuple[str, list[str]]]:
    mounts: list[tuple[str, list[str]]] = []
    for directory in _SYSTEM_DIRS:
        if os.path.isdir(directory):
            mounts.append((directory, ["--ro-bind", directory, directory]))
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            mounts.append((path, ["--symlink", os.readlink(path), path]))
        elif os.path.isdir(path):
            mounts.append((path, ["--ro-bind", path, path]))
    resolv = "/etc/resolv.conf"  # often a link into /run (systemd-resolved), which is not mounted
    if os.path.islink(resolv):
        target = os.path.realpath(resolv)
        if not target.startswith(("/usr/", "/etc/", "/opt/")):
            mounts.append((target, ["--ro-bind-try", target, target]))
    return mounts


def _python_prefixes() -> list[str]:
    """Where the running interpreter and its libraries live (a venv and the Python it is based on)."""
    found: list[str] = []
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        for path in (os.path.abspath(prefix), os.path.realpath(prefix)):
            if path not in found and path != "/" and os.path.isdir(path):
                found.append(path)
    return found


def _home_dir(home: Path, name: str) -> Path | None:
    """A home directory to mount: a real directory, never a symlink (which could point anywhere)."""
    path = home / name
    if path.is_symlink() or not path.is_dir():
        if path.is_symlink():
            log.warning("sandbox: %s is a symlink; it is not mounted into the tool sandbox", path)
        return None
    return path


def bubblewrap_argv(
    argv: Sequence[str], *, home: Path, network: bool, read_only: Iterable[Path] = ()
) -> list[str]:
    """The ``bwrap`` command line that runs ``argv`` sandboxed with ``home`` as working directory
    (see the module docstring for what is mounted); ``read_only`` adds host paths read-only."""
    home = home.resolve()
    scratch = home / SCRATCH_DIR
    if not scratch.is_symlink():
        scratch.mkdir(exist_ok=True)
    mounts: list[tuple[str, list[str]]] = [
        ("/proc", ["--proc", "/proc"]),
        ("/dev", ["--dev", "/dev"]),
        ("/tmp", ["--tmpfs", "/tmp"]),  # noqa: S108 (a fresh, empty /tmp inside the sandbox)
        *_system_mounts(),
        *((prefix, ["--ro-bind", prefix, prefix]) for prefix in _python_prefixes()),
        (str(home), ["--tmpfs", str(home)]),
    ]
    for names, option in ((WRITABLE_HOME_DIRS, "--bind"), (READ_ONLY_HOME_DIRS, "--ro-bind")):
        for name in names:
            path = _home_dir(home, name)
            if path is not None:
                mounts.append((str(path), [option, str(path), str(path)]))
    # Extra paths already reachable through a bind or a /bin-style link are left as they are.
    reachable = [Path(path) for path, options in mounts if options[0] in ("--ro-bind", "--bind", "--symlink")]
    for extra in read_only:
        path = Path(os.path.abspath(extra))
        if path.exists() and not any(path == base or base in path.parents for base in reachable):
            mounts.append((str(path), ["--ro-bind", str(path), str(path)]))
            reachable.append(path)
    # A parent is mounted before what lies inside it (the home's tmpfs before its directories, a
    # prefix inside the home after the home's tmpfs): fewer path components first, stable otherwise.
    mounts.sort(key=lambda mount: len(Path(mount[0]).parts))
    command = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    if not network:
        command.append("--unshare-net")
    if os.geteuid() == 0:
        command += ["--cap-drop", "ALL"]  # root keeps every capability in the sandbox otherwise
    for _, options in mounts:
        command += options
    return [*command, "--chdir", str(home), "--", *argv]


class ToolSandbox:
    """How the subprocesses of one clawlet home's tools are started.

    ``runtime_config`` is the home's ``config.json`` (read on every call, so a change applies to the
    next command): ``{"sandbox": {"network": false}}`` turns the network off; a named workspace
    inherits the main home's value unless it sets its own.
    """

    def __init__(self, home: Path, mode: SandboxMode = "auto", runtime_config: RuntimeConfig | None = None):
        self.home = home
        self.mode = mode
        self.runtime_config = runtime_config or RuntimeConfig(home / "config.json")

    def status(self) -> SandboxStatus:
        return sandbox_status(self.mode)

    def network_enabled(self) -> bool:
        return self.runtime_config.get_sandbox_network()

    def wrap(self, argv: Sequence[str], *, read_only: Iterable[Path] = ()) -> list[str]:
        """The command line that runs ``argv`` for this home: inside bubblewrap when the sandbox is
        active, ``argv`` itself when it is not; raises :class:`SandboxUnavailable` when required."""
        status = self.status()
        if status.refused:
            raise SandboxUnavailable(f"the tool sandbox is unavailable: {status.reason}")
        if not status.active:
            return list(argv)
        return bubblewrap_argv(argv, home=self.home, network=self.network_enabled(), read_only=read_only)


def startup_warning(status: SandboxStatus) -> str | None:
    """The one warning a server prints at start when its tools are not sandboxed (``None`` when they
    are, or when ``CLAWLET_SANDBOX=off`` said so on purpose)."""
    if status.active or status.mode == "off":
        return None
    if status.refused:
        return f"warning: no tool sandbox: {status.reason}. {INSTALL_HINT}"
    return (
        f"warning: no tool sandbox ({status.reason}): terminal, python_repl and MCP servers run "
        f"unsandboxed, with this user's rights. {INSTALL_HINT}"
    )

"""What every tool shares: the error type, output caps, and the scrubbed subprocess runner."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

# Variables a subprocess may inherit; everything else (API keys, tokens, cloud credentials) is dropped.
_SAFE_ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "SHELL", "USER", "LOGNAME"}


class ToolError(Exception):
    """A tool failed in a way the model should hear about (it becomes an error ToolMessage)."""


def cap_output(text: str, limit: int) -> str:
    """Cut tool output to ``limit`` characters, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [output truncated: {len(text) - limit} more characters]"


def scrubbed_environment(home: Path) -> dict[str, str]:
    """A minimal environment for tool subprocesses: no secrets, HOME set to the clawlet home."""
    env = {
        name: value for name, value in os.environ.items() if name in _SAFE_ENV_NAMES or name.startswith("LC_")
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@dataclass
class ProcessResult:
    output: str
    exit_code: int | None
    timed_out: bool


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    timeout: float,
    stdin: bytes | None = None,
) -> ProcessResult:
    """Run a subprocess in its own process group with a scrubbed environment and a timeout.

    On timeout or cancellation the whole process group is killed, so nothing lingers.
    """
    env = scrubbed_environment(cwd)
    kwargs: dict[str, object] = {
        "cwd": str(cwd),
        "env": env,
        "stdin": asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        "stdout": asyncio.subprocess.PIPE,
        "stderr": asyncio.subprocess.STDOUT,
        "start_new_session": True,
    }
    process = await asyncio.create_subprocess_exec(*argv, **kwargs)  # type: ignore[arg-type]
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(stdin), timeout=timeout)
    except TimeoutError:
        _kill_group(process.pid)
        stdout = b""
        if process.stdout is not None:
            try:
                stdout = await asyncio.wait_for(process.stdout.read(), timeout=1)
            except (TimeoutError, ValueError):
                stdout = b""
        await process.wait()
        return ProcessResult(stdout.decode("utf-8", errors="replace"), None, True)
    except asyncio.CancelledError:
        _kill_group(process.pid)
        raise
    return ProcessResult(stdout.decode("utf-8", errors="replace"), process.returncode, False)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

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


# Subprocess output kept in memory (far above every tool's output cap); the rest is discarded.
MAX_COLLECTED_BYTES = 1_000_000


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

    def describe(self, limit: int, timeout: float, what: str) -> str:
        """The output for the model: capped first, so the timeout / exit-code note is never cut."""
        output = cap_output(self.output.strip(), limit)
        if self.timed_out:
            output += f"\n[timed out after {timeout:g} s; {what} was killed]"
        elif self.exit_code:
            output += f"\n[exit code {self.exit_code}]"
        return output.strip() or "(no output)"


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
    # Output is collected as it arrives, so what a command printed before a timeout is kept; past
    # MAX_COLLECTED_BYTES it is drained and dropped, so an endless writer cannot exhaust memory.
    collected = bytearray()

    async def collect() -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            room = MAX_COLLECTED_BYTES - len(collected)
            if room > 0:
                collected.extend(chunk[:room])

    async def feed() -> None:
        assert process.stdin is not None and stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(stdin)
            await process.stdin.drain()
        process.stdin.close()

    async def communicate() -> None:
        await asyncio.gather(collect(), *([feed()] if stdin is not None else []))
        await process.wait()

    try:
        await asyncio.wait_for(communicate(), timeout=timeout)
    except TimeoutError:
        _kill_group(process.pid)
        with contextlib.suppress(TimeoutError, ValueError):
            await asyncio.wait_for(collect(), timeout=1)
        await process.wait()
        return ProcessResult(collected.decode("utf-8", errors="replace"), None, True)
    except asyncio.CancelledError:
        _kill_group(process.pid)
        raise
    return ProcessResult(collected.decode("utf-8", errors="replace"), process.returncode, False)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

"""``terminal``: run a shell command inside the clawlet home, with a blacklist and limits."""

from __future__ import annotations

import re
from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.tools.base import ToolError, run_process
from clawlet.tools.sandbox import ToolSandbox

MAX_OUTPUT_CHARS = 5_000

# Commands refused outright (the seed's blacklist, widened to common spellings).
BLOCKED_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-[a-zA-Z]+\s+)*(/|~|\$HOME|/\*)(\s|$)",
        "rm -rf on / or ~",
    ),
    (r"\bmkfs(\.\w+)?\b", "mkfs"),
    (r"\b(shutdown|reboot|halt|poweroff)\b", "shutdown/reboot"),
    (r"\binit\s+[06]\b", "init 0/6"),
    (r"\bdd\s+.*\bof=/dev/", "dd to a device"),
    (r">\s*/dev/(sd|nvme|hd|vd)", "writing to a block device"),
    (r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "fork bomb"),
    (r"\bchmod\s+(-R\s+)?[0-7]{3,4}\s+/(\s|$)", "chmod on /"),
    (r"\bchown\s+-R\s+\S+\s+/(\s|$)", "chown -R on /"),
)


def blocked_reason(command: str) -> str | None:
    """Why ``command`` is refused, or ``None`` if it may run."""
    for pattern, reason in BLOCKED_PATTERNS:
        if re.search(pattern, command):
            return reason
    return None


class TerminalInput(BaseModel):
    command: str = Field(description="The shell command to run (bash syntax).")


def make_terminal_tool(home: Path, timeout: float = 30.0, sandbox: ToolSandbox | None = None) -> BaseTool:
    """The tool for ``home``; commands run in ``sandbox`` (default: the home's, ``CLAWLET_SANDBOX=auto``)."""
    sandbox = sandbox or ToolSandbox(home)

    async def terminal(command: str) -> str:
        reason = blocked_reason(command)
        if reason:
            raise ToolError(f"command refused by the safety blacklist ({reason})")
        argv = sandbox.wrap(["/bin/bash", "-c", command])
        result = await run_process(argv, cwd=home, timeout=timeout)
        return result.describe(MAX_OUTPUT_CHARS, timeout, "the command")

    return StructuredTool.from_function(
        coroutine=terminal,
        name="terminal",
        description=(
            "Run a shell command in the clawlet home directory and return its combined "
            f"stdout/stderr (timeout {timeout:g} s, output capped at {MAX_OUTPUT_CHARS} characters). "
            "Destructive system commands are refused."
        ),
        args_schema=TerminalInput,
    )

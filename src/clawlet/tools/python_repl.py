"""``python_repl``: run Python code in a separate, time-limited process (never in the server)."""

from __future__ import annotations

import sys
from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.tools.base import run_process
from clawlet.tools.sandbox import ToolSandbox

MAX_OUTPUT_CHARS = 5_000

# Executes the code read from stdin; like a REPL, the value of a final expression is printed.
_RUNNER = """
import ast, sys
source = sys.stdin.read()
tree = ast.parse(source, "<python_repl>", "exec")
namespace = {"__name__": "__main__"}
last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
exec(compile(tree, "<python_repl>", "exec"), namespace)
if last is not None:
    value = eval(compile(ast.Expression(last.value), "<python_repl>", "eval"), namespace)
    if value is not None:
        print(repr(value))
"""


class PythonInput(BaseModel):
    code: str = Field(description="Python source code to execute. Use print() to show results.")


def make_python_tool(home: Path, timeout: float = 30.0, sandbox: ToolSandbox | None = None) -> BaseTool:
    """The tool for ``home``; code runs in ``sandbox`` (default: the home's, ``CLAWLET_SANDBOX=auto``)."""
    sandbox = sandbox or ToolSandbox(home)

    async def python_repl(code: str) -> str:
        result = await run_process(
            sandbox.wrap([sys.executable, "-I", "-c", _RUNNER]),
            cwd=home,
            timeout=timeout,
            stdin=code.encode("utf-8"),
        )
        return result.describe(MAX_OUTPUT_CHARS, timeout, "the process")

    return StructuredTool.from_function(
        coroutine=python_repl,
        name="python_repl",
        description=(
            "Execute Python 3 code in a fresh separate process (working directory: the clawlet home) "
            "and return what it prints; the value of a final expression is printed too. "
            f"Timeout {timeout:g} s, output capped at {MAX_OUTPUT_CHARS} characters."
        ),
        args_schema=PythonInput,
    )

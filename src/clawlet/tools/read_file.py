"""``read_file``: read a file (or list a directory) inside the clawlet home, never outside it: paths go
through the path guard (``clawlet.paths``), so links out of the home and files with several hard links
are refused."""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.paths import UnsafePath, read_bytes_inside, resolve_inside
from clawlet.tools.base import ToolError, cap_output

MAX_OUTPUT_CHARS = 10_000


class ReadFileInput(BaseModel):
    path: str = Field(description="Path relative to the clawlet home, e.g. skills/get_weather/SKILL.md")


def make_read_file_tool(root: Path) -> BaseTool:
    def read_file(path: str) -> str:
        try:
            target = resolve_inside(root, path)
            if target.is_dir():
                entries = sorted(child.name + ("/" if child.is_dir() else "") for child in target.iterdir())
                return cap_output("\n".join(entries) or "(empty directory)", MAX_OUTPUT_CHARS)
            data = read_bytes_inside(root, target)
        except UnsafePath as exc:
            raise ToolError(str(exc)) from exc
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ToolError(f"file not found: {path}") from exc
        if b"\x00" in data[:4096]:
            raise ToolError(f"{path} is a binary file")
        return cap_output(data.decode("utf-8", errors="replace"), MAX_OUTPUT_CHARS)

    return StructuredTool.from_function(
        func=read_file,
        name="read_file",
        description=(
            "Read a text file inside the clawlet home (or list a directory). Paths are relative "
            f"to the home; output is capped at {MAX_OUTPUT_CHARS} characters."
        ),
        args_schema=ReadFileInput,
    )

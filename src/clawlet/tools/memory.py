"""``save_memory``: append a durable fact to ``memory/MEMORY.md`` (atomically, within its cap, through
the path guard: a MEMORY.md linked out of the home is refused)."""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.config import MAX_COMPONENT_CHARS
from clawlet.paths import UnsafePath, read_text_inside
from clawlet.storage import atomic_write_text, file_lock
from clawlet.tools.base import ToolError

MAX_FACT_CHARS = 1_000


class SaveMemoryInput(BaseModel):
    fact: str = Field(description="One durable fact worth remembering across sessions.")


def append_fact(memory_file: Path, fact: str, home: Path | None = None) -> str:
    """Append ``- fact`` to MEMORY.md; refuse if the file would exceed the prompt cap. ``home`` is the
    path guard's root (MEMORY.md's directory when not given)."""
    root = home if home is not None else memory_file.parent
    fact = " ".join(fact.split())
    if not fact:
        raise ToolError("the fact is empty")
    if len(fact) > MAX_FACT_CHARS:
        raise ToolError(f"a fact may be at most {MAX_FACT_CHARS} characters")
    with file_lock(memory_file):
        try:
            current = read_text_inside(root, memory_file)
        except FileNotFoundError:
            current = "# Long-term memory\n"
        except UnsafePath as exc:
            raise ToolError(f"memory/MEMORY.md is refused: {exc}") from exc
        if fact in current:
            return "Already in memory."
        updated = current.rstrip("\n") + f"\n- {fact}\n"
        if len(updated) > MAX_COMPONENT_CHARS:
            raise ToolError(
                f"MEMORY.md would exceed {MAX_COMPONENT_CHARS} characters; ask the user to tidy it"
            )
        try:
            atomic_write_text(memory_file, updated, root=root)
        except UnsafePath as exc:
            raise ToolError(f"memory/MEMORY.md is refused: {exc}") from exc
    return f"Saved to memory/MEMORY.md: {fact}"


def make_memory_tool(memory_file: Path, home: Path | None = None) -> BaseTool:
    def save_memory(fact: str) -> str:
        return append_fact(memory_file, fact, home)

    return StructuredTool.from_function(
        func=save_memory,
        name="save_memory",
        description=(
            "Remember a durable fact about the user or their work across sessions by appending it "
            "to memory/MEMORY.md. Use for stable preferences and facts, not for chit-chat."
        ),
        args_schema=SaveMemoryInput,
    )

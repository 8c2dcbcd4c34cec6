"""``save_memory``: append a durable fact to ``memory/MEMORY.md`` (atomically, within its cap)."""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.engine.prompt import MAX_COMPONENT_CHARS
from clawlet.storage import atomic_write_text, file_lock
from clawlet.tools.base import ToolError

MAX_FACT_CHARS = 1_000


class SaveMemoryInput(BaseModel):
    fact: str = Field(description="One durable fact worth remembering across sessions.")


def append_fact(memory_file: Path, fact: str) -> str:
    """Append ``- fact`` to MEMORY.md; refuse if the file would exceed the prompt cap."""
    fact = " ".join(fact.split())
    if not fact:
        raise ToolError("the fact is empty")
    if len(fact) > MAX_FACT_CHARS:
        raise ToolError(f"a fact may be at most {MAX_FACT_CHARS} characters")
    with file_lock(memory_file):
        try:
            current = memory_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = "# Long-term memory\n"
        if fact in current:
            return "Already in memory."
        updated = current.rstrip("\n") + f"\n- {fact}\n"
        if len(updated) > MAX_COMPONENT_CHARS:
            raise ToolError(
                f"MEMORY.md would exceed {MAX_COMPONENT_CHARS} characters; ask the user to tidy it"
            )
        atomic_write_text(memory_file, updated)
    return f"Saved to memory/MEMORY.md: {fact}"


def make_memory_tool(memory_file: Path) -> BaseTool:
    def save_memory(fact: str) -> str:
        return append_fact(memory_file, fact)

    return StructuredTool.from_function(
        func=save_memory,
        name="save_memory",
        description=(
            "Remember a durable fact about the user or their work across sessions by appending it "
            "to memory/MEMORY.md. Use for stable preferences and facts, not for chit-chat."
        ),
        args_schema=SaveMemoryInput,
    )

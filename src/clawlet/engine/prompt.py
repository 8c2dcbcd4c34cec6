"""Assemble the system prompt from the workspace Markdown files, fresh on every run.

Order: SKILLS_SNAPSHOT.md, workspace/SOUL.md, IDENTITY.md, USER.md, AGENTS.md, memory/MEMORY.md.
Each part is wrapped in its ``<!-- ... -->`` tag, capped at 20,000 characters, and parts are joined
by a blank line. In RAG mode MEMORY.md is replaced by a note that memory arrives by retrieval.
"""

from __future__ import annotations

from pathlib import Path

MAX_COMPONENT_CHARS = 20_000
TRUNCATION_MARK = "\n... [truncated]"
RAG_MEMORY_NOTE = (
    "Long-term memory (memory/MEMORY.md) is not included here. Relevant memory excerpts are "
    "retrieved for each message and appear in the conversation as [记忆检索结果] "
    "(memory retrieval results)."
)

PROMPT_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("Skills Snapshot", "SKILLS_SNAPSHOT.md"),
    ("Soul", "workspace/SOUL.md"),
    ("Identity", "workspace/IDENTITY.md"),
    ("User Profile", "workspace/USER.md"),
    ("Agents Guide", "workspace/AGENTS.md"),
    ("Long-term Memory", "memory/MEMORY.md"),
)


def cap(text: str, limit: int = MAX_COMPONENT_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + TRUNCATION_MARK


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return ""
    except UnicodeDecodeError:
        return path.read_bytes().decode("utf-8", errors="replace")


def build_system_prompt(home: Path, rag_mode: bool = False) -> str:
    """The full system prompt for one run, read from disk now."""
    parts: list[str] = []
    for label, relative in PROMPT_COMPONENTS:
        if relative == "memory/MEMORY.md" and rag_mode:
            body = RAG_MEMORY_NOTE
        else:
            body = cap(_read(home / relative).strip())
        parts.append(f"<!-- {label} -->\n{body}")
    return "\n\n".join(parts)

"""Assemble the system prompt from the workspace Markdown files, fresh on every run.

Order: SKILLS_SNAPSHOT.md, workspace/SOUL.md, IDENTITY.md, USER.md, AGENTS.md, memory/MEMORY.md.
Each part is wrapped in its ``<!-- ... -->`` tag, capped at 20,000 characters, and parts are joined
by a blank line. In RAG mode MEMORY.md is replaced by a note that memory arrives by retrieval.
Files are read through the path guard (``clawlet.paths``): one that links out of the home is left out.
"""

from __future__ import annotations

import logging
from pathlib import Path

from clawlet.paths import UnsafePath, read_text_inside

log = logging.getLogger(__name__)

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


def _read(home: Path, relative: str) -> str:
    """A prompt file read through the path guard; "" if missing or refused (a link out of the
    home, a file with several hard links), since whatever it names would go to the model."""
    try:
        return read_text_inside(home, home / relative, errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ""
    except UnsafePath as exc:
        log.warning("leaving %s out of the system prompt: %s", relative, exc)
        return ""


def build_system_prompt(home: Path, rag_mode: bool = False) -> str:
    """The full system prompt for one run, read from disk now."""
    parts: list[str] = []
    for label, relative in PROMPT_COMPONENTS:
        if relative == "memory/MEMORY.md" and rag_mode:
            body = RAG_MEMORY_NOTE
        else:
            body = cap(_read(home, relative).strip())
        parts.append(f"<!-- {label} -->\n{body}")
    return "\n\n".join(parts)

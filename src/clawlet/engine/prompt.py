"""Assemble the system prompt from the workspace Markdown files, fresh on every run.

Order: SKILLS_SNAPSHOT.md, workspace/SOUL.md, IDENTITY.md, USER.md, AGENTS.md, memory/MEMORY.md.
Each part is wrapped in its ``<!-- ... -->`` tag, capped at 20,000 characters, and parts are joined
by a blank line. In RAG mode MEMORY.md is replaced by a note that memory arrives by retrieval.
Files are read through the path guard (``clawlet.paths``): one that links out of the home is left out.
A file is read again only when it changed (:class:`clawlet.filememo.FileMemo`), so assembling the
prompt before every model call costs a few ``stat`` calls while nothing changes; and while no part
changed, every call returns the same string (:data:`ASSEMBLED`), so the turns in flight share one
prompt instead of holding a copy each (about 7 KB per turn with the seeded workspace).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from pathlib import Path

from clawlet.config import MAX_COMPONENT_CHARS
from clawlet.filememo import FileMemo
from clawlet.paths import UnsafePath, read_text_inside

log = logging.getLogger(__name__)

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


PROMPT_FILES: FileMemo[str] = FileMemo()
"""The prompt parts as last read (stripped and capped), per file."""


def _read(home: Path, relative: str) -> str:
    """A prompt file read through the path guard, stripped and capped; "" if missing or refused (a
    link out of the home, a file with several hard links), since whatever it names would go to the
    model."""

    def read(path: Path) -> str:
        try:
            return cap(read_text_inside(home, path, errors="replace").strip())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return ""
        except UnsafePath as exc:
            log.warning("leaving %s out of the system prompt: %s", relative, exc)
            return ""

    return PROMPT_FILES.get(home / relative, read, variant=home)


ASSEMBLED: OrderedDict[tuple[Path, bool], tuple[tuple[str, ...], str]] = OrderedDict()
"""Per home and RAG mode: the parts' bodies last assembled and the prompt made of them (the
:data:`MAX_ASSEMBLED` most recently used homes)."""
MAX_ASSEMBLED = 64
_assembled_lock = threading.Lock()


def build_system_prompt(home: Path, rag_mode: bool = False) -> str:
    """The full system prompt for one run, read from disk now (the same string as the last call's
    for this home while no part changed)."""
    bodies = tuple(
        RAG_MEMORY_NOTE if relative == "memory/MEMORY.md" and rag_mode else _read(home, relative)
        for _label, relative in PROMPT_COMPONENTS
    )
    key = (home, rag_mode)
    with _assembled_lock:
        last = ASSEMBLED.get(key)
        if last is not None and last[0] == bodies:
            ASSEMBLED.move_to_end(key)
            return last[1]
    prompt = "\n\n".join(
        f"<!-- {label} -->\n{body}"
        for (label, _relative), body in zip(PROMPT_COMPONENTS, bodies, strict=True)
    )
    with _assembled_lock:
        ASSEMBLED[key] = (bodies, prompt)
        ASSEMBLED.move_to_end(key)
        while len(ASSEMBLED) > MAX_ASSEMBLED:
            ASSEMBLED.popitem(last=False)
    return prompt

"""The two retrieval stores: ``MemoryIndex`` (memory/MEMORY.md, for RAG mode) and
``KnowledgeBase`` (documents under knowledge/, for ``search_knowledge_base``).

Both are persisted under ``storage/``, built lazily, and brought up to date before every search:
MEMORY.md by its MD5 hash, knowledge files by size and modification time. Files are read through
the path guard (``clawlet.paths``): one that links out of the home, or has several hard links, is
not indexed.
"""

from __future__ import annotations

import hashlib
import io
from functools import partial
from pathlib import Path
from typing import Final

from clawlet.config import HomePaths, Settings
from clawlet.memory.embeddings import EmbeddingClient
from clawlet.memory.index import HybridIndex, SearchResult, SourceLoader
from clawlet.paths import UnsafePath, is_safe_entry, read_bytes_inside, read_text_inside
from clawlet.storage import exclusive

KNOWLEDGE_SUFFIXES = {".md", ".markdown", ".txt", ".rst", ".pdf"}
MEMORY_SOURCE = "memory/MEMORY.md"


def build_embedder(settings: Settings) -> EmbeddingClient | None:
    """Vectors are used only when an embeddings endpoint is configured (``OPENAI_BASE_URL``)."""
    if not settings.openai_base_url or not settings.embedding_model:
        return None
    return EmbeddingClient(settings.openai_base_url, settings.embedding_model, settings.openai_api_key)


def read_document(root: Path, path: Path) -> str:
    """The text of a knowledge document inside ``root`` (read through the path guard)."""
    data = read_bytes_inside(root, path)
    if path.suffix.lower() == ".pdf":
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    return data.decode("utf-8", errors="replace")


class MemoryIndex:
    def __init__(self, paths: HomePaths, embedder: EmbeddingClient | None) -> None:
        self.root = paths.root
        self.memory_file = paths.memory_file
        self.index = HybridIndex(paths.storage / "memory_index" / "index.sqlite3", embedder)

    def refresh(self) -> int:
        try:
            text = read_text_inside(self.root, self.memory_file, errors="replace")
        except (FileNotFoundError, UnsafePath):
            return self.index.sync({})
        digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
        return self.index.sync({MEMORY_SOURCE: (digest, lambda: text)})

    def retrieve(self, query: str, top_k: int = 3) -> list[SearchResult]:
        self.refresh()
        return self.index.search(query, top_k)


class KnowledgeBase:
    def __init__(self, paths: HomePaths, embedder: EmbeddingClient | None) -> None:
        self.root = paths.root
        self.directory = paths.knowledge
        self.index = HybridIndex(paths.storage / "knowledge_index" / "index.sqlite3", embedder)

    def documents(self) -> dict[str, tuple[str, SourceLoader]]:
        found: dict[str, tuple[str, SourceLoader]] = {}
        if not self.directory.is_dir():
            return found
        for path in sorted(self.directory.rglob("*")):
            if not path.is_file() or path.suffix.lower() not in KNOWLEDGE_SUFFIXES:
                continue
            if any(part.startswith(".") for part in path.relative_to(self.directory).parts):
                continue
            if not is_safe_entry(self.root, path):
                continue
            stat = path.stat()
            source = path.relative_to(self.root).as_posix()
            found[source] = (f"{stat.st_size}:{stat.st_mtime_ns}", partial(read_document, self.root, path))
        return found

    def refresh(self) -> int:
        return self.index.sync(self.documents())

    def search(self, query: str, top_k: int = 3) -> list[SearchResult]:
        self.refresh()
        return self.index.search(query, top_k)


INDEX_LOCK: Final = ".exec-plane-index.lock"
"""Under the home's ``storage/``: processes sharing a home (session processes, engine workers) open
its SQLite indexes one at a time (opening runs a read-then-write transaction that fails at once
with ``database is locked`` when two processes run it together)."""


def open_indexes(settings: Settings) -> tuple[MemoryIndex, KnowledgeBase]:
    """A home's memory and knowledge indexes, opened under :data:`INDEX_LOCK`."""
    embedder = build_embedder(settings)
    with exclusive(settings.paths.storage / INDEX_LOCK):
        return MemoryIndex(settings.paths, embedder), KnowledgeBase(settings.paths, embedder)

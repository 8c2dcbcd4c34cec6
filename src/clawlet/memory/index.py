"""``HybridIndex``: chunks in one SQLite file, searched by keyword (FTS5 BM25) and, when an
embedding endpoint is configured, by vector similarity; the two rankings are fused (RRF).

Keyword search always works offline and handles Chinese through :mod:`clawlet.memory.lexical`.
Updates are incremental: a source whose fingerprint is unchanged is left alone.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from clawlet.memory.chunking import split_text
from clawlet.memory.embeddings import EmbeddingClient, EmbeddingError
from clawlet.memory.lexical import search_terms

if TYPE_CHECKING:  # numpy is imported by the vector search, when there are embeddings
    import numpy as np

log = logging.getLogger(__name__)

RRF_K = 60
CANDIDATES = 50

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources(source TEXT PRIMARY KEY, fingerprint TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks(
  id INTEGER PRIMARY KEY, source TEXT NOT NULL, ordinal INTEGER NOT NULL, text TEXT NOT NULL,
  embedding BLOB
);
CREATE INDEX IF NOT EXISTS chunks_by_source ON chunks(source);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(terms);
"""


class SearchResult(TypedDict, total=False):
    text: str
    score: float
    source: str
    keyword_score: float
    vector_score: float


SourceLoader = Callable[[], str]


class HybridIndex:
    def __init__(self, db_path: Path, embedder: EmbeddingClient | None = None) -> None:
        self.db_path = db_path
        self.embedder = embedder
        self._lock = threading.Lock()
        self._matrix: tuple[np.ndarray[Any, Any], list[int]] | None = None
        db_path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            model = embedder.model if embedder else ""
            row = db.execute("SELECT value FROM meta WHERE key='embedding_model'").fetchone()
            if row is not None and row[0] != model:
                # Vectors from another model are not comparable: re-index everything.
                db.execute("DELETE FROM sources")
            db.execute("INSERT OR REPLACE INTO meta VALUES('embedding_model', ?)", (model,))

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.db_path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            with db:
                yield db
        finally:
            db.close()

    def fingerprints(self) -> dict[str, str]:
        with self._connect() as db:
            return dict(db.execute("SELECT source, fingerprint FROM sources").fetchall())

    def sync(self, sources: dict[str, tuple[str, SourceLoader]]) -> int:
        """Make the index match ``sources`` ({source: (fingerprint, loader)}); returns how many
        sources were (re)indexed. Unchanged sources are not read."""
        with self._lock:
            known = self.fingerprints()
            stale = [name for name in known if name not in sources]
            changed = [name for name, (fp, _) in sources.items() if known.get(name) != fp]
            if not stale and not changed:
                return 0
            with self._connect() as db:
                for name in stale:
                    self._remove(db, name)
                for name in changed:
                    fingerprint, loader = sources[name]
                    self._remove(db, name)
                    try:
                        text = loader()
                    except Exception as exc:
                        log.warning("cannot index %s: %s", name, exc)
                        text = ""
                    self._add(db, name, text)
                    db.execute("INSERT OR REPLACE INTO sources VALUES(?, ?)", (name, fingerprint))
            self._matrix = None
            return len(changed)

    def _remove(self, db: sqlite3.Connection, source: str) -> None:
        ids = [row[0] for row in db.execute("SELECT id FROM chunks WHERE source=?", (source,))]
        db.executemany("DELETE FROM chunks_fts WHERE rowid=?", [(i,) for i in ids])
        db.execute("DELETE FROM chunks WHERE source=?", (source,))
        db.execute("DELETE FROM sources WHERE source=?", (source,))

    def _add(self, db: sqlite3.Connection, source: str, text: str) -> None:
        chunks = split_text(text)
        vectors: list[bytes | None] = [None] * len(chunks)
        if self.embedder is not None and chunks:
            try:
                vectors = [_pack(v) for v in self.embedder.embed(chunks)]
            except EmbeddingError as exc:
                log.warning("embeddings unavailable for %s, keyword search only: %s", source, exc)
        for ordinal, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
            cursor = db.execute(
                "INSERT INTO chunks(source, ordinal, text, embedding) VALUES(?, ?, ?, ?)",
                (source, ordinal, chunk, vector),
            )
            db.execute(
                "INSERT INTO chunks_fts(rowid, terms) VALUES(?, ?)",
                (cursor.lastrowid, " ".join(search_terms(chunk))),
            )

    def chunk_count(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def search(self, query: str, top_k: int = 3) -> list[SearchResult]:
        keyword = self._keyword(query)
        vector = self._vector(query)
        fused: dict[int, float] = {}
        for ranking in (keyword, vector):
            for rank, (chunk_id, _) in enumerate(ranking):
                fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(fused, key=lambda cid: fused[cid], reverse=True)[:top_k]
        if not best:
            return []
        keyword_scores = dict(keyword)
        vector_scores = dict(vector)
        with self._connect() as db:
            rows = {
                row[0]: row[1:]
                for row in db.execute(
                    f"SELECT id, text, source FROM chunks WHERE id IN ({','.join('?' * len(best))})",  # noqa: S608
                    best,
                )
            }
        results: list[SearchResult] = []
        for chunk_id in best:
            if chunk_id not in rows:
                continue
            text, source = rows[chunk_id]
            result: SearchResult = {"text": text, "source": source, "score": round(fused[chunk_id], 6)}
            if chunk_id in keyword_scores:
                result["keyword_score"] = round(keyword_scores[chunk_id], 4)
            if chunk_id in vector_scores:
                result["vector_score"] = round(vector_scores[chunk_id], 4)
            results.append(result)
        return results

    def _keyword(self, query: str) -> list[tuple[int, float]]:
        terms = list(dict.fromkeys(search_terms(query)))
        if not terms:
            return []
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        with self._connect() as db:
            rows = db.execute(
                "SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
                "ORDER BY bm25(chunks_fts) LIMIT ?",
                (match, CANDIDATES),
            ).fetchall()
        return [(int(rowid), float(score)) for rowid, score in rows]

    def _vector(self, query: str) -> list[tuple[int, float]]:
        if self.embedder is None:
            return []
        matrix = self._load_matrix()
        if matrix is None:
            return []
        vectors, ids = matrix
        import numpy as np

        try:
            query_vector = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        except EmbeddingError as exc:
            log.warning("query embedding failed, keyword search only: %s", exc)
            return []
        if query_vector.shape[0] != vectors.shape[1]:
            return []
        norm = float(np.linalg.norm(query_vector)) or 1.0
        similarities = vectors @ (query_vector / norm)
        order = np.argsort(-similarities)[:CANDIDATES]
        return [(ids[i], float(similarities[i])) for i in order]

    def _load_matrix(self) -> tuple[np.ndarray[Any, Any], list[int]] | None:
        if self._matrix is None:
            with self._connect() as db:
                rows = db.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL").fetchall()
            if not rows:
                return None
            import numpy as np

            vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            self._matrix = (vectors / norms, [int(row[0]) for row in rows])
        return self._matrix


def _pack(vector: list[float]) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()

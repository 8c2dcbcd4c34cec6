"""Split text into chunks of at most 256 cl100k tokens with a 32-token overlap.

Text is cut at paragraph and sentence ends (Chinese 。！？ included) and packed greedily; a
sentence longer than a chunk is cut at token boundaries. Overlap repeats the tail sentences of the
previous chunk (up to 32 tokens) so a fact split across a boundary is still found whole.
"""

from __future__ import annotations

import re

from clawlet.tokens import count_tokens, encoding

CHUNK_TOKENS = 256
OVERLAP_TOKENS = 32

# A sentence with its terminator (and the line breaks after it), or a line.
_SENTENCE = re.compile(r".*?(?:[。！？!?；;]+\s*|\.\s+|\n+|$)", re.S)


def _pieces(text: str) -> list[str]:
    return [piece for piece in _SENTENCE.findall(text) if piece.strip()]


def _hard_split(piece: str, limit: int) -> list[str]:
    tokens = encoding().encode(piece, disallowed_special=())
    parts = []
    for start in range(0, len(tokens), limit):
        parts.append(encoding().decode(tokens[start : start + limit]))
    return parts


def split_text(text: str, chunk_tokens: int = CHUNK_TOKENS, overlap: int = OVERLAP_TOKENS) -> list[str]:
    """Chunks of ``text``; empty text gives no chunks."""
    units: list[tuple[str, int]] = []
    for piece in _pieces(text):
        size = count_tokens(piece)
        if size > chunk_tokens:
            units += [(part, count_tokens(part)) for part in _hard_split(piece, chunk_tokens - overlap)]
        else:
            units.append((piece, size))
    chunks: list[str] = []
    current: list[tuple[str, int]] = []
    current_size = 0
    for unit in units:
        if current and current_size + unit[1] > chunk_tokens:
            chunks.append("".join(part for part, _ in current).strip())
            tail: list[tuple[str, int]] = []
            tail_size = 0
            for part in reversed(current):
                if tail_size + part[1] > overlap:
                    break
                tail.insert(0, part)
                tail_size += part[1]
            current, current_size = tail, tail_size
        current.append(unit)
        current_size += unit[1]
    if current:
        chunks.append("".join(part for part, _ in current).strip())
    return [chunk for chunk in chunks if chunk]

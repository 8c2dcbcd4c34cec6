"""Snapshot files (tests/snapshots/) and their token counts.

:func:`matches_snapshot` compares a text with its stored snapshot and its cl100k_base token count
with the one listed in ``tests/snapshots/TOKENS.md``, so a change that makes the prompt or the tool
schemas grow shows in review as a number. To regenerate after an intended change, run the tests
with ``UPDATE_SNAPSHOTS=1``, then review the diff by eye.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from clawlet.storage import atomic_write_text
from clawlet.tokens import count_tokens

SNAPSHOTS = Path(__file__).parent.parent / "snapshots"
TOKENS = SNAPSHOTS / "TOKENS.md"
TOKENS_HEADER = (
    "# Token counts (cl100k_base) of the snapshots in this folder\n\n"
    "Written by tests/support/snapshots.py with `UPDATE_SNAPSHOTS=1`; a change here is prompt growth.\n\n"
)
TOKEN_LINE = re.compile(r"^- `(?P<name>[^`]+)`: (?P<count>\d+) tokens$", re.M)


def recorded_tokens() -> dict[str, int]:
    """``{snapshot name: token count}`` as ``TOKENS.md`` lists them."""
    text = TOKENS.read_text(encoding="utf-8") if TOKENS.exists() else ""
    return {found["name"]: int(found["count"]) for found in TOKEN_LINE.finditer(text)}


def record_tokens(name: str, count: int) -> None:
    counts = {**recorded_tokens(), name: count}
    lines = "".join(f"- `{key}`: {counts[key]} tokens\n" for key in sorted(counts))
    atomic_write_text(TOKENS, TOKENS_HEADER + lines)


def matches_snapshot(name: str, actual: str) -> None:
    """``actual`` is snapshot ``name`` and has the token count ``TOKENS.md`` lists for it (both
    rewritten instead with ``UPDATE_SNAPSHOTS=1``); the count is printed (``pytest -s`` shows it)."""
    path = SNAPSHOTS / name
    tokens = count_tokens(actual)
    print(f"snapshot {name}: {tokens} tokens")
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, actual)
        record_tokens(name, tokens)
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{name} changed; rerun with UPDATE_SNAPSHOTS=1 and review the diff"
    assert recorded_tokens().get(name) == tokens, (
        f"{name}: rerun with UPDATE_SNAPSHOTS=1 to record its tokens"
    )

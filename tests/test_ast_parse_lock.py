"""The test process survives threads that parse source (render tracebacks) at the same time.

Without :mod:`tests.support.ast_parse_lock`, CPython 3.11.7 fails this within a few hundred parses
with ``SystemError: AST constructor recursion depth mismatch`` — the INTERNALERROR that ended a
test run on a loaded machine when a server thread logged a traceback while pytest rendered one.
"""

from __future__ import annotations

import ast
import threading
import traceback
from pathlib import Path

import pytest

from tests.support.ast_parse_lock import affected

SOURCE = Path(__file__).resolve().parents[1] / "src" / "clawlet" / "runtime" / "manager.py"


class Finalised:
    """Garbage with a finalizer: collecting it runs Python code, where the GIL can change hands."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        sum(range(50))


@pytest.mark.slow
def test_threads_parse_and_format_tracebacks_at_once_without_a_system_error() -> None:
    source = SOURCE.read_text(encoding="utf-8")
    failures: list[BaseException] = []

    def parse_and_format() -> None:
        for _ in range(100):
            for _ in range(50):
                Finalised()
            try:
                ast.parse(source)
                try:
                    raise ValueError("a traceback to render")
                except ValueError as exc:
                    traceback.format_exception(exc)  # 3.11 parses the line for its ^^^ markers
            except SystemError as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=parse_and_format) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_only_interpreters_with_the_bug_are_patched() -> None:
    assert affected((3, 11, 7))
    assert not affected((3, 11, 8))
    assert affected((3, 12, 1))
    assert not affected((3, 12, 2))
    assert not affected((3, 13, 0))

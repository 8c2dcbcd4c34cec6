"""One lock around ``ast.parse`` in the test process: a workaround for CPython gh-106905.

On CPython before 3.11.8 (3.12 before 3.12.2), the AST constructor keeps its recursion depth in
state shared by every thread. When two threads parse at once (a garbage collection between two
nodes can hand the GIL over), one of them fails with ``SystemError: AST constructor recursion depth
mismatch``. pytest parses the test's source file to render a failure while threads of the test
(uvicorn servers, proxy handlers) format tracebacks of their own, which Python 3.11's
``traceback`` does by parsing each line to place its ``^^^`` markers. On a loaded machine a single
failing test could so end the whole run with an INTERNALERROR. With every ``ast.parse`` taking the
same lock, parses take turns; fixed interpreters are left alone.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

FIXED_IN = {(3, 11): (3, 11, 8), (3, 12): (3, 12, 2)}
"""The first release of each affected line with the fix; other lines never had the bug."""


def affected(version: tuple[int, int, int]) -> bool:
    """Whether the interpreter ``version`` shares the AST constructor's depth between threads."""
    fixed = FIXED_IN.get(version[:2])
    return fixed is not None and version < fixed


def serialise_ast_parse() -> None:
    """Make ``ast.parse`` take one process-wide lock (once, and only on an affected interpreter)."""
    if not affected(sys.version_info[:3]) or getattr(ast.parse, "serialised", False):
        return
    lock = threading.RLock()  # re-entrant: a finalizer run inside a parse may parse again
    parse = ast.parse

    @functools.wraps(parse)
    def serialised_parse(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return parse(*args, **kwargs)

    serialised_parse.serialised = True  # type: ignore[attr-defined]
    ast.parse = serialised_parse

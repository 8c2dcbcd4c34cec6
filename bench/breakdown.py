"""Where a server's CPU goes, by component: a ``py-spy record --format raw`` file summed up.

Each sample is charged to the innermost frame that belongs to a known component, skipping the
standard library's frames on the way out (``re``, ``typing``, ``copy``… count for whoever called
them) except ``json`` and the transcript writes, which are components of their own. Samples whose
innermost frame is a wait (a thread pool worker or a thread waiting on a lock or queue, the event
loop in ``select``/``epoll`` or inside uvloop's C loop) are idle and left out.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")

COMPONENTS: tuple[tuple[str, str], ...] = (
    ("/langgraph/", "LangGraph"),
    ("/langchain_core/", "LangChain"),
    ("/langchain/", "LangChain"),
    ("/langchain_openai/", "LangChain"),
    ("/langchain_deepseek/", "LangChain"),
    ("/langsmith/", "LangChain"),
    ("/pydantic/", "pydantic"),
    ("/pydantic_core/", "pydantic"),
    ("/openai/", "openai SDK"),
    ("/httpx/", "HTTP client (httpx, httpcore, anyio)"),
    ("/httpx2/", "HTTP client (httpx, httpcore, anyio)"),
    ("/httpcore2/", "HTTP client (httpx, httpcore, anyio)"),
    ("/httpcore/", "HTTP client (httpx, httpcore, anyio)"),
    ("/anyio/", "HTTP client (httpx, httpcore, anyio)"),
    ("/h11/", "HTTP client (httpx, httpcore, anyio)"),
    ("/starlette/", "web stack (uvicorn, starlette, FastAPI)"),
    ("/fastapi/", "web stack (uvicorn, starlette, FastAPI)"),
    ("/uvicorn/", "web stack (uvicorn, starlette, FastAPI)"),
    ("/clawlet/storage.py", "transcript and file writes (fsync)"),
    ("/clawlet/sessions/store.py", "transcript and file writes (fsync)"),
    ("/clawlet/", "clawlet's own"),
    ("/json/", "json"),
)
IDLE = re.compile(
    r"^(wait|get|_worker|select|poll|_run_once|run_forever|run_until_complete|Runner\.run|"
    r"Condition\.wait|Queue\.get|Event\.wait|Thread\.join)$"
)
EVENT_LOOP = "event loop (asyncio, uvloop)"


def component(function: str, file: str) -> str | None:
    """The component of one frame, ``None`` for a standard-library frame (charged to its caller).
    ``file`` is a full path (``py-spy --full-filenames``)."""
    stdlib = re.search(r"/lib/python3\.\d+/(?!site-packages/)(.*)", file)
    relative = stdlib[1] if stdlib else file.split("/site-packages/")[-1]
    path = "/" + relative.lstrip("/")
    for marker, name in COMPONENTS:
        if marker in path:
            return name
    top = path.strip("/").split("/")[0].removesuffix(".py")
    if top in ("asyncio", "uvloop"):
        return EVENT_LOOP
    if stdlib or top in sys.stdlib_module_names or top.startswith("<"):
        return None
    return f"other: {top}"


def breakdown(raw: Path) -> tuple[Counter[str], int]:
    """``(samples per component, idle samples)`` of a py-spy raw file."""
    busy: Counter[str] = Counter()
    idle = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [FRAME.match(frame) for frame in stack.split(";")]
        parsed = [(match["function"], match["file"]) for match in frames if match is not None]
        if not parsed:
            continue
        leaf_function = parsed[-1][0].rsplit(" ", 1)[-1]
        if IDLE.match(leaf_function) or IDLE.match(parsed[-1][0]):
            idle += count
            continue
        for function, file in reversed(parsed):
            name = component(function, file)
            if name is not None:
                busy[name] += count
                break
        else:
            busy["other (standard library)"] += count
    return busy, idle


def print_breakdown(raw: Path, title: str) -> None:
    busy, idle = breakdown(raw)
    total = sum(busy.values())
    print(f"\n{title}: {total} busy samples ({idle} idle left out)")
    for name, count in busy.most_common():
        print(f"  {count * 100 / max(total, 1):5.1f}%  {name}")

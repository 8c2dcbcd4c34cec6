"""Wall-clock marks in a ``clawlet serve`` process, for ``bench/ttft_marks.py``.

With this directory on ``PYTHONPATH`` and ``BENCH_MARKS_FILE`` set, the server appends a line
``<mark> <time.perf_counter()>`` to that file at each step of a turn on its way to the first token:
the request's first bytes, ``start_turn``, the user message's write, the engine's stream, the model
call, the request to the model and its headers, each chunk parsed, the engine's first text, the
first text a watcher gets and the first text uvicorn sends. ``perf_counter`` is the system's
monotonic clock, the same in every process, so the marks line up with the client's. Each patch is
applied when its module is first imported; a name that no longer exists is skipped (its marks are
missing from the report). Other interpreters are left alone.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

_FILE = os.environ.get("BENCH_MARKS_FILE", "")


def mark(name: str) -> None:
    os.write(_FD, f"{name} {time.perf_counter()}\n".encode())


def _wrap_async(owner: Any, attribute: str, before: str | None = None, after: str | None = None) -> None:
    original = getattr(owner, attribute, None)
    if original is None:
        return

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before:
            mark(before)
        result = await original(*args, **kwargs)
        if after:
            mark(after)
        return result

    setattr(owner, attribute, wrapped)


def _first_text(owner: Any, attribute: str, name: str, entry: str | None = None) -> None:
    """Wrap the async generator method ``attribute``: ``name`` at its first ``TextDelta``."""
    original = getattr(owner, attribute, None)
    if original is None:
        return

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        from clawlet.events import TextDelta

        if entry:
            mark(entry)
        first = True
        async for event in original(*args, **kwargs):
            if first and isinstance(event, TextDelta):
                first = False
                mark(name)
            yield event

    setattr(owner, attribute, wrapped)


def _manager(module: Any) -> None:
    _wrap_async(module.SessionManager, "start_turn", before="start_turn")
    _first_text(module.Run, "events", "a watcher gets the text")


def _store(module: Any) -> None:
    original = module.TranscriptStore.append

    def append(*args: Any, **kwargs: Any) -> Any:
        mark("transcript write starts")
        result = original(*args, **kwargs)
        mark("transcript write ends")
        return result

    module.TranscriptStore.append = append


def _agent(module: Any) -> None:
    _first_text(module.AgentEngine, "stream", "the engine yields the text", entry="engine stream")


def _run_caps(module: Any) -> None:
    _wrap_async(module.RunCaps, "awrap_model_call", before="model call (first middleware)")


def _openai_stream(module: Any) -> None:
    _wrap_async(module.PlainChunkCompletions, "create", before="request to the model", after="model headers")
    _wrap_async(module.PlainChunkStream, "__anext__", after="a chunk parsed")


def _uvicorn(module: Any) -> None:
    protocol = getattr(module, "HttpToolsProtocol", None) or getattr(module, "H11Protocol", None)
    if protocol is not None:
        received = protocol.data_received

        def data_received(self: Any, data: bytes) -> None:
            if data[:5] == b"POST ":
                mark("request bytes")
            received(self, data)

        protocol.data_received = data_received
    cycle = getattr(module, "RequestResponseCycle", None)
    if cycle is not None:
        send = cycle.send

        async def sending(self: Any, message: Any) -> None:
            if message.get("type") == "http.response.body" and not getattr(self, "_bench_text_sent", False):
                body = bytes(message.get("body", b"")).replace(b" ", b"")
                if b'"content":"' in body and b'"content":""' not in body:
                    self._bench_text_sent = True
                    mark("text sent")
            await send(self, message)

        cycle.send = sending


PATCHES: dict[str, Callable[[Any], None]] = {
    "clawlet.runtime.manager": _manager,
    "clawlet.sessions.store": _store,
    "clawlet.engine.agent": _agent,
    "clawlet.engine.run_caps": _run_caps,
    "clawlet.llm.openai_stream": _openai_stream,
    "uvicorn.protocols.http.httptools_impl": _uvicorn,
    "uvicorn.protocols.http.h11_impl": _uvicorn,
}


class _Patcher(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a patched module through the other finders and patches it once it has run."""

    def __init__(self) -> None:
        self.loaders: dict[str, importlib.abc.Loader] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in PATCHES or fullname in self.loaders:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self.loaders[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self.loaders[spec.name].create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loaders[module.__name__].exec_module(module)  # type: ignore[attr-defined]
        with contextlib.suppress(AttributeError):  # renamed since: its marks are missing
            PATCHES[module.__name__](module)


def _is_clawlet_serve() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except OSError:
        return False
    return b"clawlet" in words and b"serve" in words


if _FILE and _is_clawlet_serve():
    _FD = os.open(_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.meta_path.insert(0, _Patcher())

"""LangSmith's per-hook bookkeeping run inline while tracing is off (it is, unless configured).

``create_agent`` wraps every middleware's ``awrap_model_call``/``awrap_tool_call`` in LangSmith's
``traceable``, which sets a span up and ends it on a worker thread (``run_in_executor``) even when
nothing is traced: two thread hops per middleware per model call (about ten before every model
request here), and a task per hop. With tracing off that work is a few dictionary look-ups, so
:func:`install` has LangSmith run it in place, through its documented hook
(``langsmith.set_runtime_overrides``); while tracing is on, it goes to the thread as before.
An override someone else installed is left alone.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import langsmith
from langsmith import utils as langsmith_utils
from langsmith._runtime_overrides import get_runtime_overrides


async def inline_when_untraced(
    default: Callable[..., Awaitable[Any]],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """LangSmith's ``aio_to_thread``: ``func`` in ``ctx`` right here unless tracing is on."""
    if ctx.run(langsmith_utils.tracing_is_enabled):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def install() -> None:
    """Install :func:`inline_when_untraced` (idempotent; another override is kept)."""
    if get_runtime_overrides().aio_to_thread is None:
        langsmith.set_runtime_overrides(aio_to_thread=inline_when_untraced)

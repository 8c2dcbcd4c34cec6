"""What a turn does once its model request is out, while the model works on the answer.

A turn runs a callback (the write of its user message, :mod:`clawlet.runtime.user_message`)
within :func:`while_the_model_thinks`. A model's HTTP client with :func:`install` calls it once
the request has been sent, as the client starts waiting for the response's headers: the event
loop has nothing else to do then (a model takes milliseconds to seconds to answer), so work that
would have waited before the request (two fsyncs) overlaps the model's own time instead of adding
to it. The callback runs on the loop, in the task that sent the request, and must not raise; it
is called at every request of the turn (make it do its work once). A model without such a client
(the demo model, another SDK) never calls it: :func:`traces_requests` tells, so a turn on such a
model does the work before it starts instead.

The hook is httpcore's ``trace`` request extension, attached to the turn's requests by an httpx
``request`` event hook (both public API of httpx and of the ``httpx2`` fork the openai SDK uses);
requests outside a turn are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

HEADERS_AWAITED = "receive_response_headers.started"
"""The end of the trace event httpcore emits once the request is sent (``http11.``/``http2.``)."""

_pending: ContextVar[Callable[[], None] | None] = ContextVar("clawlet_while_the_model_thinks", default=None)


@contextmanager
def while_the_model_thinks(callback: Callable[[], None]) -> Iterator[None]:
    """Within this block (and the tasks started in it), ``callback`` runs whenever a request of an
    installed client has been sent."""
    token = _pending.set(callback)
    try:
        yield
    finally:
        _pending.reset(token)


async def _trace(event_name: str, info: dict[str, Any]) -> None:
    if event_name.endswith(HEADERS_AWAITED):
        callback = _pending.get()
        if callback is not None:
            callback()


async def _attach_trace(request: Any) -> None:
    if _pending.get() is not None and "trace" not in request.extensions:
        request.extensions["trace"] = _trace


def _client_of(model: Any) -> Any:
    """The httpx client under a LangChain OpenAI-compatible model (the SDK's, private), or None."""
    return getattr(getattr(model, "root_async_client", None), "_client", None)


def traces_requests(model: Any) -> bool:
    """Whether ``model``'s HTTP client is installed (its requests run the pending callback)."""
    hooks = getattr(_client_of(model), "event_hooks", None)
    return isinstance(hooks, dict) and _attach_trace in hooks.get("request", ())


def install_on(model: Any) -> bool:
    """:func:`install` on ``model``'s HTTP client (False: it has none this module knows)."""
    return install(_client_of(model))


def install(client: Any) -> bool:
    """Make ``client`` (an httpx ``AsyncClient``: the openai SDK's is ``httpx2``'s, the same API)
    call the pending callback once each request is out; False (nothing done) for anything else."""
    hooks = getattr(client, "event_hooks", None)
    if not isinstance(hooks, dict) or not isinstance(hooks.get("request"), list):
        return False
    if _attach_trace not in hooks["request"]:
        client.event_hooks = {**hooks, "request": [*hooks["request"], _attach_trace]}
    return True

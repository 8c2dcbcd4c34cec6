"""What every clawlet HTTP server is started with: ``clawlet serve``, its separate gateway port, the
control plane, and the test and bench servers that stand in for them.

``uvicorn_options()`` gives the event loop (see :mod:`clawlet.aio`) and the keep-alive timeout;
:data:`GRACEFUL_SHUTDOWN_SECONDS` is how long ``clawlet serve`` and the control plane let open streams
finish on shutdown.

Keep-alive: an idle connection stays open :data:`KEEP_ALIVE_SECONDS`. uvicorn's default, 5 s, is
exactly httpx's ``keepalive_expiry`` (which the OpenAI SDKs and LangChain use), so a client that
reuses a connection just under 5 s idle can meet the server's timer closing it: on a busy server,
where one loop iteration can take tens of milliseconds, the request is lost with "Server
disconnected without sending a response". A server that keeps connections open longer than its
clients do never closes one under a client's request (nginx's default is the same 75 s).
"""

from __future__ import annotations

from typing import Any, Final

from clawlet import aio

#: Seconds an idle keep-alive connection stays open: longer than common clients keep theirs
#: (httpx and the OpenAI SDKs 5 s, Node's fetch 4 s, aiohttp 15 s).
KEEP_ALIVE_SECONDS: Final = 75

#: On SIGTERM / Ctrl+C, open streams get this long to finish; then they are closed and running
#: turns are cancelled (their partial output is saved) instead of keeping the process alive.
GRACEFUL_SHUTDOWN_SECONDS: Final = 3


def uvicorn_options() -> dict[str, Any]:
    """Options for ``uvicorn.Config``/``uvicorn.run`` that every clawlet server shares."""
    return {"loop": aio.uvicorn_loop(), "timeout_keep_alive": KEEP_ALIVE_SECONDS}

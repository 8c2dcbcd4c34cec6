"""Refuse JSON request bodies holding a lone UTF-16 surrogate, before any route sees them.

JSON can spell a surrogate that is not half of a pair (``"x\\ud800"``, or the raw bytes ``ED A0 80``,
which Python's JSON decoder lets through), and Python then carries it as a ``str`` that cannot be
encoded: the first write to a file, a log line, SQLite, tiktoken or a model provider raised
``UnicodeEncodeError`` (a 500, and the client's keep-alive connection dropped). Such text is never
valid Unicode, so it is refused here, once, for every surface: the workbench, the inbox and the
native endpoint answer ``422 invalid_request``, ``/v1`` OpenAI's 400, naming the field.

Query strings, paths and headers cannot carry one (they are decoded with replacement characters or
as Latin-1), and ``PUT /process`` takes a document's raw bytes, decoded strictly: only JSON bodies
are checked. Most bodies hold no ``\\uD8..``-``\\uDF..`` escape and no ``ED A0``-``ED BF`` byte
pair at all and pass on a byte scan; the rest are decoded once more to find the field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clawlet.api.errors import invalid_request

#: What a surrogate looks like in JSON bytes: an escape ``\uD800``-``\uDFFF`` or its UTF-8-style bytes.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
#: A surrogate code point in a decoded ``str``: never half of a pair there (the decoder joins an
#: escaped pair into one character), so never encodable.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: Paths whose body is not a JSON request (a document's bytes), left to their route.
_RAW_BODY_PATHS = frozenset({"/process"})


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` is one FastAPI decodes as JSON (``*/json`` or ``*/*+json``)."""
    subtype = (content_type or "").split(";", 1)[0].strip().lower().rpartition("/")[2]
    return subtype == "json" or subtype.endswith("+json")


def field_with_lone_surrogate(body: bytes) -> str | None:
    """The dotted path of the first string (or key) in a JSON body that holds a lone surrogate,
    ``"body"`` for a bare string, or ``None`` when there is none (or the body is not valid JSON,
    which the route refuses itself)."""
    utf8 = b"\x00" not in body[:4]  # UTF-16 and UTF-32 JSON (also accepted) has one there
    if utf8 and not _MAYBE_SURROGATE.search(body):
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    pending: list[tuple[Any, tuple[str, ...]]] = [(document, ())]
    while pending:  # iterative: a document json accepted may nest deeper than Python recurses
        value, path = pending.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return ".".join(path) or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):  # named with the surrogate escaped, so it can be sent
                    return ".".join((*path, key.encode("utf-8", "backslashreplace").decode("utf-8")))
                pending.append((item, (*path, key)))
        elif isinstance(value, list):
            pending.extend((item, (*path, str(index))) for index, item in enumerate(value))
    return None


class RefuseLoneSurrogates:
    """ASGI middleware: a JSON request body with a lone surrogate gets the surface's
    invalid-request answer; any other request reaches the app with its body unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path in _RAW_BODY_PATHS
            or not is_json(Headers(scope=scope).get("content-type"))
        ):
            await self.app(scope, receive, send)
            return
        body, end = await _read_body(receive)
        field = field_with_lone_surrogate(body)
        if field is not None:
            message = "a lone UTF-16 surrogate (e.g. \\ud800) is not valid Unicode text"
            await invalid_request(path, [{"field": field, "message": message}])(scope, receive, send)
            return
        await self.app(scope, _replay(body, end, receive), send)


async def _read_body(receive: Receive) -> tuple[bytes, Message | None]:
    """The whole request body, and the message that ended it early (a disconnect), if any."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), None


def _replay(body: bytes, end: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the server's own messages."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            if end is not None:
                return end
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay

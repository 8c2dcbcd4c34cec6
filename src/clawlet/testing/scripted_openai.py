"""A scripted OpenAI-compatible chat-completions server for tests and benchmarks.

``ScriptedOpenAIServer`` is a real HTTP server (Starlette on uvicorn, in a background thread,
bound to a free port on 127.0.0.1). ``POST /v1/chat/completions`` answers from a *script*: a list
of :class:`Turn` consumed in order, or a callable that picks the turn from the request body.
Every request body is recorded in :attr:`ScriptedOpenAIServer.requests` so tests can check the
system prompt, the messages and the tool schemas a client sent, and its ``Authorization`` header in
:attr:`ScriptedOpenAIServer.authorizations` (the API key it sent).

Streaming answers follow OpenAI's wire format closely: every chunk carries the same ``id``,
``created`` and ``model``; the first delta has ``role: "assistant"``; text arrives as several
``content`` deltas; each tool call starts with a delta holding ``index``, ``id``, ``type``,
``function.name`` and an empty ``arguments`` string, then its arguments JSON arrives in pieces;
the last choice chunk has ``finish_reason`` ``"stop"`` or ``"tool_calls"``; a usage chunk
follows when ``stream_options.include_usage`` is true; the stream ends with ``data: [DONE]``.
``stream: false`` gets an ordinary ``chat.completion`` body. The server runs with the options every
clawlet server has (``clawlet.serving``: the event loop ``CLAWLET_EVENT_LOOP`` chooses, keep-alive
longer than its clients') and sends every chunk at once (``TCP_NODELAY``).

Example::

    with ScriptedOpenAIServer([text_turn("Hello!")]) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="x")
        ...
        assert llm.requests[0]["messages"][0]["role"] == "system"
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from clawlet.serving import uvicorn_options
from clawlet.testing.prompt_server import PromptServer

__all__ = [
    "Script",
    "ScriptExhausted",
    "ScriptedOpenAIServer",
    "ToolCall",
    "Turn",
    "split_text",
    "stream_deltas",
    "text_turn",
    "tool_turn",
]

JSONDict = dict[str, Any]
HOLD_LIMIT_SECONDS = 120.0
"""The longest a held answer (``Turn.hold``) waits: a test that forgets to release it still ends."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model makes; ``arguments`` is a dict or a raw JSON string."""

    name: str
    arguments: JSONDict | str = field(default_factory=dict)
    id: str | None = None
    #: How many deltas carry the arguments JSON (after the first, name-carrying delta).
    argument_chunks: int = 3

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class Turn:
    """One scripted answer: text, tool calls, or text followed by tool calls.

    ``chunks`` is how many content deltas the text is streamed in (default: about one per word);
    ``delay`` is the pause in seconds before every chunk after the first (for benchmarks);
    ``hold``, when given, keeps the answer back until the test sets it (a request kept in flight).
    """

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    chunks: int | None = None
    delay: float = 0.0
    reasoning: str = ""  # streamed first as DeepSeek-style ``reasoning_content`` deltas
    hold: threading.Event | None = None
    finish: str = ""  # another finish_reason than the usual one (``length``: cut at max_tokens)
    frames: Sequence[JSONDict] = ()
    """Streamed as they are instead of the chunks built from the fields above (then ``[DONE]``):
    an upstream's odd shapes (a choice without a delta, usage details, logprobs, an error)."""

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.tool_calls else "stop")


Script = Sequence[Turn] | Callable[[JSONDict], Turn]


def text_turn(text: str, *, chunks: int | None = None, delay: float = 0.0) -> Turn:
    """A plain text answer."""
    return Turn(text=text, chunks=chunks, delay=delay)


def tool_turn(*calls: ToolCall, text: str = "", delay: float = 0.0) -> Turn:
    """An answer that calls tools, optionally after some text."""
    return Turn(text=text, tool_calls=tuple(calls), delay=delay)


def split_text(text: str, parts: int | None = None) -> list[str]:
    """Split ``text`` into pieces that join back to it exactly.

    With ``parts`` the pieces are near-equal in length (never more pieces than characters);
    without, text with spaces is split after each word and text without (e.g. Chinese) into
    pairs of characters.
    """
    if not text:
        return []
    if parts is not None:
        count = max(1, min(parts, len(text)))
        size, extra = divmod(len(text), count)
        pieces: list[str] = []
        start = 0
        for index in range(count):
            end = start + size + (1 if index < extra else 0)
            pieces.append(text[start:end])
            start = end
        return pieces
    words: list[str] = re.findall(r"\S+\s*|\s+", text)
    if len(words) > 1:
        return words
    return [text[i : i + 2] for i in range(0, len(text), 2)]


def _estimate_tokens(value: object) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


class ScriptExhausted(LookupError):
    """A request arrived after the last scripted turn was used."""


class ScriptedOpenAIServer:
    """A real OpenAI-compatible HTTP server on loopback that answers from a script."""

    def __init__(
        self,
        script: Script = (),
        *,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        embed: Callable[[str], list[float]] | None = None,
    ) -> None:
        self.model = model
        self.embed = embed
        self.embedding_requests: list[JSONDict] = []
        self.host = host
        self._requested_port = port
        self.requests: list[JSONDict] = []
        self.usages: list[JSONDict] = []
        """The ``usage`` of each answered chat request, in order (a streamed answer sends it only when
        the request asks with ``stream_options.include_usage``)."""
        self.authorizations: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._script: Script = script
        self._cursor = 0
        self._socket: socket.socket | None = None
        self._server: PromptServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            ]
        )

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (ends in ``/v1``)."""
        return f"{self.url}/v1"

    def start(self, timeout: float = 20.0) -> ScriptedOpenAIServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        options = uvicorn_options()  # before the socket: a bad CLAWLET_EVENT_LOOP leaks nothing
        # IPPROTO_TCP (not 0) lets asyncio's transport set TCP_NODELAY on each accepted socket, and
        # the listener's own TCP_NODELAY is inherited by them on Linux: without it, asyncio's loop
        # leaves Nagle's algorithm on, which may hold a small chunk until the last one is ACKed.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self._requested_port))
        self.port = int(sock.getsockname()[1])
        self._socket = sock
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", **options)
        server = PromptServer(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="scripted-openai", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError("scripted OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._socket is not None:
            self._socket.close()
        self._server = None
        self._thread = None
        self._socket = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- script ----------------------------------------------------------------------------------

    def set_script(self, script: Script) -> None:
        """Replace the script (and restart it from its first turn)."""
        with self._lock:
            self._script = script
            self._cursor = 0

    @property
    def remaining_turns(self) -> int | None:
        """Unused turns left in a list script; ``None`` for a callable script."""
        with self._lock:
            if callable(self._script):
                return None
            return len(self._script) - self._cursor

    def _next_turn(self, body: JSONDict) -> Turn:
        with self._lock:
            self.requests.append(body)
            script = self._script
            if callable(script):
                decide = script
            else:
                if self._cursor >= len(script):
                    message = f"script exhausted: request #{len(self.requests)} has no scripted turn"
                    self.errors.append(message)
                    raise ScriptExhausted(message)
                turn = script[self._cursor]
                self._cursor += 1
                return turn
        return decide(body)

    # -- HTTP ------------------------------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _embeddings(self, request: Request) -> Response:
        """OpenAI's embeddings API, answered by the ``embed`` function given at construction."""
        if self.embed is None:
            return _error(404, "this scripted server has no embed function")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        inputs = body.get("input") if isinstance(body, dict) else None
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(item, str) for item in inputs):
            return _error(400, "input must be a string or a list of strings")
        with self._lock:
            self.embedding_requests.append(body)
        data = [
            {"object": "embedding", "index": index, "embedding": self.embed(text)}
            for index, text in enumerate(inputs)
        ]
        return JSONResponse({"object": "list", "data": data, "model": body.get("model", ""), "usage": {}})

    async def _chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        with self._lock:
            self.authorizations.append(request.headers.get("authorization", ""))
        try:
            turn = self._next_turn(body)
        except ScriptExhausted as exc:
            return _error(500, str(exc), "server_error")
        except Exception as exc:  # a broken callable script should show up as a clear error
            message = f"script callable failed: {type(exc).__name__}: {exc}"
            with self._lock:
                self.errors.append(message)
            return _error(500, message, "server_error")
        if turn.hold is not None:
            await asyncio.to_thread(turn.hold.wait, HOLD_LIMIT_SECONDS)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        model = str(body.get("model") or self.model)
        usage = {
            "prompt_tokens": _estimate_tokens(body.get("messages", [])),
            "completion_tokens": _estimate_tokens([turn.text, [c.arguments_json() for c in turn.tool_calls]]),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.usages.append(usage)
        if not body.get("stream"):
            return JSONResponse(_completion_body(turn, completion_id, created, model, usage))
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        frames = _stream_frames(turn, completion_id, created, model, usage if include_usage else None)
        return StreamingResponse(
            frames, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}, status_code=status
    )


def _tool_call_body(call: ToolCall, index: int) -> JSONDict:
    return {
        "id": call.id or f"call_{index}_{uuid.uuid4().hex[:16]}",
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json()},
    }


def _completion_body(turn: Turn, completion_id: str, created: int, model: str, usage: JSONDict) -> JSONDict:
    message: JSONDict = {"role": "assistant", "content": turn.text or None, "refusal": None}
    if turn.tool_calls:
        message["tool_calls"] = [_tool_call_body(call, i) for i, call in enumerate(turn.tool_calls)]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": turn.finish_reason}],
        "usage": usage,
    }


def stream_deltas(turn: Turn) -> list[tuple[JSONDict, str | None]]:
    """The ``(delta, finish_reason)`` pairs of one streamed turn, in order."""
    deltas: list[JSONDict] = []
    text_pieces = split_text(turn.text, turn.chunks)
    reasoning_pieces = split_text(turn.reasoning)
    if text_pieces or reasoning_pieces:
        deltas.append({"role": "assistant", "content": "", "refusal": None})
        deltas.extend({"content": None, "reasoning_content": piece} for piece in reasoning_pieces)
        deltas.extend({"content": piece} for piece in text_pieces)
    for index, call in enumerate(turn.tool_calls):
        body = _tool_call_body(call, index)
        first: JSONDict = {
            "index": index,
            "id": body["id"],
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        head: JSONDict = {"tool_calls": [first]}
        if not deltas:
            head = {"role": "assistant", "content": None, "refusal": None, **head}
        deltas.append(head)
        for piece in split_text(call.arguments_json(), call.argument_chunks):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if not deltas:  # an empty answer still opens with the assistant role
        deltas.append({"role": "assistant", "content": "", "refusal": None})
    pairs: list[tuple[JSONDict, str | None]] = [(delta, None) for delta in deltas]
    pairs.append(({}, turn.finish_reason))
    return pairs


async def _stream_frames(
    turn: Turn, completion_id: str, created: int, model: str, usage: JSONDict | None
) -> AsyncIterator[str]:
    base: JSONDict = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
    }
    if turn.frames:
        for frame in turn.frames:
            yield _data(frame)
        yield "data: [DONE]\n\n"
        return
    for position, (delta, finish_reason) in enumerate(stream_deltas(turn)):
        if position and turn.delay > 0:
            await asyncio.sleep(turn.delay)
        chunk: JSONDict = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if usage is not None:
            chunk["usage"] = None
        yield _data(chunk)
    if usage is not None:
        yield _data({**base, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


def _data(payload: JSONDict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

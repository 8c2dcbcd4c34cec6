"""A scriptable control plane: a real ``websockets`` server on 127.0.0.1 for execution-plane tests.

It serves ``/ws/vm`` the way :mod:`clawlet.cluster.protocol` says the control plane must: the first
frame must be ``auth``; the JWT is checked with :func:`~clawlet.controlplane.auth.verify_vm_token` (its
``sub`` must be the URL's ``user_id``); a ticket in the URL is redeemed once through a
:class:`~clawlet.controlplane.auth.TicketStore`; then ``init`` goes out with the user's API keys. Refusals
are an ``error`` frame followed by a close with code 4401.

Scripting:

* ``plane.methods[name]`` answers requests: a value, a callable ``(params) -> value`` (sync or async),
  a :class:`Reply` (``result``/``error`` after ``delay``), or :data:`NEVER` (never answered);
  unknown methods get an ``unknown_method`` error.
* ``plane.resume_results`` answers ``resume``: a dict ``{id: result}``, or a callable
  ``(pending_ids) -> dict``; by default requests the plane answered (even on a dropped connection)
  are ``completed`` and the rest ``lost``. ``answer_resume = False`` never answers.
* :meth:`ScriptedControlPlane.start_session`, :meth:`user_message`, :meth:`cancel`,
  :meth:`stop_session` and :meth:`send` push frames to the latest connection;
  ``conn.drop()`` kills a socket, :meth:`stop`/:meth:`start` restart the server on the same port,
  ``refusal``/``http_status`` refuse connections.

Every frame each side sent is recorded per connection. ``fire_and_forget`` records are de-duplicated
by ``id`` and ``sse_event`` by ``(stream, session_id, seq)`` the way a real control plane must, so
tests can check both what arrived and what a de-duplicating control plane keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from clawlet.cluster.protocol import (
    CLOSE_UNAUTHORIZED,
    ERR_AUTH_REQUIRED,
    ERR_TICKET_REJECTED,
    ERR_TOKEN_INVALID,
    ERR_UNKNOWN_METHOD,
    EVENT_ENCODING,
    INIT_EVENT_ENCODING,
    QUERY_TICKET,
    QUERY_USER_ID,
    WS_PATH,
    ResumeResult,
    cancel_frame,
    completed,
    encode,
    error_frame,
    error_response_frame,
    init_frame,
    lost,
    response_frame,
    resume_response_frame,
    start_session_frame,
    stop_session_frame,
    user_message_frame,
)
from clawlet.controlplane.auth import (
    TicketRejected,
    TicketStore,
    TokenRejected,
    issue_vm_token,
    verify_vm_token,
)
from tests.support.scripted_ws import ScriptedWsServer

SECRET = "test-secret-for-vm-tokens-0123456789abcdef"


class _Never:
    def __repr__(self) -> str:
        return "NEVER"


NEVER: Any = _Never()
"""A ``methods`` entry that is never answered."""


@dataclass
class Reply:
    """A scripted answer: ``result`` (or ``error=(code, message)``) after ``delay`` seconds."""

    result: Any = None
    error: tuple[str, str] | None = None
    delay: float = 0.0


class VmConnection:
    """One execution-plane connection as the control plane saw it."""

    def __init__(self, plane: ScriptedControlPlane, ws: ServerConnection, index: int) -> None:
        self.plane = plane
        self.ws = ws
        self.index = index
        self.path = ws.request.path if ws.request is not None else ""
        query = parse_qs(urlsplit(self.path).query)
        self.user_id: str | None = query[QUERY_USER_ID][0] if query.get(QUERY_USER_ID) else None
        self.ticket: str | None = query[QUERY_TICKET][0] if query.get(QUERY_TICKET) else None
        self.received: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.raw_received: list[str] = []
        self.authenticated = False
        self.refused: str | None = None
        """The error code this connection was refused with."""
        self.closed = asyncio.Event()
        self.tasks: set[asyncio.Task[Any]] = set()

    async def send(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(encode(frame))

    async def send_raw(self, text: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(text)

    def drop(self) -> None:
        """Kill the socket without a closing handshake."""
        self.ws.transport.abort()

    async def close(self, code: int = 1001, reason: str = "going away") -> None:
        await self.ws.close(code, reason)

    def spawn(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.plane.errors.append(task.exception())

    def frames(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]


class ScriptedControlPlane(ScriptedWsServer):
    """A fake control plane on 127.0.0.1 (ephemeral port, kept across :meth:`stop`/:meth:`start`)."""

    noun = "scripted control plane"

    def __init__(
        self,
        *,
        secret: str = SECRET,
        tickets: TicketStore | None = None,
        api_keys: dict[str, str] | None = None,
        auth_timeout: float = 5.0,
    ) -> None:
        super().__init__()
        self.secret = secret
        self.tickets = tickets if tickets is not None else TicketStore()
        self.api_keys = api_keys if api_keys is not None else {"openai": "sk-test-openai-key"}
        self.init_extra: dict[str, Any] = {"org_id": "org-1", INIT_EVENT_ENCODING: EVENT_ENCODING}
        self.auth_timeout = auth_timeout
        self.methods: dict[str, Any] = {}
        self.resume_results: (
            dict[str, ResumeResult] | Callable[[list[str]], dict[str, ResumeResult]] | None
        ) = None
        self.answer_resume = True
        self.refusal: tuple[str, str] | None = None
        """When set, every connection is refused (after ``auth``) with this ``(code, message)``."""
        self.http_status: int | None = None
        """When set, every opening handshake is answered with this HTTP status."""
        self.require_ticket = False
        """Refuse connections without a ticket (no reconnects)."""
        self.connections: list[VmConnection] = []
        self.answered: dict[str, Any] = {}
        """Results the plane produced, by request id (delivered or not): the default resume data."""
        self.fire_and_forget: list[dict[str, Any]] = []
        """De-duplicated ``fire_and_forget`` frames, in arrival order."""
        self.duplicate_records = 0
        self.sse_events: list[dict[str, Any]] = []
        """De-duplicated ``sse_event`` frames, in arrival order."""
        self.duplicate_sse = 0
        self._seen_records: set[str] = set()
        self._sse_last: dict[tuple[str, str], int] = {}
        self._changed = asyncio.Condition()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{WS_PATH}"

    # -- credentials ------------------------------------------------------------------------

    def issue_ticket(self, user_id: str) -> str:
        return self.tickets.issue(user_id)

    def issue_token(self, user_id: str, ttl: float = 3600, **kwargs: Any) -> str:
        return issue_vm_token(user_id, self.secret, ttl, **kwargs)

    # -- observations -----------------------------------------------------------------------

    @property
    def authenticated(self) -> list[VmConnection]:
        return [c for c in self.connections if c.authenticated]

    @property
    def latest(self) -> VmConnection:
        return self.authenticated[-1]

    @property
    def received(self) -> list[dict[str, Any]]:
        return [frame for conn in self.connections for frame in conn.received]

    def frames(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked whenever a frame or connection arrives)."""

        async def check() -> Any:
            async with self._changed:
                while True:
                    value = predicate()
                    if value:
                        return value
                    await self._changed.wait()

        return await asyncio.wait_for(check(), timeout)

    async def wait_connections(self, count: int, timeout: float = 5.0) -> VmConnection:
        """Wait for the ``count``-th authenticated connection and return it."""
        await self.wait_for(lambda: len(self.authenticated) >= count, timeout)
        return self.authenticated[count - 1]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- pushing frames ---------------------------------------------------------------------

    async def send(self, frame: dict[str, Any]) -> None:
        await self.latest.send(frame)

    async def start_session(self, session_id: str, **data: Any) -> None:
        await self.send(dict(start_session_frame({"session_id": session_id, **data})))

    async def stop_session(self, session_id: str) -> None:
        await self.send(dict(stop_session_frame(session_id)))

    async def user_message(self, session_id: str, data: dict[str, Any]) -> None:
        await self.send(dict(user_message_frame(session_id, data)))

    async def cancel(self, session_id: str) -> None:
        await self.send(dict(cancel_frame(session_id)))

    # -- the protocol -----------------------------------------------------------------------

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if urlsplit(request.path).path != WS_PATH:
            return connection.respond(404, "not found\n")
        if self.http_status is not None:
            return connection.respond(self.http_status, "refused\n")
        return None

    async def _refuse(self, conn: VmConnection, code: str, message: str) -> None:
        conn.refused = code
        await conn.send(dict(error_frame(code, message)))
        with contextlib.suppress(ConnectionClosed):
            await conn.ws.close(CLOSE_UNAUTHORIZED, code)

    async def _handle(self, ws: ServerConnection) -> None:
        conn = VmConnection(self, ws, len(self.connections))
        self.connections.append(conn)
        await self._notify()
        try:
            if await self._authenticate(conn):
                await self._notify()
                async for raw in ws:
                    frame = self._record(conn, raw)
                    if frame is not None:
                        await self._on_frame(conn, frame)
                        await self._notify()
        except ConnectionClosed:
            pass
        finally:
            conn.closed.set()
            await self._notify()

    def _record(self, conn: VmConnection, raw: str | bytes) -> dict[str, Any] | None:
        text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        conn.raw_received.append(text)
        try:
            frame = json.loads(text)
        except ValueError:
            return None
        if not isinstance(frame, dict):
            return None
        conn.received.append(frame)
        return frame

    async def _authenticate(self, conn: VmConnection) -> bool:
        try:
            raw = await asyncio.wait_for(conn.ws.recv(), self.auth_timeout)
        except TimeoutError:
            await self._refuse(conn, ERR_AUTH_REQUIRED, "no auth frame")
            return False
        frame = self._record(conn, raw)
        if frame is None or frame.get("type") != "auth" or not isinstance(frame.get("token"), str):
            await self._refuse(conn, ERR_AUTH_REQUIRED, "the first frame must be auth")
            return False
        if not conn.user_id:
            await self._refuse(conn, ERR_AUTH_REQUIRED, "user_id missing from the URL")
            return False
        try:
            verify_vm_token(frame["token"], self.secret, user_id=conn.user_id)
        except TokenRejected as exc:
            await self._refuse(conn, ERR_TOKEN_INVALID, str(exc))
            return False
        if conn.ticket is not None:
            try:
                self.tickets.redeem(conn.ticket, conn.user_id)
            except TicketRejected as exc:
                await self._refuse(conn, ERR_TICKET_REJECTED, str(exc))
                return False
        elif self.require_ticket:
            await self._refuse(conn, ERR_TICKET_REJECTED, "a ticket is required")
            return False
        if self.refusal is not None:
            await self._refuse(conn, *self.refusal)
            return False
        conn.authenticated = True
        data = {"user_id": conn.user_id, "api_keys": dict(self.api_keys), **self.init_extra}
        await conn.send(dict(init_frame(data)))
        return True

    async def _on_frame(self, conn: VmConnection, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "request":
            conn.spawn(self._answer(conn, frame))
        elif kind == "resume":
            if self.answer_resume:
                ids = [str(i) for i in frame.get("pending_ids") or []]
                await conn.send(dict(resume_response_frame(self._resume_results(ids))))
        elif kind == "fire_and_forget":
            record_id = frame.get("id")
            if isinstance(record_id, str) and record_id in self._seen_records:
                self.duplicate_records += 1
            else:
                if isinstance(record_id, str):
                    self._seen_records.add(record_id)
                self.fire_and_forget.append(frame)
        elif kind == "sse_event":
            key = (str(frame.get("stream")), str(frame.get("session_id")))
            seq = frame.get("seq")
            if isinstance(seq, int) and seq <= self._sse_last.get(key, 0):
                self.duplicate_sse += 1
            else:
                if isinstance(seq, int):
                    self._sse_last[key] = seq
                self.sse_events.append(frame)

    def _resume_results(self, ids: list[str]) -> dict[str, ResumeResult]:
        scripted = self.resume_results
        if callable(scripted):
            return scripted(ids)
        if scripted is not None:
            return dict(scripted)
        return {rid: completed(self.answered[rid]) if rid in self.answered else lost() for rid in ids}

    async def _answer(self, conn: VmConnection, frame: dict[str, Any]) -> None:
        request_id = str(frame.get("id"))
        method = frame.get("method")
        params = frame.get("params") or {}
        spec = self.methods.get(str(method), None)
        if spec is None:
            await conn.send(
                dict(error_response_frame(request_id, ERR_UNKNOWN_METHOD, f"unknown method {method!r}"))
            )
            return
        if spec is NEVER:
            return
        if callable(spec) and not isinstance(spec, Reply):
            spec = spec(params)
            if inspect.isawaitable(spec):
                spec = await spec
        reply = spec if isinstance(spec, Reply) else Reply(result=spec)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            await conn.send(dict(error_response_frame(request_id, *reply.error)))
            return
        self.answered[request_id] = reply.result
        await conn.send(dict(response_frame(request_id, reply.result)))

"""Host and Origin checks: no DNS rebinding, no cross-site requests or WebSockets from browsers.

:class:`OriginGuard` is plain ASGI middleware that runs before any handler, for HTTP and WebSocket:

* **Host**: the request's ``Host`` must name this server: ``localhost``, ``127.0.0.1``, ``[::1]``,
  the configured listen address (``CLAWLET_HOST``), the address the connection arrived on, or the
  machine's host name — each with the port the connection arrived on — or a name listed in
  ``CLAWLET_ALLOWED_HOSTS`` (with or without a port; ``*`` turns the check off). Anything else gets
  421: a page that rebinds its own DNS name to 127.0.0.1 still sends that name.
* **Origin**: WebSocket upgrades and state-changing requests (every method but GET, HEAD and
  OPTIONS) from a browser page must come from the server's own origin (the one the ``Host`` header
  names) or one listed in ``CLAWLET_ALLOWED_ORIGINS`` (``*``: any); another origin, also another
  port on the same machine, gets 403. Without ``Origin``, ``Sec-Fetch-Site: cross-site`` or
  ``same-site`` is refused too. Clients that are not browsers (curl, SDKs, OpenClaw's CLI, execution
  planes) send neither header and pass.

Refusals use the error format of the path's surface (``/v1/*`` and ``/process``: OpenAI's; else
clawlet's ``{"error": {"code", "message"}}``); a refused WebSocket gets the same answer as an HTTP
response instead of the upgrade (or a bare 403 when the server cannot send one).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from clawlet.api.errors import OPENAI_PREFIX, error_body
from clawlet.api.openai.errors import openai_error
from clawlet.config import Settings

log = logging.getLogger(__name__)

ALLOW_ALL: Final = "*"
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_SITE_FETCHES: Final = frozenset({"cross-site", "same-site"})
DEFAULT_PORTS: Final = {"http": 80, "ws": 80, "https": 443, "wss": 443}

_HOST = re.compile(r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::(?P<port>[0-9]{1,5}))?")


@dataclass(frozen=True)
class HostAddress:
    """A parsed ``host[:port]`` (an IPv6 address without its brackets, lower case)."""

    name: str
    port: int | None

    def port_or(self, default: int) -> int:
        return self.port if self.port is not None else default


def parse_host(value: str | None) -> HostAddress | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port``; ``None`` for anything else."""
    match = _HOST.fullmatch((value or "").strip().lower())
    if match is None:
        return None
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        return None
    return HostAddress(match["name"].strip("[]"), port)


def parse_origin(value: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an ``http(s)://host[:port]`` origin (default port filled in);
    ``None`` for ``null`` and anything else."""
    try:
        parts = urlsplit(value.strip().lower())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    host = parse_host(parts.netloc)
    if host is None:
        return None
    return parts.scheme, host.name, host.port_or(DEFAULT_PORTS[parts.scheme])


def split_list(raw: str | None) -> list[str]:
    """The entries of a comma-separated setting."""
    return [part.strip() for part in (raw or "").split(",") if part.strip()]


class OriginPolicy:
    """Which ``Host`` and ``Origin`` headers one server answers to (see the module docstring)."""

    def __init__(
        self, listen_host: str, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()
    ) -> None:
        hosts, origins = list(allowed_hosts), list(allowed_origins)
        self.any_host = ALLOW_ALL in hosts
        self.any_origin = ALLOW_ALL in origins
        listed = [parsed for parsed in map(parse_host, hosts) if parsed is not None]
        self.names_any_port = {host.name for host in listed if host.port is None}
        self.names_with_port = {(host.name, host.port) for host in listed if host.port is not None}
        self.own_names = {
            *LOOPBACK_NAMES,
            listen_host.strip().lower().strip("[]"),
            socket.gethostname().lower(),
        }
        self.origins = {parsed for parsed in map(parse_origin, origins) if parsed is not None}

    @classmethod
    def from_settings(cls, settings: Settings, *, also_hosts: Iterable[str] = ()) -> OriginPolicy:
        """The policy of a server listening on ``settings.host``; ``also_hosts``: further names the
        server is reached by (e.g. the host of the control plane's public URL)."""
        return cls(
            settings.host,
            [*split_list(settings.allowed_hosts), *also_hosts],
            split_list(settings.allowed_origins),
        )

    def host_allowed(self, host_header: str | None, scope: Scope) -> bool:
        if self.any_host:
            return True
        host = parse_host(host_header)
        if host is None:
            return False
        port = host.port_or(DEFAULT_PORTS.get(scope.get("scheme", "http"), 80))
        if host.name in self.names_any_port or (host.name, port) in self.names_with_port:
            return True
        # the address and port of the socket the request arrived on (None on a Unix socket)
        local = scope.get("server")
        if not local:
            return host.name in self.own_names
        local_address, local_port = local
        names = {*self.own_names, str(local_address).lower()}
        return host.name in names and (local_port is None or port == local_port)

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        """Whether a browser page of ``origin`` may act here: the server's own origin (the one
        ``Host`` names, on either scheme's default port when ``Host`` has none) or a listed one."""
        if self.any_origin:
            return True
        parsed = parse_origin(origin)
        if parsed is None:
            return False
        if parsed in self.origins:
            return True
        scheme, name, port = parsed
        host = parse_host(host_header)
        return host is not None and (host.name, host.port_or(DEFAULT_PORTS[scheme])) == (name, port)


def refusal(path: str, status: int, code: str, message: str) -> JSONResponse:
    """A refusal in the error format of the surface ``path`` belongs to."""
    if path.startswith(OPENAI_PREFIX) or path == "/process":
        return openai_error(message, status, code=code)
    return JSONResponse(error_body(code, message), status_code=status)


class OriginGuard:
    """ASGI middleware applying an :class:`OriginPolicy` to every HTTP request and WebSocket
    upgrade before the app sees it."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if not self.policy.host_allowed(host, scope):
            message = (
                f"this server does not answer to Host {host!r}; "
                "add the name to CLAWLET_ALLOWED_HOSTS if you reach it by that name"
            )
            await self._refuse(scope, receive, send, 421, "host_not_allowed", message)
            return
        if scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and not self.policy.origin_allowed(origin, host):
                message = (
                    f"requests from the web page origin {origin!r} are refused; "
                    "add it to CLAWLET_ALLOWED_ORIGINS to allow them"
                )
                await self._refuse(scope, receive, send, 403, "origin_not_allowed", message)
                return
            fetch_site = headers.get("sec-fetch-site", "").lower()
            if origin is None and fetch_site in CROSS_SITE_FETCHES:
                message = f"{fetch_site} requests from web pages are refused"
                await self._refuse(scope, receive, send, 403, "origin_not_allowed", message)
                return
        await self.app(scope, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        path: str = scope.get("path", "")
        client = scope.get("client")
        log.warning(
            "refused %s %s from %s: %s",
            scope.get("method", "WEBSOCKET"),
            path,
            client[0] if client else "?",
            message,
            extra={"event": code, "path": path},
        )
        response = refusal(path, status, code, message)
        if scope["type"] == "http":
            await response(scope, receive, send)
            return
        await receive()  # websocket.connect
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # the server answers 403
            return
        await send(
            {"type": "websocket.http.response.start", "status": status, "headers": response.raw_headers}
        )
        await send({"type": "websocket.http.response.body", "body": response.body})

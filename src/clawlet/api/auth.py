"""The bearer token: which requests need one (:class:`TokenGuard`, the 401 of each surface) and
``GET /auth``, whether this server wants one and whether the caller's is accepted.

The web UIs ask it before anything else: ``{"required": false, ...}`` (no ``CLAWLET_API_TOKEN``,
loopback) means no sign-in screen; otherwise they show one and check the typed token here before
keeping it. It is public (outside ``/api``, like ``/health``) and always answers 200 — a wrong
token is ``"authenticated": false``, not a 401 — so checking a token is not a failed request in
the browser. It says nothing else, and a wrong token is logged as an auth failure like the
guarded routes' (guessing here is no easier than on ``/api``).
"""

from __future__ import annotations

import hmac
import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from clawlet.api.errors import OPENAI_PREFIX, error_body
from clawlet.api.openai.errors import openai_error
from clawlet.config import Settings

log = logging.getLogger(__name__)

router = APIRouter()


def token_matches(accepted: list[str], authorization: str | None) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header against every accepted
    token (all are compared, so timing does not tell which one nearly matched)."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return False
    supplied = authorization[7:].strip().encode()
    matched = False
    for token in accepted:
        matched |= hmac.compare_digest(supplied, token.encode())
    return matched


class TokenGuard:
    """ASGI middleware: ``/api/*``, ``/v1/*``, ``/process`` and the API docs need ``Authorization:
    Bearer <token>`` (each surface answers 401 in its own error format); other paths pass. Plain ASGI, so
    streamed responses are not copied through an extra stream."""

    def __init__(self, app: ASGIApp, tokens: list[str]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_guarded(scope) or token_matches(self.tokens, Headers(scope=scope).get("authorization")):
            await self.app(scope, receive, send)
            return
        await refuse(scope, receive, send)


async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
    """Log an auth failure and answer 401 in the format of the surface the path belongs to."""
    path = scope.get("path", "")
    client = scope.get("client")
    log.warning(
        "auth failure: %s %s from %s",
        scope.get("method", ""),
        path,
        client[0] if client else "?",
        extra={"event": "auth_failure", "path": path},
    )
    await unauthorized(path)(scope, receive, send)


#: FastAPI's API documentation: it describes every guarded route, so it is guarded too
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


def is_guarded(scope: Scope) -> bool:
    """Whether a request needs a bearer token: HTTP requests to ``/api/*``, ``/v1/*``, ``/process``
    and the API documentation."""
    path: str = scope.get("path", "")
    return scope["type"] == "http" and (
        path.startswith(("/api/", OPENAI_PREFIX)) or path == "/process" or path in DOCS_PATHS
    )


def unauthorized(path: str) -> Response:
    """The 401 of the surface ``path`` belongs to (OpenAI's error shape or the workbench's)."""
    if path.startswith(OPENAI_PREFIX) or path == "/process":
        return openai_error("missing or invalid API key", 401, code="invalid_api_key")
    return JSONResponse(
        error_body("unauthorized", "missing or wrong bearer token"),
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


@router.get("/auth")
async def auth_status(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.services.settings
    tokens = settings.accepted_tokens
    supplied = request.headers.get("authorization")
    authenticated = not tokens or token_matches(tokens, supplied)
    if tokens and supplied and not authenticated:
        client = request.client
        log.warning(
            "auth failure: %s %s from %s",
            request.method,
            request.url.path,
            client.host if client else "?",
            extra={"event": "auth_failure", "path": request.url.path},
        )
    return JSONResponse(
        {"required": bool(tokens), "authenticated": authenticated},
        headers={"Cache-Control": "no-store"},
    )

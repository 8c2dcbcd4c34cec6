"""``GET /auth``: whether this server wants a bearer token, and whether the caller's is accepted.

The web UIs ask it before anything else: ``{"required": false, ...}`` (no ``CLAWLET_API_TOKEN``,
loopback) means no sign-in screen; otherwise they show one and check the typed token here before
keeping it. It is public (outside ``/api``, like ``/health``) and always answers 200 — a wrong
token is ``"authenticated": false``, not a 401 — so checking a token is not a failed request in
the browser. It says nothing else, and a wrong token is logged as an auth failure like the
guarded routes' (guessing here is no easier than on ``/api``).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from clawlet.config import Settings

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/auth")
async def auth_status(request: Request) -> JSONResponse:
    from clawlet.api.app import token_matches  # the app imports this module

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

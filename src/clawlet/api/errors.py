"""The workbench API's one error format: ``{"error": {"code", "message", "details"?}}``.

Route code raises :class:`ApiError`; validation errors and unknown routes are converted by the
handlers registered here, so no user input ever produces a bare 500 or FastAPI's ``{"detail"}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from clawlet.api.openai.errors import openai_error
from clawlet.errors import ApiError

log = logging.getLogger(__name__)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    details = []
    for item in exc.errors():
        # An unparseable body's "location" is a character offset, not a field.
        parts = () if item.get("type") == "json_invalid" else item.get("loc", ())
        location = [str(part) for part in parts if part != "body"]
        details.append({"field": ".".join(location) or "body", "message": item.get("msg", "")})
    return details


OPENAI_PREFIX = "/v1/"


def is_openai_path(request: Request) -> bool:
    return request.url.path.startswith(OPENAI_PREFIX)


def documented_methods(request: Request) -> list[str]:
    """Every method the API's documented operations accept at the request's path: Starlette's 405
    names only the first matching route's, though ``GET`` and ``POST`` of one path are often two
    routes (the web UI's catch-all ``GET`` is left out: it answers 404 under the API's prefixes)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.router.routes):
        pattern = getattr(route, "path_regex", None)
        documented = getattr(route, "include_in_schema", False)
        if documented and route.methods and pattern is not None and pattern.match(request.scope["path"]):
            methods |= route.methods
    return sorted(methods)


def invalid_request(path: str, details: list[dict[str, Any]]) -> JSONResponse:
    """The answer to a request whose input is wrong (``details``: ``{"field", "message"}`` each),
    in the format of the surface ``path`` belongs to: OpenAI's 400 under ``/v1/``, else 422."""
    summary = "; ".join(f"{d['field']}: {d['message']}" for d in details)
    if path.startswith(OPENAI_PREFIX):
        param = details[0]["field"] if details else None
        return openai_error(f"invalid request: {summary}", 400, param=param)
    return JSONResponse(
        error_body("invalid_request", f"invalid request: {summary}", details), status_code=422
    )


def install_error_handlers(app: FastAPI) -> None:
    """One error format per surface: OpenAI's under ``/v1/``, the workbench's elsewhere."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return invalid_request(request.url.path, _validation_details(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "http_error"
        )
        if is_openai_path(request) and exc.status_code in (404, 405) and not documented_methods(request):
            # like OpenAI: a path this server does not serve is a 404, whatever the method (the web
            # UI's catch-all GET would make it a 405)
            message = f"Invalid URL ({request.method} {request.url.path})"
            return openai_error(message, 404, code="unknown_url")
        if is_openai_path(request):
            response = openai_error(str(exc.detail), exc.status_code, code=code)
        else:
            response = JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405 and (methods := documented_methods(request)):
            response.headers["Allow"] = ", ".join(methods)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        if is_openai_path(request):
            return openai_error("internal server error", 500, code="internal_error", run_started=True)
        return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)

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
from starlette.exceptions import HTTPException as StarletteHTTPException

from clawlet.api.openai.errors import openai_error

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


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


def install_error_handlers(app: FastAPI) -> None:
    """One error format per surface: OpenAI's under ``/v1/``, the workbench's elsewhere."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        if is_openai_path(request):
            param = details[0]["field"] if details else None
            return openai_error(f"invalid request: {summary}", 400, param=param)
        return JSONResponse(
            error_body("invalid_request", f"invalid request: {summary}", details), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "http_error"
        )
        if is_openai_path(request):
            return openai_error(str(exc.detail), exc.status_code, code=code)
        return JSONResponse(
            error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        if is_openai_path(request):
            return openai_error("internal server error", 500, code="internal_error", run_started=True)
        return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)

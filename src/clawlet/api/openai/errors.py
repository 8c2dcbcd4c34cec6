"""OpenAI's error format: ``{"error": {"message", "type", "param", "code"}}``.

Every SDK reads this shape; FastAPI's ``{"detail": ...}`` would lose the message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse

if TYPE_CHECKING:  # clawlet.api.errors renders its own errors with this module
    from clawlet.errors import ApiError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error_body(
    message: str, status: int, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error"),
            "param": param,
            "code": code,
        }
    }


def openai_error(
    message: str,
    status: int,
    code: str | None = None,
    param: str | None = None,
    run_started: bool = False,
) -> JSONResponse:
    """An OpenAI-format error response; ``x-should-retry: false`` once a run has started, so SDKs
    that retry 5xx do not start the agent again."""
    headers = {"x-should-retry": "false"} if run_started or status == 409 else None
    return JSONResponse(openai_error_body(message, status, code, param), status_code=status, headers=headers)


def openai_api_error(error: ApiError) -> JSONResponse:
    """``error`` (clawlet's own error format) in OpenAI's: a bad request is a 400 whose code
    names the field (``invalid_session_id``)."""
    details = error.details
    param = None
    if isinstance(details, list) and details and isinstance(details[0], dict):
        param = details[0].get("field")
    code = f"invalid_{param}" if error.code == "invalid_request" and param else error.code
    status = 400 if error.status == 422 else error.status
    return openai_error(error.message, status, code=code, param=param)

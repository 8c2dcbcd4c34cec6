"""OpenAI's error format: ``{"error": {"message", "type", "param", "code"}}``.

Every SDK reads this shape; FastAPI's ``{"detail": ...}`` would lose the message.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

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

"""``ApiError``: a refusal with an HTTP status, a code, a message and optional details, raised
below the web layer too (the session manager's refusals, :mod:`clawlet.runtime.session_errors`).
Each surface renders it in its own format: the workbench's ``{"error": {...}}``
(:mod:`clawlet.api.errors`), OpenAI's, the gateway's ``ok:false`` response, an inbox task's message.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

"""The error answers of every operation, written into ``/openapi.json``.

FastAPI documents only a route's success and a 422 in its own ``{"detail"}`` shape, which clawlet
never sends. :func:`document_errors` rewrites the generated schema once, so that each operation
lists every 4xx (and 5xx) the server really answers, in its surface's error format (the workbench's
``{"error": {"code", "message", "details"?}}``, OpenAI's under ``/v1/`` and on ``/process``), and the
streaming operations list ``text/event-stream``:

* every operation: 421 (a ``Host`` that is not this server's), and for state-changing methods 403
  (a browser page of another origin); under ``/api/``, ``/v1/`` and ``/process`` 401 (no or a wrong
  bearer token, when ``CLAWLET_API_TOKEN`` is set);
* an operation with a JSON body: 400 (a body that is not JSON text) and the invalid-request answer
  (422, or 400 under ``/v1/``), as does one with parameters;
* the codes in :data:`ROUTE_ERRORS`, which each route's code raises.

``tests/test_schemathesis.py`` fuzzes every operation and checks each answer's status, content type
and body against this schema, so a route that starts answering a new code fails there until the
code is listed here.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from clawlet.api.errors import OPENAI_PREFIX

WORKBENCH_ERROR: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"description": "what was wrong, when the code says more than the message"},
            },
        }
    },
}

OPENAI_ERROR: dict[str, Any] = {
    "title": "OpenAIError",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

#: ``PUT /process``'s answer when a document has no text: Open WebUI then uses its own loader.
NO_TEXT: dict[str, Any] = {
    "title": "NoExtractableText",
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string"}},
}

#: One event of a ``text/event-stream`` answer (the fields of the SSE format; ``data`` is JSON text).
SERVER_SENT_EVENT: dict[str, Any] = {
    "title": "ServerSentEvent",
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}

DESCRIPTIONS = {
    400: "Bad request: the body is not JSON text, or a value the route cannot use",
    401: "Missing or wrong bearer token (when CLAWLET_API_TOKEN is set)",
    403: "Forbidden: a path outside the editable files, or a cross-site browser request",
    404: "Not found",
    409: "Conflict with the current state (busy, already decided, exists, corrupt transcript)",
    413: "The body is larger than the limit",
    421: "The Host header does not name this server (CLAWLET_ALLOWED_HOSTS)",
    422: "Invalid request: a field or parameter is missing or wrong",
    502: "The model failed",
    503: "Unavailable",
}

#: What each route raises besides the answers every operation shares (see the module docstring).
ROUTE_ERRORS: dict[str, tuple[int, ...]] = {
    "POST /api/chat": (409, 502),
    "GET /api/sessions/{session_id}/approvals": (404,),
    "POST /api/sessions/{session_id}/approvals/{approval_id}": (404, 409),
    "GET /api/sessions": (),
    "POST /api/sessions": (),
    "PUT /api/sessions/{session_id}": (404, 409),
    "DELETE /api/sessions/{session_id}": (404, 409),
    "GET /api/sessions/{session_id}/messages": (404, 409),
    "GET /api/sessions/{session_id}/history": (404, 409),
    "POST /api/sessions/{session_id}/generate-title": (404, 409, 502),
    "POST /api/sessions/{session_id}/cancel": (404,),
    "POST /api/sessions/{session_id}/compress": (400, 404, 409, 502),
    "GET /api/files": (403, 404),
    "POST /api/files": (403,),
    "GET /api/tokens/session/{session_id}": (404, 409),
    "POST /api/tokens/files": (403,),
    "PUT /api/config/rag-mode": (),
    "GET /api/config/tool-approvals": (),
    "PUT /api/config/tool-approvals": (),
    "POST /api/agent": (400, 409),
    "POST /api/claude": (400, 409),
    "GET /api/v1/agents": (503,),
    "POST /api/v1/agents": (409, 503),
    "GET /api/v1/agents/{agent_id}": (404, 503),
    "GET /api/v1/openclaw/models": (503,),
    "POST /api/v1/tasks": (404, 503),
    "GET /api/v1/tasks": (),
    "GET /api/v1/tasks/{task_id}": (404,),
    "PATCH /api/v1/tasks/{task_id}": (404, 409),
    "DELETE /api/v1/tasks/{task_id}": (404, 409),
    "POST /api/v1/tasks/{task_id}/cancel": (404, 409),
    "GET /api/v1/tasks/{task_id}/messages": (404,),
    "POST /api/v1/tasks/{task_id}/messages": (404, 409),
    "POST /api/v1/tasks/{task_id}/approvals/{approval_id}": (404, 409),
    "GET /api/v1/tasks/{task_id}/events": (404,),
    "POST /v1/chat/completions": (404, 409),
    "POST /v1/responses": (404, 409),
    "GET /v1/responses/{response_id}": (404,),
    "DELETE /v1/responses/{response_id}": (404,),
    "GET /v1/models/{model_id}": (404,),
    "PUT /process": (400, 403, 413, 422),
    "GET /health": (503,),
    "GET /health/ready": (503,),
}

#: Operations whose success is an event stream: always, or when the body asks for one (``stream``).
EVENT_STREAMS: dict[str, bool] = {
    "POST /api/chat": False,
    "POST /api/agent": True,
    "POST /api/claude": True,
    "POST /v1/chat/completions": False,
    "POST /v1/responses": False,
    "GET /api/v1/events": True,
    "GET /api/v1/tasks/{task_id}/events": True,
}

_SAFE_METHODS = frozenset({"get", "head", "options"})


def document_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json``) return the schema with every error answer."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for path, operations in schema.get("paths", {}).items():
                for method, operation in operations.items():
                    _document_operation(path, method, operation)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _is_openai_format(path: str) -> bool:
    return path.startswith(OPENAI_PREFIX) or path == "/process"


def _document_operation(path: str, method: str, operation: dict[str, Any]) -> None:
    label = f"{method.upper()} {path}"
    responses: dict[str, Any] = operation.setdefault("responses", {})
    statuses = {421, *ROUTE_ERRORS.get(label, ())}
    if method not in _SAFE_METHODS:
        statuses.add(403)
    if path.startswith(("/api/", OPENAI_PREFIX)) or path == "/process":
        statuses.add(401)
    if "requestBody" in operation or operation.get("parameters") or "422" in responses:
        statuses.add(400 if path.startswith(OPENAI_PREFIX) else 422)
    if "requestBody" in operation:
        statuses.add(400)
    responses.pop("422", None)  # FastAPI's {"detail": [...]}, which clawlet never sends
    if label == "PUT /process":
        operation["requestBody"] = {
            "description": "the document's bytes; X-Filename names it",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    for status in sorted(statuses):
        body = OPENAI_ERROR if _is_openai_format(path) else WORKBENCH_ERROR
        if label == "PUT /process" and status == 422:
            body = NO_TEXT
        responses[str(status)] = {
            "description": DESCRIPTIONS[status],
            "content": {"application/json": {"schema": body}},
        }
    if label in EVENT_STREAMS:
        success = next(code for code in responses if code.startswith("2"))
        content = responses[success].setdefault("content", {})
        if EVENT_STREAMS[label]:
            content.clear()
        content["text/event-stream"] = {"schema": SERVER_SENT_EVENT}

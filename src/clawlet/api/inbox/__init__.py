"""The task inbox API (seed 004) under ``/api/v1``: agents, tasks, messages, events, models.

Domain errors map to the workbench's error format here, once for every inbox route:
404 ``task_not_found`` / ``agent_not_found`` / ``approval_not_found``, 409 ``invalid_transition`` /
``task_busy`` / ``approval_decided`` / ``agent_exists`` / ``openclaw_config_not_rewritable``,
422 ``invalid_request`` / ``invalid_decision``, 503 ``openclaw_config_invalid``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from clawlet.api.errors import error_body
from clawlet.api.inbox import agents, events, status, tasks
from clawlet.inbox.agents import AgentConfigError, AgentExists, ConfigNotRewritable, InvalidAgent
from clawlet.inbox.service import (
    ApprovalAlreadyDecided,
    ApprovalNotPending,
    InvalidInboxDecision,
    InvalidTransition,
    TaskBusy,
    TaskNotFound,
    UnknownAgent,
)

PREFIX = "/api/v1"

_ERRORS: dict[type[Exception], tuple[int, str]] = {
    TaskNotFound: (404, "task_not_found"),
    UnknownAgent: (404, "agent_not_found"),
    ApprovalNotPending: (404, "approval_not_found"),
    ApprovalAlreadyDecided: (409, "approval_decided"),
    InvalidInboxDecision: (422, "invalid_decision"),
    InvalidTransition: (409, "invalid_transition"),
    TaskBusy: (409, "task_busy"),
    AgentExists: (409, "agent_exists"),
    ConfigNotRewritable: (409, "openclaw_config_not_rewritable"),
    InvalidAgent: (422, "invalid_request"),
    AgentConfigError: (503, "openclaw_config_invalid"),
}


def install_inbox(app: FastAPI) -> None:
    """Mount the inbox routers and their error mapping (``app.state.inbox`` must be set)."""
    for module in (agents, tasks, events, status):
        app.include_router(module.router, prefix=PREFIX)

    for exc_type in _ERRORS:
        app.add_exception_handler(exc_type, _inbox_error)


async def _inbox_error(request: Request, exc: Exception) -> JSONResponse:
    http_status, code = next(mapped for kind, mapped in _ERRORS.items() if isinstance(exc, kind))
    details = None
    if isinstance(exc, InvalidTransition):
        details = {"taskId": exc.task_id, "from": exc.current, "to": exc.target}
    elif isinstance(exc, ApprovalAlreadyDecided):
        details = {"taskId": exc.task_id, "approvalId": exc.approval_id, "decision": exc.decision}
    elif isinstance(exc, ApprovalNotPending):
        details = {"taskId": exc.task_id, "approvalId": exc.approval_id}
    return JSONResponse(error_body(code, str(exc), details), status_code=http_status)

"""Why the session manager refused to start or continue a run, as every surface reports it.

:func:`session_error` maps each refusal (:data:`SESSION_ERRORS`) to one :class:`ApiError` (status,
code, message, details): the one mapping every surface shares, each rendering it in its own error
format. The workbench and the native endpoint raise it as it is, chat completions renders it in
OpenAI's format (:func:`clawlet.api.openai.errors.openai_api_error`), the gateway as an ``ok:false``
response (``clawlet.gateway.server``), the inbox as a failed task's message
(``clawlet.inbox.backends``). A pending item in ``details`` has its one JSON shape
(:func:`~clawlet.engine.tool_approvals.pending_to_json`).
"""

from __future__ import annotations

from clawlet.engine.tool_approvals import InvalidDecision, pending_to_json
from clawlet.errors import ApiError
from clawlet.runtime.base import RuntimeFailure
from clawlet.runtime.manager import ApprovalDecided, ApprovalNotFound, SessionBusy, SessionWaiting
from clawlet.sessions.store import InvalidSessionId, SessionCorrupt

SESSION_ERRORS = (
    InvalidSessionId,
    SessionCorrupt,
    SessionBusy,
    ApprovalDecided,
    ApprovalNotFound,
    InvalidDecision,
    RuntimeFailure,
)
"""What :meth:`~clawlet.runtime.manager.SessionManager.start_turn` and ``resume`` (after
:func:`~clawlet.sessions.store.validate_session_id`) refuse with."""


def corrupt_error(session_id: str) -> ApiError:
    return ApiError(
        409,
        "session_corrupt",
        f"sessions/{session_id}.json is not a valid session file; it was left untouched — fix or delete it",
    )


def session_error(exc: Exception, session_id: str, approval_id: str = "", decide: str = "") -> ApiError:
    """The error to answer ``exc`` (one of :data:`SESSION_ERRORS`) with; ``approval_id`` is the
    item a decision was sent for; ``decide`` says how the surface decides a waiting session's items
    (default: the HTTP API's way)."""
    match exc:
        case InvalidSessionId():
            return ApiError(422, "invalid_request", str(exc), [{"field": "session_id", "message": str(exc)}])
        case SessionCorrupt():
            return corrupt_error(session_id)
        case SessionWaiting():
            how = (
                decide
                or f"decide it (POST /api/sessions/{session_id}/approvals/<approval_id>) or cancel it first"
            )
            return ApiError(
                409,
                "session_waiting",
                f"session {session_id!r} is waiting for a decision; {how}",
                {"pending": [pending_to_json(item) for item in exc.pending]},
            )
        case SessionBusy():
            return ApiError(
                409, "session_busy", f"session {session_id!r} is still answering; wait or cancel it"
            )
        case ApprovalDecided():
            return ApiError(
                409,
                "approval_decided",
                f"approval {approval_id!r} was already decided ({exc.decision})",
                {"approval_id": approval_id, "decision": exc.decision},
            )
        case ApprovalNotFound():
            return ApiError(
                404, "approval_not_found", f"session {session_id!r} waits for no approval {approval_id!r}"
            )
        case InvalidDecision():
            return ApiError(422, "invalid_decision", str(exc))
        case RuntimeFailure():
            return ApiError(409, "cannot_resume", str(exc))
    raise TypeError(f"not a session error: {exc!r}") from exc

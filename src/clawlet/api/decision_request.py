"""The body of a decision on one pending approval or question, as every HTTP surface takes it
(the workbench's ``POST /api/sessions/{id}/approvals/{approval_id}``, the inbox's
``POST /api/v1/tasks/{id}/approvals/{approvalId}``): its shape is checked here (a bad one is a 422
``invalid_request``), what it answers is checked by the runtime
(:func:`~clawlet.engine.tool_approvals.check_decision`, a 422 ``invalid_decision``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clawlet.engine.tool_approvals import Decision

MAX_DECISION_MESSAGE_CHARS = 100_000


class DecisionBody(BaseModel):
    """``approve``; ``edit`` with ``args`` (the tool's arguments to run with); ``reject`` with an
    optional ``message`` for the model; ``answer`` (a question) with the answer as ``message``."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "edit", "reject", "answer"]
    args: dict[str, Any] | None = None
    message: str | None = Field(default=None, max_length=MAX_DECISION_MESSAGE_CHARS)

    @model_validator(mode="after")
    def _fits(self) -> DecisionBody:
        if self.decision == "edit" and self.args is None:
            raise ValueError("an edit needs args (the tool's new arguments)")
        if self.decision != "edit" and self.args is not None:
            raise ValueError("args are only for an edit")
        if self.decision == "answer" and not (self.message or "").strip():
            raise ValueError("an answer needs a non-empty message")
        if self.decision in ("approve", "edit") and self.message is not None:
            raise ValueError("a message is only for a reject or an answer")
        return self

    def to_decision(self) -> Decision:
        return Decision(self.decision, self.args, self.message)

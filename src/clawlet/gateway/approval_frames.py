"""Tool approvals and agent questions over the Gateway protocol (issue 9): the wire shapes.

What a paused clawlet turn waits for (:class:`~clawlet.events.ApprovalRequested`,
:class:`~clawlet.events.QuestionAsked`) becomes one :class:`GatewayApproval`, announced and
settled with OpenClaw's own events and answered with its own methods:

* **Who receives approvals**, as real OpenClaw decides it (``canDeliverApprovals``): a connection
  holding ``operator.approvals`` (or ``operator.admin``) that declared ``caps:["approvals"]``, or
  ``"exec-approvals"`` / ``"plugin-approvals"`` for that kind only. Questions go to connections
  holding ``operator.questions`` (or ``operator.admin``).
* **Kinds**: a ``terminal`` call is an ``exec`` approval (its presentation shows the command);
  every other tool is a ``plugin`` approval (title, description, the rendered arguments, the
  tool's name); ``ask_user`` is a question.
* **Events**: ``session.approval`` (``SessionApprovalEvent``: ``phase:"pending"`` with a
  ``PendingApprovalSnapshot``, then ``phase:"terminal"`` with the allowed / denied / expired /
  cancelled snapshot) and the classic broadcast pair of the kind, ``exec.approval.requested`` /
  ``exec.approval.resolved`` or ``plugin.approval.requested`` / ``plugin.approval.resolved``
  (``{id, request:{…}, createdAtMs, expiresAtMs}`` and ``{id, decision, ts}``; the schema has no
  payload definition for these). Questions: ``question.requested`` (a ``QuestionRecord`` with one
  free-text question) and ``question.resolved`` (``QuestionResolvedEvent``).
* **Decisions**: ``allow-once`` → approve, ``deny`` → reject; ``allow-always`` is accepted as
  ``allow-once`` (clawlet keeps no standing grants: set the tool's policy to ``allow`` for that),
  so only ``["allow-once", "deny"]`` is offered. Editing the arguments is not in the protocol.
  An answered question → answer (its answers joined), a cancelled one → reject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from clawlet.engine.tool_approvals import Decision
from clawlet.events import ApprovalRequested, Pending, QuestionAsked
from clawlet.gateway.protocol import (
    CAP_APPROVALS,
    CAP_EXEC_APPROVALS,
    CAP_PLUGIN_APPROVALS,
    SCOPE_ADMIN,
    SCOPE_APPROVALS,
    SCOPE_QUESTIONS,
)

Kind = Literal["exec", "plugin", "question"]
KIND_EXEC: Kind = "exec"
KIND_PLUGIN: Kind = "plugin"
KIND_QUESTION: Kind = "question"

EVENT_SESSION_APPROVAL = "session.approval"
EVENT_EXEC_REQUESTED = "exec.approval.requested"
EVENT_EXEC_RESOLVED = "exec.approval.resolved"
EVENT_PLUGIN_REQUESTED = "plugin.approval.requested"
EVENT_PLUGIN_RESOLVED = "plugin.approval.resolved"
EVENT_QUESTION_REQUESTED = "question.requested"
EVENT_QUESTION_RESOLVED = "question.resolved"
APPROVAL_EVENTS = (
    EVENT_SESSION_APPROVAL,
    EVENT_EXEC_REQUESTED,
    EVENT_EXEC_RESOLVED,
    EVENT_PLUGIN_REQUESTED,
    EVENT_PLUGIN_RESOLVED,
    EVENT_QUESTION_REQUESTED,
    EVENT_QUESTION_RESOLVED,
)

ALLOW_ONCE = "allow-once"
ALLOW_ALWAYS = "allow-always"
DENY = "deny"
DECISIONS = (ALLOW_ONCE, ALLOW_ALWAYS, DENY)
OFFERED_DECISIONS = [ALLOW_ONCE, DENY]
"""``allowedDecisions`` of every approval clawlet asks for (``deny`` must always be offered)."""

EXEC_TOOL = "terminal"
QUESTION_ID = "answer"
"""The ``questionId`` of the one free-text question a ``question.requested`` record carries."""

#: Why a settled approval ended as it did: ``(status, reason)`` of the terminal snapshot.
ALLOWED = ("allowed", "user")
DENIED = ("denied", "user")
ANSWERED = ("answered", "user")
NO_ROUTE = ("denied", "no-route")
EXPIRED = ("expired", "timeout")
CANCELLED = ("cancelled", "run-aborted")

NO_ROUTE_MESSAGE = (
    "Nobody who can answer approval requests is connected to the gateway, so this call was denied. "
    "Do without it, or tell the user what you would run."
)
EXPIRED_MESSAGE = "Nobody answered the approval request in time, so this call was denied."
NO_ROUTE_QUESTION = "Nobody who can answer questions is connected to the gateway; continue without an answer."
EXPIRED_QUESTION = "Nobody answered the question in time; continue without an answer."


def kind_of(item: Pending) -> Kind:
    if isinstance(item, QuestionAsked):
        return KIND_QUESTION
    return KIND_EXEC if item.tool == EXEC_TOOL else KIND_PLUGIN


def receives(scopes: frozenset[str], caps: frozenset[str], kind: Kind) -> bool:
    """Whether a connection with these scopes and caps is shown (and may answer) this kind."""
    if kind == KIND_QUESTION:
        return SCOPE_QUESTIONS in scopes or SCOPE_ADMIN in scopes
    if SCOPE_APPROVALS not in scopes and SCOPE_ADMIN not in scopes:
        return False
    specific = CAP_EXEC_APPROVALS if kind == KIND_EXEC else CAP_PLUGIN_APPROVALS
    return CAP_APPROVALS in caps or specific in caps


def asks(scopes: frozenset[str], caps: frozenset[str]) -> bool:
    """Whether turns started by this connection may pause for approvals (``approval_mode="ask"``)."""
    return receives(scopes, caps, KIND_EXEC) or receives(scopes, caps, KIND_PLUGIN)


def approval_decision(value: str) -> Decision:
    """``allow-once`` / ``allow-always`` → approve, ``deny`` → reject (ValueError otherwise)."""
    if value in (ALLOW_ONCE, ALLOW_ALWAYS):
        return Decision("approve")
    if value == DENY:
        return Decision("reject")
    raise ValueError(f"unknown decision {value!r} (expected one of {', '.join(DECISIONS)})")


def answer_text(answers: Any) -> str | None:
    """The text of a ``QuestionAnswers`` object (``{answers: {questionId: [text, …]}}``), or None."""
    if not isinstance(answers, dict) or not isinstance(answers.get("answers"), dict):
        return None
    parts: list[str] = []
    for values in answers["answers"].values():
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            return None
        parts.extend(value.strip() for value in values if value.strip())
    return "\n".join(parts) or None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class GatewayApproval:
    """One pending item of a paused gateway run, from its announcement to its settlement."""

    item: Pending
    session_key: str
    agent_id: str
    run_id: str
    created_ms: int
    expires_ms: int
    decision: Decision | None = None
    """Set when settled by a client or by the gateway; applied (the run resumed) by the run's pump."""
    outcome: tuple[str, str] | None = None
    """The terminal ``(status, reason)`` once settled."""
    resolved_ms: int = 0
    answers: dict[str, Any] | None = None
    lonely_since: float | None = None
    """Monotonic time since which no connected client can receive this kind (None: one can)."""

    @property
    def id(self) -> str:
        return self.item.approval_id

    @property
    def kind(self) -> Kind:
        return kind_of(self.item)

    @property
    def settled(self) -> bool:
        return self.outcome is not None

    # -- approvals ---------------------------------------------------------------------------------

    def presentation(self) -> dict[str, Any]:
        """``ExecApprovalPresentation`` or ``PluginApprovalPresentation``."""
        item = self.item
        assert isinstance(item, ApprovalRequested)
        if self.kind == KIND_EXEC:
            command = item.args.get("command")
            text = command if isinstance(command, str) and command.strip() else item.input
            return {
                "kind": KIND_EXEC,
                "commandText": text or item.tool,
                "host": "gateway",
                "agentId": self.agent_id,
                "allowedDecisions": list(OFFERED_DECISIONS),
            }
        description = item.description.strip() or f"The agent wants to run the tool {item.tool!r}."
        presentation: dict[str, Any] = {
            "kind": KIND_PLUGIN,
            "title": _clip(f"Run {item.tool}?", 80),
            "description": _clip(description, 512),
            "severity": "warning",
            "pluginId": "clawlet",
            "toolName": item.tool,
            "agentId": self.agent_id,
            "allowedDecisions": list(OFFERED_DECISIONS),
        }
        if item.input.strip():
            presentation["detail"] = _clip(item.input, 16384)
        return presentation

    def _common(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "urlPath": f"/approvals/{quote(self.id, safe='')}",
            "createdAtMs": self.created_ms,
            "expiresAtMs": self.expires_ms,
            "presentation": self.presentation(),
        }

    def snapshot(self) -> dict[str, Any]:
        """``PendingApprovalSnapshot`` while pending, else the terminal one of its outcome."""
        if self.outcome is None:
            return {**self._common(), "status": "pending"}
        status, reason = self.outcome
        snapshot = {
            **self._common(),
            "resolvedAtMs": self.resolved_ms,
            "source": {"agentId": self.agent_id, "sessionKey": self.session_key},
            "status": status,
            "reason": reason,
        }
        if status == "allowed":
            snapshot["decision"] = ALLOW_ONCE
        elif status == "denied":
            snapshot["decision"] = DENY
        return snapshot

    def wire_decision(self) -> str:
        """The decision of the classic ``*.approval.resolved`` events."""
        return ALLOW_ONCE if self.outcome == ALLOWED else DENY

    # -- questions ---------------------------------------------------------------------------------

    def question_record(self) -> dict[str, Any]:
        """``QuestionRecord`` (``question.requested``; ``question.get``-like answers)."""
        item = self.item
        assert isinstance(item, QuestionAsked)
        record: dict[str, Any] = {
            "id": self.id,
            "questions": [
                {
                    "questionId": QUESTION_ID,
                    "header": "Question",
                    "question": item.question or "?",
                    "options": [],
                    "isOther": True,
                }
            ],
            "agentId": self.agent_id,
            "sessionKey": self.session_key,
            "runId": self.run_id,
            "createdAtMs": self.created_ms,
            "expiresAtMs": self.expires_ms,
            "status": self.question_status(),
        }
        if self.answers is not None:
            record["answers"] = self.answers
        return record

    def question_status(self) -> str:
        """``pending``, ``answered``, ``expired`` or ``cancelled`` (declined, nobody to ask, aborted)."""
        if self.outcome is None:
            return "pending"
        return self.outcome[0] if self.outcome[0] in ("answered", "expired") else "cancelled"

    def question_result(self) -> dict[str, Any]:
        """``QuestionResolveResult`` / the body of ``QuestionResolvedEvent`` (without ``id``)."""
        status = self.question_status()
        if status == "answered":
            return {"status": "answered", "answers": self.answers or {"answers": {}}}
        return {"status": status}

    # -- events ------------------------------------------------------------------------------------

    def requested_events(self) -> list[tuple[str, dict[str, Any]]]:
        if self.kind == KIND_QUESTION:
            return [(EVENT_QUESTION_REQUESTED, self.question_record())]
        item = self.item
        assert isinstance(item, ApprovalRequested)
        presentation = self.presentation()
        if self.kind == KIND_EXEC:
            name = EVENT_EXEC_REQUESTED
            request: dict[str, Any] = {"command": presentation["commandText"], "host": "gateway"}
        else:
            name = EVENT_PLUGIN_REQUESTED
            request = {
                "pluginId": "clawlet",
                "toolName": item.tool,
                "title": presentation["title"],
                "description": presentation["description"],
                "severity": presentation["severity"],
            }
        request.update({"agentId": self.agent_id, "sessionKey": self.session_key})
        classic = {
            "id": self.id,
            "request": request,
            "createdAtMs": self.created_ms,
            "expiresAtMs": self.expires_ms,
        }
        return [(EVENT_SESSION_APPROVAL, self._session_event("pending")), (name, classic)]

    def resolved_events(self) -> list[tuple[str, dict[str, Any]]]:
        if self.kind == KIND_QUESTION:
            return [(EVENT_QUESTION_RESOLVED, {"id": self.id, **self.question_result()})]
        name = EVENT_EXEC_RESOLVED if self.kind == KIND_EXEC else EVENT_PLUGIN_RESOLVED
        classic = {"id": self.id, "decision": self.wire_decision(), "ts": self.resolved_ms}
        return [(EVENT_SESSION_APPROVAL, self._session_event("terminal")), (name, classic)]

    def _session_event(self, phase: str) -> dict[str, Any]:
        """``SessionApprovalEvent``."""
        return {
            "sessionKey": self.session_key,
            "updatedAtMs": self.resolved_ms if phase == "terminal" else self.created_ms,
            "phase": phase,
            "approval": self.snapshot(),
        }


def settle_decision(approval: GatewayApproval, outcome: tuple[str, str]) -> Decision:
    """The clawlet decision the gateway applies when it settles an item itself."""
    question = approval.kind == KIND_QUESTION
    if outcome == NO_ROUTE:
        return Decision("reject", message=NO_ROUTE_QUESTION if question else NO_ROUTE_MESSAGE)
    if outcome == EXPIRED:
        return Decision("reject", message=EXPIRED_QUESTION if question else EXPIRED_MESSAGE)
    return Decision("reject")

"""A waiting task: what it waits for (tool approvals, agent questions) as the inbox shows it, and
how the user's reply decides it.

A local-backend turn may pause before a tool whose approval policy is ``ask`` runs, or when the
agent asks the user a question (``ask_user``); the task then moves to ``waiting``:

- the question becomes the agent's message in the task (:func:`waiting_message`): for a tool, which
  tool and what it would run, phrased as a question; for a question, the question itself;
- the Task JSON carries ``waitingFor`` (:func:`pending_json`): each pending item with its
  ``approvalId``, ``callId``, ``kind`` (``tool`` or ``question``) and ``allowedDecisions``, so a
  client can offer Approve / Edit / Reject or an answer box;
- a decision (``POST /api/v1/tasks/{id}/approvals/{approvalId}``) or a plain follow-up message
  (:func:`reply_decision`) resumes the paused turn (``waiting → running``); the user's side of it is
  saved as the user's message (:func:`decision_message`).

A plain message never approves a tool: on a tool approval it *rejects* the call and passes the words
on to the agent (free text is not consent to run a command); on a question it is the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from clawlet.engine.tool_approvals import Decision, pending_to_json
from clawlet.events import ApprovalRequested, Pending, QuestionAsked, render_tool_input

APPROVED_TEXT = "✅ Approved"
EDITED_TEXT = "✏️ Approved with edited input"
REJECTED_TEXT = "🚫 Rejected"
REPLY_HINT = "Approve, edit or reject it; a written reply rejects it and passes your words on."


class ApprovalNotPending(LookupError):
    """The task waits for no approval or question with this id."""

    def __init__(self, task_id: str, approval_id: str) -> None:
        super().__init__(f"task {task_id} waits for no approval or question {approval_id!r}")
        self.task_id = task_id
        self.approval_id = approval_id


class ApprovalAlreadyDecided(Exception):
    """This approval or question was decided already (``decision`` says how)."""

    def __init__(self, task_id: str, approval_id: str, decision: str) -> None:
        super().__init__(f"approval {approval_id!r} of task {task_id} was already decided ({decision})")
        self.task_id = task_id
        self.approval_id = approval_id
        self.decision = decision


class InvalidInboxDecision(ValueError):
    """A decision that does not fit what it answers (approve a question, bad edited arguments, ...)."""


def pending_json(item: Pending) -> dict[str, Any]:
    """One item of a task's ``waitingFor``: the one JSON shape of a pending item
    (:func:`~clawlet.engine.tool_approvals.pending_to_json`) in camelCase, like the rest of the inbox
    API; its ``allowedDecisions`` are the runtime's, which the inbox takes all of."""
    return {_camel(key): value for key, value in pending_to_json(item).items()}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _fenced(text: str) -> str:
    """``text`` as a Markdown code block whose fence no backtick run inside can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _ask(item: Pending) -> str:
    if isinstance(item, QuestionAsked):
        return f"❓ {item.question.strip()}"
    assert isinstance(item, ApprovalRequested)
    return f"🔐 May I run `{item.tool}` with this input?\n\n{_fenced(item.input)}"


def waiting_message(text: str, items: Sequence[Pending]) -> str:
    """The agent's message for a run that paused: its text so far, then each new question (a tool
    approval says which tool and what it would run, and how to answer)."""
    parts = [text.strip()] if text.strip() else []
    parts += [_ask(item) for item in items]
    if any(isinstance(item, ApprovalRequested) for item in items):
        parts.append(f"_{REPLY_HINT}_")
    return "\n\n".join(parts)


def trimmed(decision: Decision) -> Decision:
    """``decision`` with its message (an answer, a reason) stripped of surrounding blanks."""
    return replace(decision, message=(decision.message or "").strip() or None)


def reply_decision(item: Pending, content: str) -> Decision:
    """What a plain follow-up message decides: the answer to a question; for a tool approval a
    rejection with the message as the reason (a message never approves a tool)."""
    if isinstance(item, QuestionAsked):
        return Decision("answer", message=content)
    return Decision("reject", message=content)


def decision_message(decision: Decision) -> str:
    """The user's message a decision leaves in the task: the answer itself, ``✅ Approved``,
    ``✏️ Approved with edited input`` (and the input the tool runs with), or ``🚫 Rejected`` (with
    the reason after a colon)."""
    if decision.type == "answer":
        return decision.message or ""
    if decision.type == "approve":
        return APPROVED_TEXT
    if decision.type == "edit":
        return f"{EDITED_TEXT}\n\n{_fenced(render_tool_input(decision.args or {}))}"
    return f"{REJECTED_TEXT}: {decision.message}" if decision.message else REJECTED_TEXT


def approval_ids(items: Iterable[Pending]) -> frozenset[str]:
    return frozenset(item.approval_id for item in items)

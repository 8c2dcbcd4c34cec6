"""Tool approvals: the per-tool policy, the pause before a tool runs, and the user's decisions.

**Policy.** Every tool has an approval policy, ``allow``, ``ask`` or ``deny``, kept under
``tool_approvals`` in a workspace's ``config.json`` (``{"tool_approvals": {"terminal": "ask"}}``);
the main home's entries apply to every workspace and a workspace's own entries win (an inbox or
gateway agent runs in the workspace of its name, so a workspace's policy is its agent's). Tools
without an entry get the defaults: ``terminal`` and ``python_repl`` are ``ask`` when the server
listens beyond loopback (``settings.host`` not a loopback address) and ``allow`` otherwise,
``ask_user`` is ``ask`` (it can only ask; ``allow`` counts as ``ask``), every other tool ``allow``.

- ``deny``: the tool is not offered to the model, and a call to it is refused with an error tool
  message saying so (the model plans around it); nothing runs.
- ``ask``: what happens depends on the turn's :data:`~clawlet.engine.context.ApprovalMode`: a turn
  that can ask (the workbench) pauses before the tool runs, a turn that cannot (the OpenAI-compatible
  endpoint, ``/api/agent``) denies it as above, or runs it when the request says
  ``dangerously-skip-permissions=true``.

**Pausing.** LangChain's ``HumanInTheLoopMiddleware`` in ``per_call`` mode raises one LangGraph
interrupt per gated tool call, inside the tool node, before the tool runs; the graph state is
kept by a checkpointer (:class:`PausePoint`), so the run can be resumed by another process. The
interrupt's id is the approval id. A decision resumes the graph from that checkpoint: the tool
runs then (approve / edit) or never (reject / answer); the model call that asked for it is not
repeated, and tool calls of the same step that already ran are not run again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ValidationError

from clawlet.config import ApprovalPolicy, RuntimeConfig, Settings
from clawlet.engine.client_tools import (
    CLIENT_TOOL_DECISIONS,
    CLIENT_TOOL_DESCRIPTION,
    CLIENT_TOOL_INTERRUPT,
    is_client_call,
)
from clawlet.engine.context import RunContext
from clawlet.events import ApprovalRequested, Pending, QuestionAsked, render_tool_input
from clawlet.tools.ask_user import ASK_USER_TOOL

if TYPE_CHECKING:  # LangChain is imported when an agent is built, not when the server starts
    from langchain.agents.middleware import HumanInTheLoopMiddleware, ToolCallRequest
    from langchain_core.messages import ToolCall
    from langchain_core.tools import BaseTool
    from langgraph.types import Interrupt

SENSITIVE_TOOLS = ("terminal", "python_repl")
"""Tools that ask by default when the server is reachable from other machines."""

TOOL_DECISIONS = ["approve", "edit", "reject"]
QUESTION_DECISIONS = ["answer", "reject"]

DecisionType = Literal["approve", "edit", "reject", "answer", "result"]


class InvalidDecision(ValueError):
    """A decision that does not fit what it answers (not allowed, bad edited arguments, no answer)."""


@dataclass(frozen=True)
class Decision:
    """The user's answer to one pending item: ``approve``; ``edit`` with ``args`` (the tool runs
    with these arguments instead); ``reject`` with an optional ``message`` the model receives (for a
    question: the user declines to answer); ``answer`` (a question) with the answer as ``message``;
    ``result`` (a client tool call, :mod:`clawlet.engine.client_tools`) with its output as ``message``."""

    type: DecisionType
    args: dict[str, Any] | None = None
    message: str | None = None


@dataclass(frozen=True)
class PausePoint:
    """Where a run that may pause keeps its graph state: a checkpoint directory and the thread."""

    directory: Path
    thread_id: str


@dataclass(frozen=True)
class Resume:
    """Continue a paused run with ``decision`` for the pending item ``approval_id``."""

    approval_id: str
    decision: Decision


# -- policy ------------------------------------------------------------------------------------


def default_policy(settings: Settings, tool: str) -> ApprovalPolicy:
    if tool == ASK_USER_TOOL:
        return "ask"
    if tool in SENSITIVE_TOOLS and settings.listens_beyond_loopback:
        return "ask"
    return "allow"


def default_policies(settings: Settings, tool_names: Iterable[str]) -> dict[str, ApprovalPolicy]:
    return {name: default_policy(settings, name) for name in tool_names}


def effective_policies(
    settings: Settings, config: RuntimeConfig, tool_names: Iterable[str]
) -> dict[str, ApprovalPolicy]:
    """The policy of every tool: the defaults, overridden by the configured policies."""
    configured = config.configured_tool_approvals()
    policies: dict[str, ApprovalPolicy] = {}
    for name in tool_names:
        policy = configured.get(name, default_policy(settings, name))
        policies[name] = "ask" if name == ASK_USER_TOOL and policy == "allow" else policy
    return policies


def apply_policies(context: RunContext, policies: Mapping[str, ApprovalPolicy]) -> RunContext:
    """``context`` with the policy applied for its approval mode (see :class:`RunContext`)."""
    ask = frozenset(name for name, policy in policies.items() if policy == "ask")
    denied = frozenset(name for name, policy in policies.items() if policy == "deny")
    if context.approval_mode == "ask":
        return replace(
            context,
            ask_tools=ask,
            policy_denied=denied,
            approval_denied=frozenset(),
            skipped_approval=frozenset(),
        )
    # ask_user can only ask: a turn that cannot ask never offers it
    cannot_ask = ask if context.approval_mode == "deny" else ask & {ASK_USER_TOOL}
    return replace(
        context,
        ask_tools=frozenset(),
        policy_denied=denied,
        approval_denied=cannot_ask,
        skipped_approval=ask - cannot_ask,
    )


def permission_note(context: RunContext) -> str:
    """One line saying what a turn that cannot ask did with ``ask`` tools, or "" if nothing."""
    denied = sorted(context.approval_denied - {ASK_USER_TOOL} - context.disallowed_tools)
    skipped = sorted(context.skipped_approval - context.disallowed_tools)
    if denied:
        return (
            f"permissions: {', '.join(denied)} need the user's approval, which this endpoint cannot "
            "ask for, so they are denied (dangerously-skip-permissions=true allows them)"
        )
    if skipped:
        return f"permissions: dangerously-skip-permissions=true, so {', '.join(skipped)} run without approval"
    return ""


# -- the middleware ----------------------------------------------------------------------------


def _asks(request: ToolCallRequest) -> bool:
    context = getattr(request.runtime, "context", None)
    if not isinstance(context, RunContext):
        return False
    return context.asks_before(request.tool_call["name"], request.tool_call.get("id"))


def _description(tool_call: ToolCall, state: Any, runtime: Any) -> str:
    return f"{tool_call['name']}: {render_tool_input(tool_call['args'])}"


def approval_middleware(tool_names: Sequence[str]) -> HumanInTheLoopMiddleware[Any, Any, Any]:
    """LangChain's human-in-the-loop middleware, one interrupt per gated call, gated by the turn's
    context (so the policy can change without rebuilding the agent). Per call, its interrupts are
    raised around the tool call and its ``after_model`` hook does nothing, so it is left out: a
    hook is a graph node, a LangGraph step after every model call."""
    from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware, InterruptOnConfig

    class PerCallApprovals(HumanInTheLoopMiddleware[Any, Any, Any]):
        after_model = AgentMiddleware.after_model
        aafter_model = AgentMiddleware.aafter_model

        @property
        def name(self) -> str:
            return "HumanInTheLoopMiddleware"

    interrupt_on: dict[str, bool | InterruptOnConfig] = {}
    for name in tool_names:
        decisions: list[Any] = (
            ["respond", "reject"] if name == ASK_USER_TOOL else ["approve", "edit", "reject"]
        )
        interrupt_on[name] = InterruptOnConfig(
            allowed_decisions=decisions, description=_description, when=_asks
        )
    return PerCallApprovals(interrupt_on, interrupt_mode="per_call")


# -- interrupts and decisions ------------------------------------------------------------------


def pending_from_interrupt(item: Interrupt) -> Pending | None:
    """The clawlet event for one of the middleware's interrupts (None for anything else)."""
    value = item.value
    if not isinstance(value, Mapping) or value.get("type") not in ("tool_approval", CLIENT_TOOL_INTERRUPT):
        return None
    name = str(value.get("name", ""))
    args = dict(value.get("args") or {})
    call_id = str(value.get("tool_call_id") or "")
    client = is_client_call(value)
    if name == ASK_USER_TOOL and not client:
        return QuestionAsked(
            approval_id=item.id,
            question=str(args.get("question", "")),
            call_id=call_id,
            allowed_decisions=list(QUESTION_DECISIONS),
        )
    return ApprovalRequested(
        approval_id=item.id,
        tool=name,
        args=args,
        call_id=call_id,
        input=render_tool_input(args),
        allowed_decisions=list(CLIENT_TOOL_DECISIONS if client else TOOL_DECISIONS),
        description=CLIENT_TOOL_DESCRIPTION if client else str(value.get("description", "")),
    )


def check_decision(pending: Pending, decision: Decision, tool: BaseTool | None) -> Decision:
    """``decision`` checked against what it answers; raises :class:`InvalidDecision`."""
    if decision.type not in pending.allowed_decisions:
        allowed = ", ".join(pending.allowed_decisions)
        raise InvalidDecision(f"decision {decision.type!r} is not allowed here (allowed: {allowed})")
    if decision.type == "answer" and not (decision.message or "").strip():
        raise InvalidDecision("an answer needs a non-empty message")
    if decision.type == "edit":
        if decision.args is None:
            raise InvalidDecision("an edit needs the tool's new arguments as args")
        schema = tool.tool_call_schema if tool is not None else None
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            try:
                schema.model_validate(decision.args)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in error['loc']) or 'args'}: {error['msg']}"
                    for error in exc.errors()
                )
                raise InvalidDecision(
                    f"invalid arguments for {tool.name if tool else 'the tool'}: {problems}"
                ) from exc
    return decision


def hitl_decision(pending: Pending, decision: Decision) -> dict[str, Any]:
    """The decision in the human-in-the-loop middleware's shape."""
    if decision.type == "approve":
        return {"type": "approve"}
    if decision.type == "edit":
        assert isinstance(pending, ApprovalRequested)
        return {"type": "edit", "edited_action": {"name": pending.tool, "args": dict(decision.args or {})}}
    if decision.type == "answer":
        return {"type": "respond", "message": decision.message or ""}
    if decision.type == "result":
        return {"content": decision.message or ""}
    rejection: dict[str, Any] = {"type": "reject"}
    if decision.message and decision.message.strip():
        rejection["message"] = decision.message.strip()
    return rejection


def pending_to_json(item: Pending) -> dict[str, Any]:
    """A pending item as JSON (``kind`` is ``tool`` or ``question``)."""
    if isinstance(item, QuestionAsked):
        return {
            "kind": "question",
            "approval_id": item.approval_id,
            "question": item.question,
            "call_id": item.call_id,
            "allowed_decisions": list(item.allowed_decisions),
        }
    return {
        "kind": "tool",
        "approval_id": item.approval_id,
        "tool": item.tool,
        "args": item.args,
        "call_id": item.call_id,
        "input": item.input,
        "allowed_decisions": list(item.allowed_decisions),
        "description": item.description,
    }


def pending_from_json(data: Mapping[str, Any]) -> Pending:
    """The item :func:`pending_to_json` wrote; ``ValueError`` for anything else."""
    try:
        if data.get("kind") == "question":
            return QuestionAsked(
                approval_id=str(data["approval_id"]),
                question=str(data["question"]),
                call_id=str(data.get("call_id") or ""),
                allowed_decisions=[str(item) for item in data.get("allowed_decisions") or QUESTION_DECISIONS],
            )
        return ApprovalRequested(
            approval_id=str(data["approval_id"]),
            tool=str(data["tool"]),
            args=dict(cast(Mapping[str, Any], data.get("args") or {})),
            call_id=str(data.get("call_id") or ""),
            input=str(data.get("input") or ""),
            allowed_decisions=[str(item) for item in data.get("allowed_decisions") or TOOL_DECISIONS],
            description=str(data.get("description") or ""),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a pending approval: {exc}") from exc

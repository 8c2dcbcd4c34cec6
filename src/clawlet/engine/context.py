"""``RunContext``: per-turn options the agent runs with (tool permissions, approvals, extra system prompt)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from clawlet.engine.client_tools import ClientTool
from clawlet.llm.images import Image
from clawlet.llm.response_format import ResponseFormat
from clawlet.llm.sampling import NO_SAMPLING, Sampling

ApprovalMode = Literal["ask", "deny", "allow"]
"""What a turn does with tools whose approval policy is ``ask``: ``ask`` pauses the run until the
user decides (only callers that can show the question and resume the run may choose it), ``deny``
refuses them (they are not offered; a call is answered with an error tool message), ``allow`` runs
them without asking (``dangerously-skip-permissions``)."""


@dataclass(frozen=True)
class RunContext:
    """Passed to the agent as its LangGraph runtime context for one turn.

    ``allowed_tools`` ``None`` means every tool; ``disallowed_tools`` always wins. The caller sets
    ``approval_mode``; the engine fills the rest from the workspace's approval policy
    (:meth:`clawlet.engine.agent.AgentEngine.resolve_context`): ``ask_tools`` pause before they run,
    ``policy_denied`` are set to ``deny``, ``approval_denied`` are ``ask`` tools this turn cannot ask
    about, ``skipped_approval`` are ``ask`` tools it runs without asking; ``resume_call_ids`` are
    the tool calls a resumed run waits on (always asked, whatever the policy says by then);
    ``sampling`` the client's sampling options for each model call; ``response_format`` the shape
    of the final answer (:mod:`clawlet.engine.structured`); ``images`` the images sent
    with the user message (:mod:`clawlet.llm.images`); ``client_tools`` functions the client
    offers and runs itself, ``tool_choice`` (``auto``, ``none``, ``required`` or one of their
    names) how they are offered (:mod:`clawlet.engine.client_tools`)."""

    allowed_tools: frozenset[str] | None = None
    disallowed_tools: frozenset[str] = frozenset()
    extra_system_prompt: str = ""
    approval_mode: ApprovalMode = "deny"
    ask_tools: frozenset[str] = frozenset()
    policy_denied: frozenset[str] = frozenset()
    approval_denied: frozenset[str] = frozenset()
    skipped_approval: frozenset[str] = frozenset()
    resume_call_ids: frozenset[str] = frozenset()
    sampling: Sampling = NO_SAMPLING
    response_format: ResponseFormat | None = None
    images: tuple[Image, ...] = ()
    client_tools: tuple[ClientTool, ...] = ()
    tool_choice: str = "auto"

    @classmethod
    def for_edge(
        cls,
        *,
        can_ask: bool = False,
        skip_permissions: bool = False,
        allowed_tools: Iterable[str] | None = None,
        disallowed_tools: Iterable[str] | None = None,
        extra_system_prompt: str = "",
        sampling: Sampling = NO_SAMPLING,
        response_format: ResponseFormat | None = None,
        images: tuple[Image, ...] = (),
        client_tools: tuple[ClientTool, ...] = (),
        tool_choice: str = "auto",
    ) -> RunContext:
        """The context a protocol edge (workbench, inbox, gateway, ``/v1``, ``/api/agent``) starts a
        turn with, built one way for all: ``approval_mode`` is ``allow`` when the client skips
        permissions (``dangerously-skip-permissions``), else ``ask`` when the edge can show the
        question and resume the run (``can_ask``), else ``deny``; ``allowed_tools`` ``None`` means
        every tool; the rest is the client's turn options as sent."""
        return cls(
            allowed_tools=frozenset(allowed_tools) if allowed_tools is not None else None,
            disallowed_tools=frozenset(disallowed_tools or ()),
            extra_system_prompt=extra_system_prompt,
            approval_mode="allow" if skip_permissions else "ask" if can_ask else "deny",
            sampling=sampling,
            response_format=response_format,
            images=images,
            client_tools=client_tools,
            tool_choice=tool_choice,
        )

    @property
    def may_pause(self) -> bool:
        """Whether the turn may pause (for an approval or a client tool's result): it needs a
        checkpointer then."""
        return self.approval_mode == "ask" or bool(self.client_tools)

    def tool_allowed(self, name: str) -> bool:
        if any(tool.name == name for tool in self.client_tools):
            return True
        if name in self.disallowed_tools or name in self.policy_denied or name in self.approval_denied:
            return False
        return self.allowed_tools is None or name in self.allowed_tools

    def refusal_reason(self, name: str) -> str:
        """Why a call to ``name`` is refused, said to the model so it can plan around it."""
        if name in self.approval_denied and name not in self.disallowed_tools:
            return (
                f"Error: the tool {name!r} needs the user's approval, which cannot be asked for in "
                "this conversation, so it is denied. Do without it, or tell the user what you would run."
            )
        if name in self.policy_denied and name not in self.disallowed_tools:
            return f"Error: the tool {name!r} is denied by this workspace's approval policy."
        return f"Error: the tool {name!r} is not allowed in this conversation."

    def asks_before(self, name: str, call_id: str | None) -> bool:
        """Whether the call pauses for the user's decision before it runs."""
        return name in self.ask_tools or (call_id is not None and call_id in self.resume_call_ids)


DEFAULT_CONTEXT = RunContext()

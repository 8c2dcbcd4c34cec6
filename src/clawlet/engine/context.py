"""``RunContext``: per-turn options the agent runs with (tool permissions, approvals, extra system prompt)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from clawlet.engine.client_tools import ClientTool, client_tools_from_json, client_tools_to_json
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


_CONTEXT_SETS: Final = (
    "disallowed_tools",
    "ask_tools",
    "policy_denied",
    "approval_denied",
    "skipped_approval",
    "resume_call_ids",
)
"""The ``frozenset`` fields of ``RunContext`` (``allowed_tools`` may also be ``None``)."""


def context_to_json(context: RunContext) -> dict[str, Any]:
    """``context`` as JSON, every field: the one codec of a turn's context, used by the session
    process's pipe (:mod:`clawlet.runtime.process_pipe`) and the paused-turn record
    (:mod:`clawlet.runtime.approval_store`)."""
    encoded: dict[str, Any] = {name: sorted(getattr(context, name)) for name in _CONTEXT_SETS}
    encoded["allowed_tools"] = None if context.allowed_tools is None else sorted(context.allowed_tools)
    encoded["extra_system_prompt"] = context.extra_system_prompt
    encoded["approval_mode"] = context.approval_mode
    encoded["sampling"] = context.sampling.to_json()
    encoded["client_tools"] = client_tools_to_json(context.client_tools)
    encoded["tool_choice"] = context.tool_choice
    encoded["response_format"] = (
        None if context.response_format is None else context.response_format.to_json()
    )
    encoded["images"] = [image.to_json() for image in context.images]
    return encoded


def context_from_json(data: Any, default: RunContext = DEFAULT_CONTEXT) -> RunContext:
    """The context :func:`context_to_json` encoded; ``default`` when ``data`` is not an object, and
    its ``approval_mode`` when the mode is missing or unknown. Missing fields take their defaults."""
    if not isinstance(data, Mapping):
        return default
    allowed = data.get("allowed_tools")
    mode = data.get("approval_mode")
    sets = {name: frozenset(map(str, data.get(name) or ())) for name in _CONTEXT_SETS}
    return RunContext(
        allowed_tools=None if allowed is None else frozenset(map(str, allowed)),
        extra_system_prompt=str(data.get("extra_system_prompt") or ""),
        approval_mode=mode if mode in ("ask", "deny", "allow") else default.approval_mode,
        sampling=Sampling.from_json(data.get("sampling")),
        client_tools=client_tools_from_json(data.get("client_tools")),
        tool_choice=str(data.get("tool_choice") or "auto"),
        response_format=ResponseFormat.from_json(data.get("response_format")),
        images=tuple(image for image in map(Image.from_json, data.get("images") or ()) if image is not None),
        **sets,
    )

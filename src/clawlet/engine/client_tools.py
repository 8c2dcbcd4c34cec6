"""Client-side tools: functions a client offers with its request, run by the client, not by clawlet.

An OpenAI client (``tools`` on ``POST /v1/chat/completions``) can extend the agent with its own
functions. Design:

- **Offered beside clawlet's tools.** A turn's :class:`~clawlet.engine.context.RunContext` carries
  them (:class:`ClientTool`: name, description, JSON schema) and
  :class:`~clawlet.engine.client_tool_middleware.ClientToolMiddleware` adds
  them to every model call as OpenAI function tools (a name clash with a clawlet tool is the
  caller's 400). ``tool_choice``: ``auto`` (the default) offers them; ``none`` offers none of them;
  ``required`` and a function's name force a tool call on the turn's first model call only (later
  calls are ``auto``, or the agent could never answer); the provider receives it in its own terms
  (:func:`provider_tool_choice`; the demo model ignores it).
- **A call pauses the run.** When the model calls a client tool, the tool node raises a LangGraph
  interrupt for that call (``type: "client_tool"``) instead of running anything, the same pause a
  tool needing approval uses (:mod:`clawlet.engine.tool_approvals`, a checkpointer keeps the graph):
  several client calls in one model message pause together; clawlet tools called beside them run
  first as usual. The run ends with ``RunWaiting`` whose pending items are ``ApprovalRequested``
  with :data:`CLIENT_TOOL_DECISIONS` (``["result"]``): only the client's result answers them.
- **The result resumes the same run.** The decision ``result`` (its ``message`` the client's tool
  output) becomes the call's ``ToolMessage``, recorded in the transcript once, like a clawlet tool.

The OpenAI edge (ids, wire shapes, finding the paused run) is :mod:`clawlet.api.openai.client_tools`.
This module holds the data the server needs without LangChain; the middleware is in
:mod:`clawlet.engine.client_tool_middleware`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CLIENT_TOOL_INTERRUPT = "client_tool"
"""The ``type`` of the interrupt value a client tool call raises."""

CLIENT_TOOL_DECISIONS = ["result"]
"""The one decision a client tool call takes: its result."""

CLIENT_TOOL_DESCRIPTION = "a tool of the client: the client runs it and sends its result"


@dataclass(frozen=True)
class ClientTool:
    """One function the client offers: ``parameters`` is its JSON schema as JSON text."""

    name: str
    description: str = ""
    parameters: str = '{"type": "object", "properties": {}}'

    def as_openai(self) -> dict[str, Any]:
        """The tool as an OpenAI function tool (what ``bind_tools`` passes to the provider)."""
        function: dict[str, Any] = {"name": self.name, "parameters": json.loads(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


def client_tools_to_json(tools: Sequence[ClientTool]) -> list[dict[str, str]]:
    return [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]


def client_tools_from_json(data: Any) -> tuple[ClientTool, ...]:
    """What :func:`client_tools_to_json` wrote; anything unreadable is left out."""
    if not isinstance(data, list):
        return ()
    return tuple(
        ClientTool(str(item["name"]), str(item.get("description") or ""), str(item.get("parameters") or "{}"))
        for item in data
        if isinstance(item, Mapping) and item.get("name")
    )


def is_client_call(value: Any) -> bool:
    """Whether an interrupt's value is a client tool call's pause."""
    return isinstance(value, Mapping) and value.get("type") == CLIENT_TOOL_INTERRUPT


def provider_tool_choice(choice: str, provider: str) -> str:
    """``choice`` (``required`` or a function's name) as ``provider``'s ``bind_tools`` takes it:
    Anthropic calls ``required`` ``any``."""
    return "any" if choice == "required" and provider == "anthropic" else choice

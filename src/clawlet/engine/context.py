"""``RunContext``: per-turn options the agent runs with (tool permissions, extra system prompt)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunContext:
    """Passed to the agent as its LangGraph runtime context for one turn.

    ``allowed_tools`` ``None`` means every tool; ``disallowed_tools`` always wins."""

    allowed_tools: frozenset[str] | None = None
    disallowed_tools: frozenset[str] = frozenset()
    extra_system_prompt: str = ""

    def tool_allowed(self, name: str) -> bool:
        if name in self.disallowed_tools:
            return False
        return self.allowed_tools is None or name in self.allowed_tools


DEFAULT_CONTEXT = RunContext()

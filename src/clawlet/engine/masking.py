"""Secrets masked in tool output before anyone sees it.

:class:`SecretMaskMiddleware` wraps every tool call of the agent (built-in, MCP, and the error
messages of failing ones): each known secret value in the resulting ``ToolMessage`` is replaced by
:data:`REDACTED` before the message enters the run's state. So the model, the streamed ``ToolEnd``
events and the saved transcript only ever hold the masked text. The values are the configured keys
and tokens and the secrets held in memory (:attr:`clawlet.config.Settings.secret_values`); values
shorter than :data:`MIN_SECRET_LENGTH` are left alone, so ordinary words are never mangled.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from langchain.agents.middleware import AgentMiddleware, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

REDACTED: Final = "[redacted]"
MIN_SECRET_LENGTH: Final = 8


class SecretMasker:
    """Replaces each of a fixed set of secret values in a text by :data:`REDACTED`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        values = sorted(
            {value for value in secrets if len(value) >= MIN_SECRET_LENGTH}, key=len, reverse=True
        )
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def mask(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)

    def mask_content(self, content: Any) -> Any:
        """A message's content (a string, or a list of strings and content blocks) with every
        text part masked."""
        if isinstance(content, str):
            return self.mask(content)
        if isinstance(content, list):
            return [self.mask_content(part) for part in content]
        if isinstance(content, dict):
            return {
                key: self.mask(value) if key == "text" and isinstance(value, str) else value
                for key, value in content.items()
            }
        return content

    def mask_result(self, result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        if self._pattern is None or not isinstance(result, ToolMessage):
            return result
        masked = self.mask_content(result.content)
        return result if masked == result.content else result.model_copy(update={"content": masked})


class SecretMaskMiddleware(AgentMiddleware[Any, Any, Any]):
    """Masks the secrets in every tool result (see the module docstring)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.masker = SecretMasker(secrets)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self.masker.mask_result(handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return self.masker.mask_result(await handler(request))

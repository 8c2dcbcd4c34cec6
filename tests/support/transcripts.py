"""Stored tool calls as tests compare them."""

from __future__ import annotations

from typing import Any


def calls_shown(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``calls`` (a stored segment's ``tool_calls``) as ``{tool, input, output}``, after checking that
    each carries its ``call_id`` (a non-empty string: the model's ids are random) and ``is_error``."""
    for call in calls:
        assert isinstance(call.get("call_id"), str) and call["call_id"], call
        assert isinstance(call.get("is_error"), bool), call
    return [{key: call[key] for key in ("tool", "input", "output")} for call in calls]

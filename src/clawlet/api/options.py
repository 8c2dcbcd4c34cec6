"""Per-request agent options shared by the ``/v1`` and ``/api/agent`` edges.

Options come from, lowest precedence first: ``X-Clawlet-*`` headers, request-body fields, and the
UniAiAgent seed's in-message syntax (``workspace=... session-id=... allowed-tools=[...]
disallowed-tools=[...] thinking=true dangerously-skip-permissions=true``), itself ranked system
message < earlier assistant messages < the current user message. In-message options are removed
from the text before it reaches the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

OPTION_NAMES = (
    "workspace",
    "session-id",
    "allowed-tools",
    "disallowed-tools",
    "thinking",
    "dangerously-skip-permissions",
)
_IN_MESSAGE = re.compile(
    r"(?<!\S)(" + "|".join(re.escape(name) for name in OPTION_NAMES) + r")=(\[[^\]]*\]|\S+)"
)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
THINKING_STYLES = {"true": "tags", "tags": "tags", "think": "tags", "code": "code", "false": None}


class OptionError(ValueError):
    """An option value that cannot be understood; the edge answers 400."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class AgentOptions:
    workspace: str | None = None
    session_id: str | None = None
    allowed_tools: list[str] | None = None
    disallowed_tools: list[str] | None = None
    thinking: str | None = None  # "tags" (<think>…</think>), "code" (fenced block) or None
    skip_permissions: bool = False

    def overlay(self, values: Mapping[str, Any]) -> None:
        """Set every option present in ``values`` (already parsed), overriding earlier layers."""
        for item in fields(self):
            if item.name in values:
                setattr(self, item.name, values[item.name])


def _tool_list(raw: Any, param: str) -> list[str]:
    if isinstance(raw, list):
        items = raw
    elif isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as exc:
                raise OptionError(f"{param} must be a JSON array of tool names", param) from exc
        else:
            items = [part for part in text.split(",") if part.strip()]
    else:
        raise OptionError(f"{param} must be a list of tool names", param)
    if not all(isinstance(item, str) for item in items):
        raise OptionError(f"{param} must contain tool names (strings)", param)
    return [item.strip() for item in items if item.strip()]


def _boolean(raw: Any, param: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OptionError(f"{param} must be true or false", param)


def parse_option(name: str, raw: Any) -> tuple[str, Any]:
    """(field name, parsed value) for one option given by its seed name."""
    if name == "workspace":
        return "workspace", str(raw).strip()
    if name == "session-id":
        return "session_id", str(raw).strip()
    if name in ("allowed-tools", "disallowed-tools"):
        return name.replace("-", "_"), _tool_list(raw, name)
    if name == "thinking":
        key = str(raw).strip().lower() if not isinstance(raw, bool) else str(raw).lower()
        if key not in THINKING_STYLES:
            raise OptionError("thinking must be true, false or code", name)
        return "thinking", THINKING_STYLES[key]
    if name == "dangerously-skip-permissions":
        return "skip_permissions", _boolean(raw, name)
    raise OptionError(f"unknown option {name!r}", name)


def extract_in_message(text: str) -> tuple[str, dict[str, Any]]:
    """Remove the seed's ``name=value`` options from ``text``; return (clean text, parsed options)."""
    found: dict[str, Any] = {}
    for match in _IN_MESSAGE.finditer(text):
        key, value = parse_option(match.group(1), match.group(2))
        found[key] = value
    cleaned = _IN_MESSAGE.sub("", text)
    return re.sub(r"[ \t]{2,}", " ", cleaned).strip(), found


def from_mapping(values: Mapping[str, Any], aliases: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Parse options from a body or header mapping; ``aliases`` maps keys to seed option names."""
    found: dict[str, Any] = {}
    for key, option in aliases:
        if key in values and values[key] is not None and values[key] != "":
            field_name, value = parse_option(option, values[key])
            found[field_name] = value
    return found


BODY_KEYS = [
    *((name, name) for name in OPTION_NAMES),
    *((name.replace("-", "_"), name) for name in OPTION_NAMES),
    ("skip_permissions", "dangerously-skip-permissions"),
]
HEADER_KEYS = [
    ("x-clawlet-workspace", "workspace"),
    ("x-clawlet-session-id", "session-id"),
    ("x-clawlet-allowed-tools", "allowed-tools"),
    ("x-clawlet-disallowed-tools", "disallowed-tools"),
    ("x-clawlet-thinking", "thinking"),
    ("x-clawlet-dangerously-skip-permissions", "dangerously-skip-permissions"),
]


def check_tool_names(options: AgentOptions, known: Iterable[str]) -> None:
    """Unknown tool names in the allow/deny lists are a client error, not silently ignored."""
    names = set(known)
    for param, listed in (
        ("allowed-tools", options.allowed_tools),
        ("disallowed-tools", options.disallowed_tools),
    ):
        unknown = sorted(set(listed or ()) - names)
        if unknown:
            raise OptionError(
                f"unknown tool(s) in {param}: {', '.join(unknown)}; known tools: {', '.join(sorted(names))}",
                param,
            )

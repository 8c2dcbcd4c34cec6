"""The gateway's frame and payload types agree with ``@openclaw/gateway-protocol``'s JSON Schema.

The types (:mod:`clawlet.gateway.protocol`'s frames, :mod:`clawlet.gateway.payloads`) are what mypy
checks the server's payloads against; nothing checks them when a frame is sent. So each type is held
to its schema definition here: it names only properties the schema allows (the definitions forbid
any other) and requires every property the schema requires, nested types included (``schema`` is
conftest's fixture).
"""

from __future__ import annotations

import types
import typing
from typing import Any, NotRequired, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from clawlet.gateway import payloads, protocol
from tests.support.gateway_schema import ProtocolSchema


def _variants(definition: dict[str, Any], states: tuple[str, ...] | None) -> list[dict[str, Any]]:
    """The object shapes of a definition (each branch of an ``anyOf``), only those whose ``state``
    is one of ``states`` when given."""
    shapes = definition.get("anyOf", [definition])
    if states is None:
        return shapes
    return [shape for shape in shapes if shape["properties"]["state"].get("const") in states]


def _nested_typeddict(hint: Any) -> type | None:
    """The TypedDict a field holds (directly, optionally, or as ``X | None``), if any."""
    if get_origin(hint) is NotRequired:
        hint = get_args(hint)[0]
    if is_typeddict(hint):
        return typing.cast(type, hint)
    if isinstance(hint, types.UnionType) or get_origin(hint) is typing.Union:
        found = [arg for arg in get_args(hint) if is_typeddict(arg)]
        return typing.cast(type, found[0]) if len(found) == 1 else None
    return None


def problems_of(
    typed: Any, definition: dict[str, Any], where: str, states: tuple[str, ...] | None = None
) -> list[str]:
    shapes = _variants(definition, states)
    assert shapes, f"{where}: no schema shape to compare with"
    allowed = set().union(*(shape.get("properties", {}) for shape in shapes))
    required = set.intersection(*(set(shape.get("required", [])) for shape in shapes))
    keys = set(typed.__required_keys__) | set(typed.__optional_keys__)
    found = [f"{where}: {name} is not in the schema" for name in sorted(keys - allowed)]
    found += [
        f"{where}: {name} is required by the schema"
        for name in sorted(required - set(typed.__required_keys__))
    ]
    hints = get_type_hints(typed, include_extras=True)
    for name in sorted(keys & allowed):
        nested = _nested_typeddict(hints[name])
        inner = next(
            (shape["properties"][name] for shape in shapes if name in shape.get("properties", {})), {}
        )
        if nested is not None and inner.get("type") == "object":
            found += problems_of(nested, inner, f"{where}.{name}")
    return found


@pytest.mark.parametrize(
    ("typed", "name", "states"),
    [
        (protocol.RequestFrame, "RequestFrame", None),
        (protocol.ResponseFrame, "ResponseFrame", None),
        (protocol.EventFrame, "EventFrame", None),
        (protocol.ErrorShape, "ErrorShape", None),
        (payloads.ConnectParams, "ConnectParams", None),
        (payloads.HelloOk, "HelloOk", None),
        (payloads.ChatEvent, "ChatEvent", get_args(payloads.ChatStateName)),
        (payloads.AgentEvent, "AgentEvent", None),
        (payloads.SessionRow, "SessionRow", None),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_type_matches_schema(
    schema: ProtocolSchema, typed: type, name: str, states: tuple[str, ...] | None
) -> None:
    assert not problems_of(typed, schema.definitions[name], name, states)


def test_every_chat_state_has_a_schema_shape(schema: ProtocolSchema) -> None:
    """Each state the type allows is one the schema knows (so the check above covers all of them)."""
    for state in get_args(payloads.ChatStateName):
        assert _variants(schema.definitions["ChatEvent"], (state,)), state


class Wrong(typing.TypedDict):
    runId: str
    nickname: str


class WrongServer(typing.TypedDict):
    version: str
    flavour: str


class WrongHello(typing.TypedDict):
    type: str
    server: WrongServer


def test_a_type_the_schema_would_refuse_is_caught(schema: ProtocolSchema) -> None:
    """The check itself: an extra property and a missing required one are both reported, nested
    ones too."""

    found = problems_of(Wrong, schema.definitions["AgentEvent"], "AgentEvent")
    assert "AgentEvent: nickname is not in the schema" in found
    assert "AgentEvent: seq is required by the schema" in found
    found = problems_of(WrongHello, schema.definitions["HelloOk"], "HelloOk")
    assert "HelloOk.server: flavour is not in the schema" in found
    assert "HelloOk.server: connId is required by the schema" in found

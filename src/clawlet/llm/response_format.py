"""``ResponseFormat``: the shape a client asked the turn's final answer to have (OpenAI's
``response_format``: ``json_object``, or ``json_schema`` with a JSON Schema).

:func:`parse_response_format` reads the request field (``text`` means none; :func:`parse_text_format`
the Responses API's ``text.format``); :meth:`ResponseFormat.check`
validates an answer (a JSON parse, then the schema with ``jsonschema``); :meth:`ResponseFormat.for_provider`
gives the model-call arguments that ask the provider for it natively: OpenAI-compatible providers
get OpenAI's ``response_format`` (sent as ``extra_body``, so LangChain streams it like any other
answer), DeepSeek its ``json_object`` mode, Anthropic nothing (the answer is still validated), and
the offline demo model builds an answer from the schema (:func:`example_for_schema`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

FormatKind = Literal["json_object", "json_schema"]

FORMATS_WITH_TOOLS = frozenset({"demo"})
"""Providers asked for the format natively even on calls that offer tools (it does not keep them
from calling one); others get it only on calls without tools (see :mod:`clawlet.engine.structured`)."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.S | re.I)
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ResponseFormatError(ValueError):
    """The request's ``response_format`` is malformed or of an unknown type."""


class SchemaUnusable(ValueError):
    """Checking a value against the schema failed (e.g. a ``$ref`` that cannot be resolved)."""


def schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """Where and why ``value`` does not match ``schema`` (``None`` when it does); raise
    :class:`SchemaUnusable` when the schema cannot be checked."""
    import jsonschema  # when the first schema is checked, not at server start (see clawlet.cli)

    try:
        problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    except Exception as exc:  # referencing errors, bad regexes...: whatever the validator raises
        raise SchemaUnusable(f"the schema cannot be checked: {type(exc).__name__}: {exc}") from exc
    if problem is None:
        return None
    where = "/".join(str(part) for part in problem.absolute_path) or "(the top level)"
    return f"at {where}: {problem.message}"


@dataclass(frozen=True)
class ResponseFormat:
    """``schema_json`` is the JSON Schema as canonical JSON text (``""`` for ``json_object``)."""

    kind: FormatKind
    name: str = ""
    schema_json: str = ""
    strict: bool | None = None

    @property
    def schema(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.schema_json) if self.schema_json else {}
        return loaded

    def wire(self) -> dict[str, Any]:
        """The OpenAI request field this came from."""
        if self.kind == "json_object":
            return {"type": "json_object"}
        spec: dict[str, Any] = {"name": self.name, "schema": self.schema}
        if self.strict is not None:
            spec["strict"] = self.strict
        return {"type": "json_schema", "json_schema": spec}

    def for_provider(self, provider: str) -> dict[str, Any]:
        """The model-call arguments that ask ``provider`` for this format natively."""
        if provider == "demo":
            return {"response_format": self.wire()}
        if provider == "deepseek":
            return {"extra_body": {"response_format": {"type": "json_object"}}}
        if provider == "anthropic":
            return {}
        return {"extra_body": {"response_format": self.wire()}}

    def instruction(self) -> str:
        """What the system prompt tells the model about its final answer."""
        if self.kind == "json_object":
            return "Your final answer (after any tool calls) must be one JSON object and nothing else."
        return (
            "Your final answer (after any tool calls) must be one JSON value and nothing else, "
            f"valid against this JSON Schema ({self.name}):\n{self.schema_json}"
        )

    def check(self, text: str) -> tuple[str, str]:
        """``(json_text, "")`` for a valid answer (a surrounding ```json fence removed), else
        ``("", why_not)``."""
        fenced = _FENCE.match(text)
        candidate = (fenced.group(1) if fenced else text).strip()
        try:
            value = json.loads(candidate)
        except ValueError as exc:
            return "", f"it is not valid JSON ({exc})"
        if self.kind == "json_object":
            return (candidate, "") if isinstance(value, dict) else ("", "it is not a JSON object")
        try:
            problem = schema_error(self.schema, value)
        except SchemaUnusable as exc:
            return "", str(exc)
        return (candidate, "") if problem is None else ("", f"it does not match the schema {problem}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "schema": self.schema_json, "strict": self.strict}

    @classmethod
    def from_json(cls, data: Any) -> ResponseFormat | None:
        """What :meth:`to_json` wrote; ``None`` for anything else."""
        if not isinstance(data, Mapping) or data.get("kind") not in ("json_object", "json_schema"):
            return None
        strict = data.get("strict")
        return cls(
            kind=data["kind"],
            name=str(data.get("name") or ""),
            schema_json=str(data.get("schema") or ""),
            strict=strict if isinstance(strict, bool) else None,
        )


def parse_response_format(raw: Any) -> ResponseFormat | None:
    """The request's ``response_format`` (``None`` for none or ``text``); raise
    :class:`ResponseFormatError` saying what is wrong."""
    return _parse_format(raw, "response_format", lambda raw: raw.get("json_schema"), ".json_schema")


def parse_text_format(raw: Any) -> ResponseFormat | None:
    """The Responses API's ``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``
    at its top level, where ``response_format`` nests them under ``json_schema``), the same way."""
    return _parse_format(raw, "text.format", lambda raw: raw, "")


def _parse_format(
    raw: Any, field: str, spec_of: Callable[[Mapping[str, Any]], Any], nested: str
) -> ResponseFormat | None:
    """A format in either shape: ``spec_of`` finds the json_schema spec (``name``, ``schema``,
    ``strict``) in ``raw``, which errors call ``field`` + ``nested``."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ResponseFormatError(f"{field} must be an object with a 'type'")
    kind = raw.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind != "json_schema":
        raise ResponseFormatError(
            f"{field} type {kind!r} is not supported: use 'text', 'json_object' or 'json_schema'"
        )
    where = field + nested
    spec = spec_of(raw)
    if not isinstance(spec, Mapping):
        raise ResponseFormatError(f"{where} must be an object with 'name' and 'schema'")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ResponseFormatError(f"{where}.name must be 1-64 letters, digits, '_' or '-'")
    schema = spec.get("schema", {})
    if not isinstance(schema, Mapping):
        raise ResponseFormatError(f"{where}.schema must be a JSON Schema object")
    import jsonschema
    from jsonschema.exceptions import SchemaError

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ResponseFormatError(f"{where}.schema is not a valid JSON Schema: {exc.message}") from exc
    try:
        schema_error(schema, example_for_schema(schema, ""))
    except SchemaUnusable as exc:
        raise ResponseFormatError(f"{where}.schema cannot be used: {exc}") from exc
    strict = spec.get("strict")
    return ResponseFormat(
        "json_schema",
        name=name,
        schema_json=json.dumps(schema, sort_keys=True, ensure_ascii=False),
        strict=strict if isinstance(strict, bool) else None,
    )


EXAMPLE_DEPTH = 12
"""How deep :func:`example_for_schema` builds (a recursive schema gets empty arrays, then ``None``)."""


def example_for_schema(schema: Any, text: str, root: Any = None, depth: int = 0) -> Any:
    """A value valid against the common parts of ``schema`` (objects with their properties, arrays,
    enums, ``const``, ``anyOf``/``oneOf``/``allOf`` (``null`` when it is a choice), local ``$ref``s),
    strings filled with ``text``:
    what the offline demo model answers."""
    root = schema if root is None else root
    if depth > EXAMPLE_DEPTH * 2 or not isinstance(schema, Mapping):
        return None  # also for the boolean schemas (true accepts anything)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return example_for_schema(target, text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if key != "allOf" and {"type": "null"} in options:
                return None  # an optional value: left out, and no recursion into it
            return example_for_schema(options[0], text, root, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {key: example_for_schema(value, text, root, depth + 1) for key, value in properties.items()}
    if kind == "array":
        items = schema.get("items")
        count = int(schema.get("minItems", 1 if isinstance(items, Mapping) and depth < EXAMPLE_DEPTH else 0))
        return (
            [example_for_schema(items, text, root, depth + 1) for _ in range(count)]
            if isinstance(items, Mapping)
            else []
        )
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return text

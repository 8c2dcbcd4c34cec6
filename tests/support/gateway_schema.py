"""Validate gateway frames against the JSON Schema shipped in ``@openclaw/gateway-protocol``.

The package version is pinned in ``tests/support/gateway-protocol/package-lock.json``;
:func:`load_protocol_schema` installs it with ``npm ci`` the first time (the npm registry is the
only network the tests need for it). Every frame is checked against the envelope
(``GatewayFrame``) and then, where the schema names one, against the definition for its method's
params, its response payload or its event payload.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

PACKAGE_DIR = Path(__file__).parent / "gateway-protocol"
SCHEMA_FILE = PACKAGE_DIR / "node_modules" / "@openclaw" / "gateway-protocol" / "protocol.schema.json"

REQUEST_PARAMS = {
    "connect": "ConnectParams",
    "chat.send": "ChatSendParams",
    "chat.abort": "ChatAbortParams",
    "chat.history": "ChatHistoryParams",
    "sessions.list": "SessionsListParams",
    "agents.list": "AgentsListParams",
    "models.list": "ModelsListParams",
    "agent": "AgentParams",
    "agent.wait": "AgentWaitParams",
    "logs.tail": "LogsTailParams",
    "config.get": "ConfigGetParams",
    "sessions.describe": "SessionsDescribeParams",
    "commands.list": "CommandsListParams",
    "question.list": "QuestionListParams",
    "sessions.resolve": "SessionsResolveParams",
    "sessions.create": "SessionsCreateParams",
    "sessions.patch": "SessionsPatchParams",
    "sessions.reset": "SessionsResetParams",
    "sessions.delete": "SessionsDeleteParams",
    "sessions.compact": "SessionsCompactParams",
}
RESPONSE_PAYLOADS = {
    "connect": "HelloOk",
    "agents.list": "AgentsListResult",
    "models.list": "ModelsListResult",
    "logs.tail": "LogsTailResult",
    "commands.list": "CommandsListResult",
    "question.list": "QuestionListResult",
    "sessions.resolve": "SessionsResolveResult",
    "sessions.create": "SessionsCreateResult",
    "sessions.delete": "SessionsDeleteResult",
}
#: Methods answered with an array, and the definition of each item.
RESPONSE_ITEMS = {"system-presence": "PresenceEntry"}
EVENT_PAYLOADS = {
    "chat": "ChatEvent",
    "tick": "TickEvent",
    "agent": "AgentEvent",
    "shutdown": "ShutdownEvent",
}


class SchemaUnavailable(RuntimeError):
    """npm or the registry is missing, so the schema could not be installed."""


def install_schema_package() -> Path:
    if SCHEMA_FILE.is_file():
        return SCHEMA_FILE
    # one `npm ci` at a time: the fast set's xdist workers (`pytest -n 4`) may all get here at once
    with (PACKAGE_DIR / "package-lock.json").open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return SCHEMA_FILE if SCHEMA_FILE.is_file() else run_npm_ci()


def run_npm_ci() -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise SchemaUnavailable("npm is not installed; it is needed to fetch @openclaw/gateway-protocol")
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts"],
        cwd=PACKAGE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 or not SCHEMA_FILE.is_file():
        raise SchemaUnavailable(f"npm ci failed in {PACKAGE_DIR}: {result.stderr.strip()[-2000:]}")
    return SCHEMA_FILE


class ProtocolSchema:
    """The protocol's definitions, each usable as a Draft 7 validator."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.definitions: dict[str, Any] = document["definitions"]
        self._validators: dict[str, jsonschema.Draft7Validator] = {}

    def validator(self, name: str) -> jsonschema.Draft7Validator:
        found = self._validators.get(name)
        if found is None:
            schema = {"$ref": f"#/definitions/{name}", "definitions": self.definitions}
            found = jsonschema.Draft7Validator(schema)
            self._validators[name] = found
        return found

    def errors(self, name: str, instance: Any) -> list[str]:
        return [
            f"{name}{''.join(f'[{p!r}]' for p in error.absolute_path)}: {error.message}"
            for error in self.validator(name).iter_errors(instance)
        ]

    def frame_errors(
        self, frame: dict[str, Any], *, method: str | None = None, protocol: int = 4
    ) -> list[str]:
        """Every schema violation of one frame. ``method`` names the request a ``res`` answers."""
        problems = self.errors("GatewayFrame", frame) if "GatewayFrame" in self.definitions else []
        for envelope in ("RequestFrame", "ResponseFrame", "EventFrame"):
            kind = {"RequestFrame": "req", "ResponseFrame": "res", "EventFrame": "event"}[envelope]
            if frame.get("type") == kind:
                problems += self.errors(envelope, frame)
        if frame.get("type") == "req":
            name = REQUEST_PARAMS.get(str(frame.get("method")))
            if name:
                problems += self.errors(name, frame.get("params", {}))
        elif frame.get("type") == "res":
            if frame.get("ok") is False:
                problems += self.errors("ErrorShape", frame.get("error"))
            else:
                name = RESPONSE_PAYLOADS.get(method or "")
                if name:
                    problems += self.errors(name, frame.get("payload"))
                item = RESPONSE_ITEMS.get(method or "")
                if item:
                    payload = frame.get("payload")
                    if not isinstance(payload, list):
                        problems.append(f"{method} must answer an array: {payload!r:.200}")
                    else:
                        for entry in payload:
                            problems += self.errors(item, entry)
        elif frame.get("type") == "event":
            name = EVENT_PAYLOADS.get(str(frame.get("event")))
            payload = frame.get("payload")
            v3_delta = isinstance(payload, dict) and payload.get("state") == "delta" and protocol < 4
            if name == "ChatEvent" and v3_delta and isinstance(payload, dict):
                payload = {**payload, "deltaText": payload.get("deltaText", "")}
            if name:
                problems += self.errors(name, payload)
            challenge_ok = (
                isinstance(payload, dict)
                and isinstance(payload.get("nonce"), str)
                and isinstance(payload.get("ts"), int)
            )
            if frame.get("event") == "connect.challenge" and not challenge_ok:
                problems.append(f"connect.challenge payload needs nonce and ts: {payload!r}")
        return problems

    def assert_frames_valid(self, frames: list[tuple[dict[str, Any], str | None]], protocol: int = 4) -> int:
        """Check (frame, method-answered) pairs; raise AssertionError listing every violation."""
        problems = []
        for frame, method in frames:
            for problem in self.frame_errors(frame, method=method, protocol=protocol):
                problems.append(f"{problem}\n    in {json.dumps(frame, ensure_ascii=False)[:400]}")
        assert not problems, "frames violate the gateway protocol schema:\n" + "\n".join(problems)
        return len(frames)


@cache
def load_protocol_schema() -> ProtocolSchema:
    path = install_schema_package()
    return ProtocolSchema(json.loads(path.read_text(encoding="utf-8")))

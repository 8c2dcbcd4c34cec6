"""Agents from ``openclaw.json``, the inbox's only source of agents (never the database).

Reads both shapes OpenClaw has used: the inbox seed's ``agents.list: [{id, name, workspace,
agentDir, model}]`` and current OpenClaw's ``agents.entries.<id>``. The inbox lists ``main`` plus
the agents main may delegate to (``subagents.allowAgents`` of main, else of ``agents.defaults``;
``"*"`` means every configured agent). Creating an agent registers it in the shape the file already
uses, adds it to ``tools.agentToAgent.allow`` and to main's ``subagents.allowAgents``, creates its
workspace and agent directories (through the path guard ``clawlet.paths``: none may lead out of
the OpenClaw state directory by a symlink), and rewrites the file atomically with every other key
kept.
There is deliberately no update or delete: clawlet creates, but never changes or removes, what
OpenClaw owns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import json5

from clawlet.paths import UnsafePath, resolve_inside
from clawlet.storage import atomic_write_json, file_lock

AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_AGENT_ID = 64
MAX_NAME = 100
MAX_DESCRIPTION = 500
MAIN = "main"


class AgentConfigError(Exception):
    """openclaw.json cannot be read, or cannot be rewritten without losing something."""


class ConfigNotRewritable(AgentConfigError):
    """openclaw.json is JSON5 (comments, trailing commas): rewriting it would lose them."""


class AgentExists(Exception):
    """An agent with this id is already configured."""


class InvalidAgent(ValueError):
    """A create request with a bad id, name or model."""


@dataclass(frozen=True)
class AgentInfo:
    id: str
    name: str
    model: str | None
    is_default: bool
    workspace: str | None = None
    description: str | None = None

    def to_json(self, timestamp_ms: int) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name}
        if self.description:
            data["description"] = self.description
        if self.model:
            data["model"] = self.model
        data["isDefault"] = self.is_default
        data["createdAt"] = timestamp_ms
        data["updatedAt"] = timestamp_ms
        return data


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    provider: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "provider": self.provider}


def _model_name(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, dict):
        primary = value.get("primary")
        if isinstance(primary, str) and primary.strip():
            return primary.strip()
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class OpenClawAgents:
    """Agents and models of one ``openclaw.json`` (which may not exist yet)."""

    def __init__(self, config_file: Path) -> None:
        self.config_file = config_file

    @property
    def state_dir(self) -> Path:
        return self.config_file.parent

    # -- reading ---------------------------------------------------------------------------------

    def _read(self) -> tuple[dict[str, Any], bool]:
        """The parsed file and whether it is strict JSON (JSON5 with comments can't be rewritten
        without losing them)."""
        try:
            text = self.config_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, True
        except OSError as exc:
            raise AgentConfigError(f"cannot read {self.config_file}: {exc}") from exc
        if not text.strip():
            return {}, True
        try:
            data, strict = json.loads(text), True
        except ValueError:
            try:
                data, strict = json5.loads(text), False
            except ValueError as exc:
                raise AgentConfigError(f"{self.config_file} is neither JSON nor JSON5: {exc}") from exc
        if not isinstance(data, dict):
            raise AgentConfigError(f"{self.config_file} must hold a JSON object")
        return data, strict

    @staticmethod
    def _entries(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Every configured agent by id, from either shape."""
        agents = _dict(config.get("agents"))
        found: dict[str, dict[str, Any]] = {}
        for entry in agents.get("list") or []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                found[entry["id"]] = entry
        for agent_id, entry in _dict(agents.get("entries")).items():
            if isinstance(entry, dict):
                found[agent_id] = {"id": agent_id, **entry}
        return found

    @staticmethod
    def _allowed(config: dict[str, Any], entries: dict[str, dict[str, Any]]) -> list[str]:
        agents = _dict(config.get("agents"))
        main_entry = entries.get(MAIN, {})
        allow = _dict(main_entry.get("subagents")).get("allowAgents")
        if allow is None:
            allow = _dict(_dict(agents.get("defaults")).get("subagents")).get("allowAgents")
        ids = [item for item in allow or [] if isinstance(item, str)]
        if "*" in ids:
            return [agent_id for agent_id in entries if agent_id != MAIN]
        return [agent_id for agent_id in dict.fromkeys(ids) if agent_id != MAIN]

    @staticmethod
    def _default_model(config: dict[str, Any]) -> str | None:
        return _model_name(_dict(_dict(config.get("agents")).get("defaults")).get("model"))

    def _info(self, agent_id: str, entry: dict[str, Any], default_model: str | None) -> AgentInfo:
        name = entry.get("name") or _dict(entry.get("identity")).get("name") or agent_id
        workspace = entry.get("workspace")
        description = entry.get("description")
        return AgentInfo(
            id=agent_id,
            name=str(name),
            model=_model_name(entry.get("model")) or default_model,
            is_default=agent_id == MAIN,
            workspace=workspace if isinstance(workspace, str) else None,
            description=description.strip() or None if isinstance(description, str) else None,
        )

    def list_agents(self) -> list[AgentInfo]:
        """``main`` first, then the agents main may delegate to, in configuration order."""
        config, _ = self._read()
        entries = self._entries(config)
        default_model = self._default_model(config)
        agents = [self._info(MAIN, entries.get(MAIN, {}), default_model)]
        for agent_id in self._allowed(config, entries):
            agents.append(self._info(agent_id, entries.get(agent_id, {}), default_model))
        return agents

    def list_models(self) -> list[ModelInfo]:
        """The model catalog ``agents.defaults.models`` (keys ``provider/model``); without one,
        the default model alone, if configured."""
        config, _ = self._read()
        defaults = _dict(_dict(config.get("agents")).get("defaults"))
        catalog = defaults.get("models")
        keys: list[str] = []
        aliases: dict[str, str] = {}
        if isinstance(catalog, dict):
            for key, value in catalog.items():
                keys.append(key)
                alias = _dict(value).get("alias")
                if isinstance(alias, str) and alias:
                    aliases[key] = alias
        elif isinstance(catalog, list):
            keys = [item for item in catalog if isinstance(item, str)]
        default_model = self._default_model(config)
        if not keys and default_model:
            keys = [default_model]
        models = []
        for key in keys:
            provider, _, model = key.partition("/")
            models.append(ModelInfo(id=key, name=aliases.get(key) or model or key, provider=provider or key))
        return models

    # -- creating --------------------------------------------------------------------------------

    def create_agent(
        self, agent_id: str, name: str, model: str | None = None, description: str | None = None
    ) -> AgentInfo:
        """Register a new agent (see the module docstring for every side effect)."""
        agent_id = agent_id.strip()
        name = name.strip()
        if len(agent_id) > MAX_AGENT_ID or not AGENT_ID.fullmatch(agent_id):
            raise InvalidAgent(
                f"agent id {agent_id!r} must be 1-{MAX_AGENT_ID} lower-case letters, digits or '-', "
                "starting with a letter or digit"
            )
        if not name or len(name) > MAX_NAME:
            raise InvalidAgent(f"name must be 1-{MAX_NAME} characters")
        model = model.strip() if model else None
        description = description.strip() if description else None
        if description and len(description) > MAX_DESCRIPTION:
            raise InvalidAgent(f"description must be at most {MAX_DESCRIPTION} characters")
        with file_lock(self.config_file):
            config, strict = self._read()
            entries = self._entries(config)
            if agent_id == MAIN or agent_id in entries or agent_id in self._allowed(config, entries):
                raise AgentExists(f"agent {agent_id!r} already exists in {self.config_file}")
            catalog = [item.id for item in self.list_models()] if config else []
            if model and catalog and model not in catalog:
                raise InvalidAgent(f"unknown model {model!r} (configured: {', '.join(catalog)})")
            if not strict:
                raise ConfigNotRewritable(
                    f"{self.config_file} uses JSON5 (comments or trailing commas); clawlet will not "
                    "rewrite it and lose them. Add the agent with OpenClaw itself, or make the file "
                    "plain JSON."
                )
            self._register(config, agent_id, name, model, description)
            for directory in (
                self.state_dir / f"workspace-{agent_id}",
                self.state_dir / "agents" / agent_id / "agent",
                self.state_dir / "agents" / agent_id / "sessions",
            ):
                try:
                    resolve_inside(self.state_dir, directory).mkdir(parents=True, exist_ok=True)
                except UnsafePath as exc:
                    raise AgentConfigError(f"refusing to create {directory}: {exc}") from exc
            atomic_write_json(self.config_file, config)
        return AgentInfo(agent_id, name, model or self._default_model(config), False, None, description)

    def _register(
        self, config: dict[str, Any], agent_id: str, name: str, model: str | None, description: str | None
    ) -> None:
        agents = config.setdefault("agents", {})
        if not isinstance(agents, dict):
            raise AgentConfigError(f"'agents' in {self.config_file} is not an object")
        entry: dict[str, Any] = {
            "name": name,
            "workspace": str(self.state_dir / f"workspace-{agent_id}"),
            "agentDir": str(self.state_dir / "agents" / agent_id / "agent"),
        }
        if description:
            entry["description"] = description  # a key OpenClaw's agent schema has
        if model:
            entry["model"] = model
        uses_list = isinstance(agents.get("list"), list) and not isinstance(agents.get("entries"), dict)
        if uses_list:
            listed: list[Any] = agents["list"]
            listed.append({"id": agent_id, **entry})
            main_entry = next(
                (item for item in listed if isinstance(item, dict) and item.get("id") == MAIN), None
            )
            if main_entry is None:
                main_entry = {"id": MAIN}
                listed.insert(0, main_entry)
        else:
            table = agents.setdefault("entries", {})
            if not isinstance(table, dict):
                raise AgentConfigError(f"'agents.entries' in {self.config_file} is not an object")
            table[agent_id] = entry
            main_entry = table.setdefault(MAIN, {})
            if not isinstance(main_entry, dict):
                raise AgentConfigError(f"'agents.entries.main' in {self.config_file} is not an object")
        # the allow list lives in main's entry, or in agents.defaults when only that one exists
        defaults_allow = _dict(_dict(agents.get("defaults")).get("subagents")).get("allowAgents")
        main_allow = _dict(main_entry.get("subagents")).get("allowAgents")
        if main_allow is None and isinstance(defaults_allow, list):
            allow = defaults_allow
        else:
            allow = main_entry.setdefault("subagents", {}).setdefault("allowAgents", [])
        if agent_id not in allow and "*" not in allow:
            allow.append(agent_id)
        tools = config.setdefault("tools", {})
        agent_to_agent = tools.setdefault("agentToAgent", {})
        allowed = agent_to_agent.setdefault("allow", [])
        if agent_id not in allowed and "*" not in allowed:
            allowed.append(agent_id)

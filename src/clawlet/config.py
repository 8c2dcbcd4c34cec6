"""Settings (environment and ``.env``) and runtime switches persisted in ``config.json``.

Environment variables keep the seed's names (``DEEPSEEK_API_KEY``, ``OPENAI_BASE_URL``, ...);
clawlet's own settings use the ``CLAWLET_`` prefix. Secrets moved out of the environment at start
(:mod:`clawlet.secret_env`) are read as if they were still environment variables.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from clawlet.filememo import FileMemo
from clawlet.paths import UnsafePath, read_text_inside
from clawlet.secret_env import held_secrets
from clawlet.storage import atomic_write_json, file_lock

log = logging.getLogger(__name__)

ProviderName = Literal["auto", "demo", "openai", "deepseek", "anthropic"]
ApprovalPolicy = Literal["allow", "ask", "deny"]
SandboxMode = Literal["off", "auto", "bubblewrap"]  # see clawlet.tools.sandbox
APPROVAL_POLICIES: tuple[str, ...] = get_args(ApprovalPolicy)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only listens on the loopback interface."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_home() -> Path:
    """The clawlet home: ``$CLAWLET_HOME`` or ``~/.clawlet``."""
    raw = os.environ.get("CLAWLET_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".clawlet"


def url_password(url: str) -> str | None:
    """The password in a URL's ``user:password@`` part (a database URL's), if any."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


class HeldSecretsSource(EnvSettingsSource):
    """The secrets :mod:`clawlet.secret_env` moved out of the environment, read with the same names,
    prefix and aliases as environment variables."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            held_secrets(), self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


LogFormat = Literal["json", "text"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class LogSettings(BaseSettings):
    """``CLAWLET_LOG_FORMAT`` and ``CLAWLET_LOG_LEVEL``: part of :class:`Settings`, and alone what a
    child process (engine worker, session template, session process) reads to configure its logging,
    from its environment only (not ``.env`` in its working directory, which may be a user's
    workspace, and without validating every other setting)."""

    model_config = SettingsConfigDict(env_prefix="CLAWLET_", extra="ignore")

    log_format: LogFormat = "json"
    log_level: LogLevel = "INFO"


class Settings(LogSettings):
    """Everything configurable from the environment, the secrets held in memory or a ``.env`` file."""

    model_config = SettingsConfigDict(
        env_prefix="CLAWLET_",
        env_file=(".env",),
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
    )

    home: Path = Field(default_factory=default_home)
    host: str = "127.0.0.1"
    port: int = 8002
    api_token: str | None = Field(default=None, validation_alias=AliasChoices("CLAWLET_API_TOKEN", "API_KEY"))
    api_keys: str | None = Field(
        default=None, validation_alias=AliasChoices("CLAWLET_API_KEYS", "API_KEYS")
    )  # several accepted tokens, comma-separated
    #: further names the server answers to in ``Host`` (comma-separated, ``name`` or ``name:port``;
    #: ``*``: any), beyond localhost and its own addresses (see clawlet.api.origin_guard)
    allowed_hosts: str | None = None
    #: browser origins (``https://name[:port]``, comma-separated; ``*``: any) besides the server's own
    #: that may open WebSockets and send state-changing requests
    allowed_origins: str | None = None

    workspace_base: Path | None = Field(
        default=None, validation_alias=AliasChoices("CLAWLET_WORKSPACE_BASE", "WORKSPACE_BASE")
    )

    provider: ProviderName = "auto"
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    temperature: float = 0.7
    #: refuse to build a chat model whose endpoint is not on loopback (the test suite sets it: no
    #: test may reach a real provider; clawlet.llm.providers)
    loopback_models_only: bool = False

    deepseek_api_key: str | None = Field(default=None, validation_alias="DEEPSEEK_API_KEY")
    deepseek_base_url: str = Field(default="https://api.deepseek.com", validation_alias="DEEPSEEK_BASE_URL")
    deepseek_model: str = Field(default="deepseek-chat", validation_alias="DEEPSEEK_MODEL")
    openai_api_key: str | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    embedding_model: str = Field(default="text-embedding-3-small", validation_alias="EMBEDDING_MODEL")
    anthropic_api_key: str | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_model: str = Field(
        default="claude-sonnet-4-5",
        validation_alias=AliasChoices("CLAWLET_ANTHROPIC_MODEL", "ANTHROPIC_MODEL"),
    )

    max_model_calls: int = Field(default=25, ge=1)
    max_tool_calls: int = Field(default=50, ge=1)
    terminal_timeout: float = Field(default=30.0, gt=0)
    python_timeout: float = Field(default=30.0, gt=0)
    #: the OS sandbox of terminal, python_repl and MCP servers: ``auto`` (bubblewrap when it works),
    #: ``bubblewrap`` (required: those tools refuse to run without it) or ``off``
    sandbox: SandboxMode = "auto"
    #: ``clawlet serve`` runs agent turns on this many engine worker processes (0: in the server's
    #: own process); the server keeps the sessions, transcripts and streams (clawlet.runtime.engine_pool)
    engine_workers: int = Field(default=0, ge=0, le=64)
    #: an exec plane forks its session processes from a pre-loaded template process (Linux); off:
    #: each one is a fresh interpreter (clawlet.execplane.session_template)
    session_template: bool = True
    fetch_timeout: float = Field(default=15.0, gt=0)
    max_upload_bytes: int = Field(default=20 * 1024 * 1024, ge=1)  # PUT /process body limit

    # -- the task inbox (seed 004) ---------------------------------------------------------------
    #: SQLAlchemy URL of the inbox database; default ``sqlite:///<home>/data/agent_channel_v2.db``
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("CLAWLET_DATABASE_URL", "DATABASE_URL")
    )
    #: where inbox tasks run: ``local`` (clawlet's own engine) or ``gateway`` (an OpenClaw gateway)
    inbox_backend: Literal["local", "gateway"] = "local"
    openclaw_config_path: Path | None = Field(
        default=None, validation_alias=AliasChoices("CLAWLET_OPENCLAW_CONFIG", "OPENCLAW_CONFIG_PATH")
    )
    openclaw_gateway_url: str = Field(default="ws://127.0.0.1:18789", validation_alias="OPENCLAW_GATEWAY_URL")
    openclaw_gateway_token: str | None = Field(default=None, validation_alias="OPENCLAW_GATEWAY_TOKEN")
    #: how long one gateway run may take, in milliseconds (the seed's unit)
    openclaw_gateway_timeout: int = Field(default=300_000, ge=1, validation_alias="OPENCLAW_GATEWAY_TIMEOUT")
    #: seconds of silence after which an inbox SSE stream sends a ``heartbeat`` event
    inbox_heartbeat_seconds: float = Field(default=30.0, gt=0)
    #: inbox tasks running at once; more wait as ``pending``
    inbox_max_running: int = Field(default=8, ge=1)

    # -- clawlet as a gateway --------------------------------------------------------------------
    #: token OpenClaw clients must send in ``connect``; default: the API tokens (none on loopback)
    gateway_token: str | None = None
    #: also serve the gateway protocol on its own port (at ``/``), as OpenClaw does on 18789
    gateway_port: int | None = None
    gateway_tick_interval_ms: int = Field(default=30_000, ge=10)

    # -- cluster mode ----------------------------------------------------------------------------
    # Read by ``clawlet control-plane`` and ``clawlet exec-plane`` only. ``exclude=True``: never in a
    # dump of the settings (what a session process or ``config.get`` is given).
    #: the control plane's VM-token signing secret; default: ``<data dir>/jwt_secret``
    cp_jwt_secret: str | None = Field(default=None, exclude=True)
    #: the control plane's database; default: ``sqlite:///<data dir>/controlplane.db``
    cp_database_url: str | None = Field(default=None, exclude=True)
    #: the broker shared by control-plane instances (``redis://…``); default: in-process
    redis_url: str | None = Field(default=None, exclude=True)
    #: events the control plane's log keeps per session (checked by ``clawlet control-plane``)
    cp_event_log_max_events: str | None = None
    #: days after a session's last event that the control plane drops its events (checked there too)
    cp_event_log_max_age_days: str | None = None
    #: the execution plane's user, VM token, one-time ticket and control plane (seed §5's names)
    vm_user_id: str | None = Field(default=None, validation_alias="USER_ID", exclude=True)
    vm_token: str | None = Field(default=None, validation_alias="VM_TOKEN", exclude=True)
    vm_ticket: str | None = Field(default=None, validation_alias="VM_TICKET", exclude=True)
    control_plane_ws: str | None = Field(default=None, validation_alias="CONTROL_PLANE_WS", exclude=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The held secrets rank with the environment they came from: above ``.env``."""
        held = HeldSecretsSource(settings_cls)
        return init_settings, env_settings, held, dotenv_settings, file_secret_settings

    @property
    def secret_values(self) -> frozenset[str]:
        """Every configured key, token and password, and the held secrets: what a tool's output must
        never show (see :mod:`clawlet.engine.masking`)."""
        values = {
            *self.accepted_tokens,
            *self.gateway_tokens,
            self.llm_api_key,
            self.deepseek_api_key,
            self.openai_api_key,
            self.anthropic_api_key,
            self.openclaw_gateway_token,
            url_password(self.database_url or ""),
        }
        for value in held_secrets().values():
            values.update({value, url_password(value), *value.split(",")})
        return frozenset(value.strip() for value in values if value and value.strip())

    @property
    def resolved_provider(self) -> Literal["demo", "openai", "deepseek", "anthropic"]:
        """The provider actually used: ``auto`` picks the first one with a key, else ``demo``."""
        if self.provider != "auto":
            return self.provider
        if self.llm_base_url and self.llm_model:
            return "openai"
        if self.deepseek_api_key:
            return "deepseek"
        if self.anthropic_api_key:
            return "anthropic"
        return "demo"

    @property
    def listens_beyond_loopback(self) -> bool:
        """True when the server is reachable from other machines (``--host`` not a loopback address)."""
        return not is_loopback(self.host)

    @property
    def accepted_tokens(self) -> list[str]:
        """Every bearer token the server accepts; empty means auth is off (loopback only)."""
        tokens = [self.api_token] if self.api_token else []
        tokens += [part.strip() for part in (self.api_keys or "").split(",") if part.strip()]
        return tokens

    @property
    def gateway_tokens(self) -> list[str]:
        """Tokens accepted in a gateway ``connect``: ``CLAWLET_GATEWAY_TOKEN``, else the API tokens."""
        return [self.gateway_token] if self.gateway_token else self.accepted_tokens

    @property
    def openclaw_config_file(self) -> Path:
        """``openclaw.json``: the configured path, ``$OPENCLAW_STATE_DIR/openclaw.json``, or
        ``~/.openclaw/openclaw.json``."""
        if self.openclaw_config_path:
            return self.openclaw_config_path.expanduser()
        state_dir = os.environ.get("OPENCLAW_STATE_DIR")
        base = Path(state_dir).expanduser() if state_dir else Path.home() / ".openclaw"
        return base / "openclaw.json"

    @property
    def inbox_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.paths.root / 'data' / 'agent_channel_v2.db'}"

    @property
    def workspaces_root(self) -> Path:
        """Where named workspaces live: ``$WORKSPACE_BASE`` or ``<home>/workspaces``."""
        base = self.workspace_base or self.home / "workspaces"
        return base.expanduser().resolve()

    @property
    def paths(self) -> HomePaths:
        return HomePaths(self.home.expanduser().resolve())


# The most characters of one home file (AGENTS.md, SOUL.md, MEMORY.md, ...) the system prompt takes;
# save_memory refuses a fact that would grow MEMORY.md past it.
MAX_COMPONENT_CHARS = 20_000


@dataclass(frozen=True)
class HomePaths:
    """Where everything lives under the clawlet home."""

    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def memory_file(self) -> Path:
        return self.root / "memory" / "MEMORY.md"

    @property
    def skills(self) -> Path:
        return self.root / "skills"

    @property
    def knowledge(self) -> Path:
        return self.root / "knowledge"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def skills_snapshot(self) -> Path:
        return self.root / "SKILLS_SNAPSHOT.md"

    @property
    def config_file(self) -> Path:
        return self.root / "config.json"


TOOL_APPROVALS_KEY = "tool_approvals"
SANDBOX_KEY = "sandbox"


RUNTIME_CONFIG_FILES: FileMemo[dict[str, object]] = FileMemo()


def _read_runtime_config(path: Path) -> dict[str, object]:
    """A ``config.json`` as an object; ``{}`` if missing, unreadable or linked out of its home."""
    try:
        data = json.loads(read_text_inside(path.parent, path))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    except (UnsafePath, UnicodeDecodeError) as exc:  # a config.json linked out of the home
        log.warning("ignoring %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


class RuntimeConfig:
    """Switches changed at run time (RAG mode, tool approval policies) persisted atomically in
    ``config.json``.

    ``tool_approvals`` maps tool names to ``allow``, ``ask`` or ``deny`` (see
    :mod:`clawlet.engine.tool_approvals`). A named workspace's config has the main home's as ``parent``:
    the main home's policies apply to every workspace, and a workspace's own entries win."""

    def __init__(self, path: Path, parent: RuntimeConfig | None = None) -> None:
        self.path = path
        self.parent = parent

    def _read(self) -> dict[str, object]:
        """The file's object (a copy: writers change its top-level keys), read again only when the
        file changed (it is read before every model call)."""
        return dict(RUNTIME_CONFIG_FILES.get(self.path, _read_runtime_config))

    def get_rag_mode(self) -> bool:
        return bool(self._read().get("rag_mode", False))

    def set_rag_mode(self, enabled: bool) -> None:
        with file_lock(self.path):
            data = self._read()
            data["rag_mode"] = enabled
            atomic_write_json(self.path, data, root=self.path.parent)

    def get_tool_approvals(self) -> dict[str, ApprovalPolicy]:
        """This file's own approval policies (entries that are not valid policies are ignored)."""
        raw = self._read().get(TOOL_APPROVALS_KEY)
        if not isinstance(raw, dict):
            return {}
        return {str(name): value for name, value in raw.items() if value in APPROVAL_POLICIES}

    def inherited_tool_approvals(self) -> dict[str, ApprovalPolicy]:
        """The policies that apply here from the parent (main home) config, if any."""
        if self.parent is None or self.parent.path == self.path:
            return {}
        return {**self.parent.inherited_tool_approvals(), **self.parent.get_tool_approvals()}

    def configured_tool_approvals(self) -> dict[str, ApprovalPolicy]:
        """Every configured policy that applies here: the parent's, overridden by this file's."""
        return {**self.inherited_tool_approvals(), **self.get_tool_approvals()}

    def get_sandbox_network(self) -> bool:
        """Whether sandboxed tools may use the network (``{"sandbox": {"network": false}}`` turns it
        off): this file's value, else the parent's, else on."""
        section = self._read().get(SANDBOX_KEY)
        if isinstance(section, dict) and isinstance(section.get("network"), bool):
            return bool(section["network"])
        if self.parent is not None and self.parent.path != self.path:
            return self.parent.get_sandbox_network()
        return True

    def set_sandbox_network(self, enabled: bool) -> None:
        with file_lock(self.path):
            data = self._read()
            section = data.get(SANDBOX_KEY)
            data[SANDBOX_KEY] = {**(section if isinstance(section, dict) else {}), "network": enabled}
            atomic_write_json(self.path, data, root=self.path.parent)

    def set_tool_approvals(self, policies: Mapping[str, ApprovalPolicy]) -> None:
        """Replace this file's approval policies (an empty mapping removes them)."""
        with file_lock(self.path):
            data = self._read()
            if policies:
                data[TOOL_APPROVALS_KEY] = dict(sorted(policies.items()))
            else:
                data.pop(TOOL_APPROVALS_KEY, None)
            atomic_write_json(self.path, data, root=self.path.parent)

"""``clawlet exec-plane``: the daemon on each user machine (seed 001 §1, §4, §5, §6, §10).

**The exec plane owns the conversation.** :class:`ExecPlane` builds the user's local-mode app over
``<state_dir>/home`` (:attr:`ExecPlane.api_app`, an ASGI app without a socket of its own: the
control plane forwards the user's HTTP requests to it) and runs its lifespan. Its
``SessionManager`` (one per workspace) keeps every session's one transcript (``home/sessions/``,
exactly as in local mode) and its paused turns, and runs every turn: an API request's and a seed
frame's alike. Its runtimes are :class:`SessionRuntime`: ``engine`` (the default) runs in a session
process (:class:`~clawlet.execplane.session_process.ProcessSessionAdapter`, a pure runtime fed each
turn's history, context, pause point and decision), ``openclaw`` on the bridge (below). A session
the control plane started with ``start_session`` runs on the runtime made from that frame's data;
any other (one an API request starts) gets one made from ``init``'s optional ``runtime_type``,
``agent_config`` (the model), ``skills`` (the skill index) and ``mcp_servers`` (absent: ``engine``
on this machine's ``CLAWLET_LLM_*`` model). **Every event of every run** any ``SessionManager``
starts goes to the control plane as an ``sse_event`` (in order, once; its ``Usage`` also as
``usage_report``; a named workspace's session under ``<workspace>:<session id>``), and when the run
ends a ``transcript_sync {session_id, workspace, title, messages}`` record (the stored transcript,
as ``GET /api/sessions/{id}/history`` has it) goes out through the client's at-least-once queue.

The seed frames, multiplexed by ``session_id`` over the machine's one WebSocket
(:class:`~clawlet.execplane.client.ControlPlaneClient`), act on the default workspace:

* ``start_session`` picks the runtime from ``runtime_type`` through a factory table: ``engine``
  (default; the seed's ``semigraph`` is an alias) runs clawlet's engine in a process of its own
  (:class:`~clawlet.execplane.session_process.ProcessSessionAdapter`); ``openclaw`` runs the session on
  OpenClaw through the Node.js bridge (:class:`~clawlet.runtime.openclaw_bridge.OpenClawBridgeAdapter`,
  below). Any other type is refused with a ``RunFailed`` event and nothing is started (no fallback
  to another runtime); so is an ``openclaw`` session on a machine without Node >= 24.16 and the
  ``openclaw`` CLI (the error names what is missing and how to fix it). Later messages to a refused
  session get the same error. The session is registered with the client
  the moment its ``start_session`` frame is read (from the client's ``on_frame`` observer: the client
  runs handlers as tasks of their own, so a ``user_message`` right behind ``start_session`` would
  otherwise reach an unknown session and be dropped); that message waits for the process to start.
  A ``stop_session`` is likewise tied to the session it was read for, so ``stop_session`` followed at
  once by ``start_session`` of the same id starts a new session after the old one has stopped.
  :class:`ExecPlane` takes over the client's ``on_start_session``, ``on_stop_session`` and
  ``on_frame`` (an ``on_frame`` set before it is still called).
* ``user_message`` (``data.content``, or the seed's ``data.message``) runs one turn through
  ``api_app``'s ``SessionManager`` (no title is generated); the turn's events go out as they are,
  each an ``sse_event`` frame holding the clawlet event's JSON encoding
  (:mod:`clawlet.controlplane.seed_events`); its token usage also as ``usage_report``. ``data.approval_mode``
  (``deny`` by default, ``ask``, ``allow``) says what the turn does with tools whose approval policy
  is ``ask``: with ``ask`` it may end waiting (``RunWaiting``), and the decision comes as an HTTP
  request to ``api_app`` (``POST /api/sessions/{id}/approvals/{approval_id}``).
  Turns of one session run one after another, in arrival order; sessions run side by side.
* ``cancel`` cancels the running turn (``RunCancelled`` with the partial text), any turn still
  waiting behind it, and what a waiting session waits for.
* ``stop_session`` stops the session's process (a running turn is cancelled), sends a last
  ``snapshot_sync`` and forgets the session. Its files stay: a later ``start_session`` with the same
  id continues the conversation.
* Every ``snapshot_interval`` seconds (60) each session's snapshot (short-term memory + newest
  checkpoint; an API request's session's too) goes out as ``fire_and_forget snapshot_sync``; the
  round is skipped while the control plane is unreachable (degraded mode: sessions keep running on
  local memory, checkpoints, direct LLM calls, code execution and cached skills; SSE events and
  usage reports wait in the client).

A session that fails (its process crashes, hangs, or cannot start) reports ``RunFailed`` for the
turn it was running and nothing else is affected; its next message starts a new process.

``engine`` session processes are forked from a pre-loaded **session template** process
(:mod:`clawlet.execplane.session_template`; it has imported the engine already, so a session starts in
milliseconds instead of a CPU-second) that :meth:`ExecPlane.start` starts and
:meth:`ExecPlane.shutdown` stops; a template that dies is restarted, and sessions are spawned as
fresh interpreters meanwhile (``CLAWLET_SESSION_TEMPLATE=false``: always).

**The ``openclaw`` runtime** runs the bridge adapter directly in this process, not inside a session
process like the engine. The engine gets a process of its own so that a crash or hang of the agent's
Python code cannot take the daemon down; the bridge already is a process of its own (Node.js, in its
own process group, which also holds a private ``openclaw gateway``), so that isolation is there: a
crash or ``kill -9`` of the bridge ends only its session's turn with a ``RunFailed`` naming the
exit status, and the next message starts a new bridge; a bridge that does not end a cancelled turn
within ``cancel_grace`` seconds is killed (there is no heartbeat: a bridge that hangs mid-turn holds
that turn until it is cancelled or stopped). What runs here is only the adapter's socket reader; a
Python session process around it would add an interpreter per session and a second hop for every
event without isolating anything more.

The bridge is configured by this machine: the bridge in ``bridge/`` of this source tree
(``CLAWLET_OPENCLAW_BRIDGE``), OpenClaw's Node (``CLAWLET_OPENCLAW_NODE``, else ``node`` on
``PATH``), the ``openclaw`` CLI (``CLAWLET_OPENCLAW_BIN``, else on ``PATH``), or the
``openclaw_options`` given to :class:`ExecPlane`. Before anything is started or created,
:meth:`~clawlet.runtime.openclaw_bridge.OpenClawBridgeAdapter.preflight` checks them (``node
--version``, as :func:`~clawlet.runtime.openclaw_bridge.openclaw_available` does). From
``start_session`` the bridge gets ``agent_config`` (``model``, ``provider``, ``base_url``,
``system_prompt``; without a ``model`` from the control plane, this machine's own ``CLAWLET_LLM_*``
model: :func:`openclaw_agent_config`), the skill index entries whose requirements this machine meets, and
``openclaw_config`` except the keys that name this machine's programs and directories
(``openclaw_bin``, ``node``, ``state_dir``, ``skills_cache_dir``; ignored with a warning).
``openclaw_config.gateway_url`` + ``gateway_token`` make the bridge use an existing gateway instead
of starting a private one (then only Node >= 20 is needed; the tests use clawlet's own ``/gateway``).
The bridge's ``get_skill_package`` requests fill the shared skill cache (answered with the cached
directory), its ``memory_search`` and ``mcp_call`` go to the control plane, its ``usage_report`` and
``audit_log`` records go out as this session's ``fire_and_forget``. The snapshot sync sends the
adapter's state (OpenClaw keeps the conversation itself, under
``sessions/<session_id>/openclaw-memory/``).

Layout of ``state_dir`` (the seed's ``~/.semibot``)::

    usage_queue.jsonl             fire-and-forget records waiting to be sent (the client's)
    home/                         the clawlet home all sessions of the user share (the seed: the VM is
                                  the user's computer): workspace/, skills/, memory/MEMORY.md, knowledge/
    home/.skills/<skill_id>/      skill packages fetched from the control plane (shared cache)
    home/sessions/<session_id>.json
                                  the session's transcript (api_app's, as in local mode; paused
                                  turns under home/sessions/ too)
    sessions/<session_id>/        memory/ (conversation.md, context.json, scratchpad.md),
                                  checkpoints/, process.log (an engine session)
    workspaces/<name>/sessions/<session_id>/
                                  the same for a session of a named workspace (whose home, with
                                  its transcripts, is home/workspaces/<name>/)
    session-template.log          the session template's log (the pre-loaded process that forks the
                                  engine's session processes: clawlet.execplane.session_template)
    sessions/<session_id>/openclaw-memory/
                                  an openclaw session: bridge.log, skills/ (or, with a private
                                  gateway, state/openclaw.json and workspace/), OpenClaw's own state

API keys come from the control plane's ``init`` (in memory; passed to session processes over their
pipes only) and override the provider keys of ``settings``. An ``openclaw`` session's bridge gets them
inside its ``start`` message on its private Unix socket only (not in its environment, argv or a file);
a private gateway gets the model's key through its environment only (``openclaw.json`` names it as
``${CLAWLET_OPENCLAW_MODEL_KEY}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, cast

from fastapi import FastAPI

from clawlet.api.app import create_app
from clawlet.cluster.protocol import (
    FF_AUDIT_LOG,
    FF_SNAPSHOT_SYNC,
    FF_TRANSCRIPT_SYNC,
    FF_USAGE_REPORT,
    METHOD_GET_SKILL_PACKAGE,
    METHOD_MCP_CALL,
    METHOD_MEMORY_SEARCH,
)
from clawlet.config import Settings
from clawlet.engine.agent import AgentEngine
from clawlet.engine.context import DEFAULT_CONTEXT, RunContext
from clawlet.engine.tool_approvals import Decision
from clawlet.events import Event, Pending, RunCancelled, RunFailed, RunFinished
from clawlet.execplane.client import (
    ControlPlaneClient,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    forward_event,
    safe_url,
)
from clawlet.execplane.session_process import ProcessOptions, ProcessSessionAdapter, SessionProcessSpec
from clawlet.execplane.session_template import SessionTemplate, template_supported
from clawlet.execplane.skill_cache import (
    SkillIndexEntry,
    SkillPackageCache,
    available_skills_block,
    check_requirements,
    parse_skill_index,
)
from clawlet.execplane.tunnel import TunnelServer
from clawlet.home import init_home
from clawlet.llm.providers import ProviderConfigError, describe_model
from clawlet.runtime.base import RunConfig, RuntimeAdapter, RuntimeFailure, UserMessage
from clawlet.runtime.engine_adapter import EngineHandle
from clawlet.runtime.manager import AdapterFactory as ManagerAdapterFactory
from clawlet.runtime.manager import Run, SessionBusy, SessionManager, SessionWaiting
from clawlet.runtime.openclaw_bridge import (
    BridgeOptions,
    BridgeSpec,
    OpenClawBridgeAdapter,
    OpenClawBridgeError,
)
from clawlet.runtime.process_pipe import RequestHandler, SkillRef
from clawlet.services import Workspaces
from clawlet.sessions.store import InvalidSessionId, SessionCorrupt, SessionNotFound, validate_session_id

log = logging.getLogger(__name__)

DEFAULT_RUNTIME_TYPE: Final = "engine"
OPENCLAW_RUNTIME_TYPE: Final = "openclaw"
RUNTIME_ALIASES: Final[Mapping[str, str]] = {"semigraph": "engine"}
"""The seed's names for clawlet's runtimes."""
OPENCLAW_STATE_DIR: Final = "openclaw-memory"
"""OpenClaw's state inside a session's directory (the seed's ``openclaw-memory/``)."""
MACHINE_OPENCLAW_KEYS: Final = frozenset({"openclaw_bin", "node", "state_dir", "skills_cache_dir"})
"""``openclaw_config`` keys the control plane may not set: they name this machine's programs and
directories, which the exec plane decides (the rest, e.g. ``gateway_url``, passes through)."""
BRIDGE_NOTIFICATIONS: Final = frozenset({FF_USAGE_REPORT, FF_AUDIT_LOG})
SNAPSHOT_SYNC_INTERVAL: Final = 60.0
HOME_DIR: Final = "home"
SESSIONS_DIR: Final = "sessions"
WORKSPACES_DIR: Final = "workspaces"
APPROVAL_MODES: Final = ("deny", "ask", "allow")
"""A seed ``user_message``'s ``approval_mode`` (default ``deny``; ``ask`` lets the turn wait for
decisions, which come through ``api_app``'s ``POST /api/sessions/{id}/approvals/{approval_id}``)."""
TEMPLATE_LOG: Final = "session-template.log"
SKILL_CACHE_DIR: Final = ".skills"
"""Under the shared home, so the agent's ``read_file`` and ``terminal`` reach the packages."""
LOAD_SKILL_TOOL: Final = "load_skill"
API_KEY_FIELDS: Final[Mapping[str, str]] = {
    "openai": "openai_api_key",
    "anthropic": "anthropic_api_key",
    "deepseek": "deepseek_api_key",
}
"""``init.api_keys`` provider names → the settings field each key goes to."""
ENGINE_PROVIDERS: Final = frozenset(API_KEY_FIELDS)
"""The providers clawlet's engine talks to (a model's ``provider/`` prefix naming one picks it)."""


@dataclass(frozen=True)
class SessionSpec:
    """Everything a runtime factory gets to build one session's adapter."""

    session_id: str
    runtime_type: str
    session_dir: Path
    settings: Settings
    skills: tuple[SkillIndexEntry, ...]
    """The skill index entries whose requirements this machine meets."""
    on_request: RequestHandler
    """Answers a runtime's requests that need the control plane (``load_skill``)."""
    data: Mapping[str, Any]
    """``start_session``'s data as received (``init``'s defaults for what it does not say)."""
    engine: AgentEngine
    """The workspace's engine in this process (its tools check an edited tool call)."""


def mcp_server_names(value: Any) -> tuple[str, ...]:
    """The names in ``start_session``'s ``mcp_servers``: a list of names or of ``{name, …}``."""
    names: list[str] = []
    for item in value if isinstance(value, list) else []:
        name = item.get("name") if isinstance(item, Mapping) else item
        if isinstance(name, str) and name.strip():
            names.append(name.strip())
    return tuple(dict.fromkeys(names))


AdapterFactory = Callable[[SessionSpec], RuntimeAdapter | Awaitable[RuntimeAdapter]]
"""Builds (does not start) a session's adapter; raising ``RuntimeFailure`` (e.g. a runtime that is
not installed here) refuses the session with the error's message."""


@dataclass(frozen=True)
class _Runtime:
    """A session's runtime on this machine and what its turns run with."""

    adapter: RuntimeAdapter
    runtime_type: str
    model: str
    context: RunContext
    """Its ``extra_system_prompt``: the agent's system prompt and the skill index."""


@dataclass(eq=False)
class _Session:
    """A session the control plane started with ``start_session`` (the seed's frames)."""

    session_id: str
    runtime_type: str
    runtime: _Runtime | None = None
    refusal: str | None = None
    handled: bool = False
    """Its ``start_session`` is being (or was) handled."""
    replaces: _Session | None = None
    """A stopping session of the same id this one must wait for."""
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    prepared: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the session was refused or its runtime is starting."""
    starting: asyncio.Task[None] | None = None
    stop_task: asyncio.Task[None] | None = None
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    cancel_epoch: int = 0
    turn_running: bool = False
    stopping: bool = False

    @property
    def adapter(self) -> RuntimeAdapter | None:
        return self.runtime.adapter if self.runtime is not None else None


class SessionRuntime(RuntimeAdapter):
    """The adapter the exec plane's ``SessionManager`` holds for a session: it runs the session's
    turns on the runtime :meth:`ExecPlane.session_runtime` gives it (the one a ``start_session``
    made, else a new one with ``init``'s defaults), adds the session's system prompt to each turn,
    and turns the runtime's own final events into the ends a ``SessionManager`` expects."""

    def __init__(self, plane: ExecPlane, workspace: str, engine: AgentEngine) -> None:
        self.plane = plane
        self.workspace = workspace
        self.engine = engine
        self.session_id = ""
        self.config = RunConfig()
        self.runtime: _Runtime | None = None
        self.owned = False
        """The runtime was made for this adapter (stopped with it), not by a ``start_session``."""

    async def start(self, session_id: str, config: RunConfig) -> None:
        """Find or make the runtime; a failure is the first turn's ``RunFailed`` (not an error of
        the request that started the turn)."""
        self.session_id, self.config = session_id, config
        with contextlib.suppress(Exception):
            await self._resolve()

    async def _resolve(self) -> _Runtime:
        if self.runtime is None:
            self.runtime, self.owned = await self.plane.session_runtime(
                self.workspace, self.engine, self.session_id, self.config.runtime_type
            )
            self.supports_approvals = self.runtime.adapter.supports_approvals
        return self.runtime

    async def send_message(self, data: UserMessage) -> AsyncGenerator[Event, None]:
        runtime = await self._resolve()
        prompt = "\n\n".join(
            part for part in (runtime.context.extra_system_prompt, data.context.extra_system_prompt) if part
        )
        message = replace(data, context=replace(data.context, extra_system_prompt=prompt))
        async with contextlib.aclosing(runtime.adapter.send_message(message)) as events:
            async for event in events:
                if isinstance(event, RunFinished):
                    return
                if isinstance(event, RunCancelled):
                    raise asyncio.CancelledError("the turn was cancelled")
                if isinstance(event, RunFailed):
                    raise RuntimeFailure(event.error)
                yield event

    def check_decision(self, pending: Pending, decision: Decision) -> Decision:
        if self.runtime is None:
            return super().check_decision(pending, decision)
        return self.runtime.adapter.check_decision(pending, decision)

    async def cancel(self) -> None:
        if self.runtime is not None:
            await self.runtime.adapter.cancel()

    async def stop(self) -> None:
        if self.runtime is not None and self.owned:
            await self.runtime.adapter.stop()

    def get_snapshot(self) -> dict[str, Any]:
        return self.runtime.adapter.get_snapshot() if self.runtime is not None else {}


def home_settings(settings: Settings, home: Path) -> Settings:
    """``settings`` for the user's app over ``home``: everything it keeps is under the home (settings
    that point elsewhere — a shared database, workspace base, openclaw.json or OpenClaw gateway —
    do not apply), and it has no token of its own (the control plane authenticates the user)."""
    return settings.model_copy(
        update={
            "home": home,
            "api_token": None,
            "api_keys": None,
            "gateway_port": None,
            "gateway_token": None,
            "database_url": None,
            "workspace_base": None,
            "openclaw_config_path": home / "openclaw" / "openclaw.json",
            "inbox_backend": "local",
        }
    )


def runtime_name(requested: str) -> str:
    """The runtime type ``requested`` names (the seed's aliases resolved)."""
    name = requested.strip().lower()
    return RUNTIME_ALIASES.get(name, name)


def event_session_id(workspace: str, session_id: str) -> str:
    """The id a session's events and records go out under: the session id, prefixed with
    ``<workspace>:`` in a named workspace."""
    return f"{workspace}:{session_id}" if workspace else session_id


def session_settings(
    base: Settings, agent_config: Mapping[str, Any], api_keys: Mapping[str, str]
) -> Settings:
    """``base`` with the control plane's API keys and the agent's ``model``, ``provider``,
    ``base_url`` and ``temperature``.

    The model may name its provider (``openai/gpt-4o``, ``anthropic/…``, ``deepseek/…``; so may
    ``provider``): that provider is used. Otherwise, with ``provider=auto``, the model name picks it
    (``claude…`` → anthropic, ``deepseek…`` → deepseek, anything else → an OpenAI-compatible
    endpoint when an OpenAI key or base URL is there); with ``provider=demo`` the agent's model is
    ignored. Without a model, ``base``'s own (``CLAWLET_LLM_*``) is used."""
    update: dict[str, Any] = {}
    for provider, key in api_keys.items():
        field_name = API_KEY_FIELDS.get(provider.lower())
        if field_name is None:
            log.info("ignoring an API key for the unknown provider %r", provider)
        elif key:
            update[field_name] = key
    temperature = agent_config.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        update["temperature"] = float(temperature)
    model = agent_config.get("model")
    if isinstance(model, str) and model.strip() and base.provider != "demo":
        model = model.strip()
        provider = str(agent_config.get("provider") or "").strip().lower()
        prefix, slash, rest = model.partition("/")
        if slash and rest and prefix.lower() in ENGINE_PROVIDERS and provider in ("", prefix.lower()):
            provider, model = prefix.lower(), rest
        base_url = agent_config.get("base_url")
        if isinstance(base_url, str) and base_url.strip():
            update["llm_base_url"] = base_url.strip()
        elif provider in ENGINE_PROVIDERS and provider != base.resolved_provider:
            update["llm_base_url"] = None  # this machine's endpoint is for its own provider
        update["llm_model"] = model
        if provider in ENGINE_PROVIDERS:
            update["provider"] = provider
        elif base.provider == "auto":
            lowered = model.lower()
            if lowered.startswith("claude"):
                update["provider"] = "anthropic"
            elif lowered.startswith("deepseek"):
                update["provider"] = "deepseek"
            elif (
                update.get("openai_api_key")
                or update.get("llm_base_url")
                or base.openai_api_key
                or base.llm_base_url
                or base.openai_base_url
            ):
                update["provider"] = "openai"
    return base.model_copy(update=update)


def bridge_api_keys(settings: Settings, init_keys: Mapping[str, str]) -> dict[str, str]:
    """The API keys an ``openclaw`` session's bridge gets (inside its ``start`` message only):
    ``init``'s keys under any provider name (OpenClaw's provider may be one clawlet does not know)
    over the provider keys of ``settings``."""
    keys: dict[str, str] = {}
    for provider, field_name in API_KEY_FIELDS.items():
        value = getattr(settings, field_name, None)
        if isinstance(value, str) and value:
            keys[provider] = value
    for provider, value in init_keys.items():
        if isinstance(provider, str) and isinstance(value, str) and value:
            keys[provider.lower()] = value
    return keys


def openclaw_agent_config(settings: Settings, agent_config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``agent_config`` an ``openclaw`` session's bridge gets: as the control plane sent it when
    it names a model; else with this machine's own model (``settings``: ``CLAWLET_LLM_MODEL``,
    ``CLAWLET_PROVIDER``, ``CLAWLET_LLM_BASE_URL``/``OPENAI_BASE_URL``) as ``model``, ``provider``
    and ``base_url``. Unchanged when this machine has no model either (the offline demo model,
    which OpenClaw cannot use)."""
    config = dict(agent_config)
    model = config.get("model")
    if (isinstance(model, str) and model.strip()) or settings.resolved_provider == "demo":
        return config
    try:
        info = describe_model(settings)
    except ProviderConfigError:
        return config
    config.update(model=info.name, provider=info.provider)
    base_url = settings.llm_base_url or {
        "openai": settings.openai_base_url,
        "deepseek": settings.deepseek_base_url,
    }.get(info.provider)
    if base_url:
        config["base_url"] = base_url
    return config


def session_prompt(agent_config: Mapping[str, Any], skills_block: str) -> str:
    """The per-session part of the system prompt: the agent's ``system_prompt`` and the skill index."""
    parts: list[str] = []
    system_prompt = agent_config.get("system_prompt")
    if isinstance(system_prompt, str) and system_prompt.strip():
        parts.append(system_prompt.strip())
    if skills_block:
        parts.append(skills_block.rstrip())
    return "\n\n".join(parts)


class ExecPlane:
    """Serves the control plane's sessions on this machine (see the module docstring)."""

    def __init__(
        self,
        client: ControlPlaneClient,
        state_dir: Path | str,
        settings: Settings,
        *,
        adapter_factories: Mapping[str, AdapterFactory] | None = None,
        process_options: ProcessOptions | None = None,
        openclaw_options: BridgeOptions | None = None,
        snapshot_interval: float = SNAPSHOT_SYNC_INTERVAL,
        demo_token_delay: float = 0.0,
    ) -> None:
        self.client = client
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.home = self.state_dir / HOME_DIR
        self.sessions_dir = self.state_dir / SESSIONS_DIR
        self.skills_dir = self.home / SKILL_CACHE_DIR
        self.settings = home_settings(settings, self.home)
        self.process_options = process_options or ProcessOptions()
        self.openclaw_options = openclaw_options or BridgeOptions()
        self.snapshot_interval = snapshot_interval
        self.demo_token_delay = demo_token_delay
        self.adapter_factories: dict[str, AdapterFactory] = dict(
            adapter_factories
            or {
                DEFAULT_RUNTIME_TYPE: self.engine_process_adapter,
                OPENCLAW_RUNTIME_TYPE: self.openclaw_bridge_adapter,
            }
        )
        self.snapshots_sent = 0
        self.snapshot_rounds_skipped = 0
        self._sessions: dict[str, _Session] = {}
        self._snapshot_task: asyncio.Task[None] | None = None
        self._stop_targets: dict[str, deque[_Session]] = {}
        self._forwarders: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._closed = False
        self._lifespan = contextlib.AsyncExitStack()
        self.template: SessionTemplate | None = None
        """Forks the ``engine`` sessions' processes (``settings.session_template``, Linux)."""
        self.api_app: FastAPI = create_app(
            self.settings,
            demo_token_delay=demo_token_delay,
            runtimes=self._runtimes,
            check_origins=False,
            on_run=self._observe_run,
        )
        """The user's local-mode app over the home (ASGI; no socket): its ``SessionManager`` keeps
        every session's only transcript and runs the seed frames' turns too."""
        self.workspaces: Workspaces = self.api_app.state.workspaces
        self.tunnel = TunnelServer(self.api_app, client.send_frame)
        """Runs the control plane's ``http_request`` frames through :attr:`api_app`."""
        client.on_http = self.tunnel.handle
        self._frame_observer = client.on_frame
        client.on_start_session = self.start_session
        client.on_stop_session = self.stop_session
        client.on_frame = self._observe_frame

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Prepare the state directory, start ``api_app`` (its lifespan) and the periodic snapshot
        sync."""
        await asyncio.to_thread(init_home, self.settings.paths)
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        if self.template is None and self.settings.session_template and template_supported():
            self.template = SessionTemplate(
                self.process_options.python,
                self.home,
                self.state_dir / TEMPLATE_LOG,
                start_timeout=self.process_options.start_timeout,
            )
            self.template.start()
        if self._snapshot_task is None:
            await self._lifespan.enter_async_context(self.api_app.router.lifespan_context(self.api_app))
            self._snapshot_task = asyncio.create_task(self._snapshot_loop(), name="exec-plane-snapshots")

    async def shutdown(self) -> None:
        """Stop every session (running turns are cancelled; a last snapshot is sent if connected),
        then ``api_app``."""
        self._closed = True
        task, self._snapshot_task = self._snapshot_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        sessions = list(self._sessions.values())
        results = await asyncio.gather(*(self._stop(session) for session in sessions), return_exceptions=True)
        for session, result in zip(sessions, results, strict=True):
            if isinstance(result, BaseException):
                log.error("stopping session %s failed: %s", session.session_id, result)
        await self.tunnel.aclose()
        await self._lifespan.aclose()  # the API's sessions: turns cancelled, runtimes stopped
        await asyncio.gather(*self._forwarders.values(), return_exceptions=True)
        if self.template is not None:
            await self.template.close()

    @property
    def sessions(self) -> frozenset[str]:
        """The sessions the control plane started (``start_session``) and has not stopped."""
        return frozenset(self._sessions)

    @property
    def session_manager(self) -> SessionManager:
        """The default workspace's ``SessionManager`` (``api_app``'s): where every turn runs."""
        return self.workspaces.default.sessions

    def _runtimes_of(self) -> dict[str, RuntimeAdapter]:
        """The runtime of every session that has one, by session id (a named workspace's as
        ``<workspace>:<session id>``)."""
        found: dict[str, RuntimeAdapter] = {}
        for services in self.workspaces.all():
            workspace = services.settings.paths.root
            prefix = "" if services is self.workspaces.default else f"{workspace.name}:"
            for sid, adapter in services.sessions.adapters.items():
                if isinstance(adapter, SessionRuntime) and adapter.runtime is not None:
                    found[prefix + sid] = adapter.runtime.adapter
        for sid, session in self._sessions.items():
            if session.adapter is not None:
                found[sid] = session.adapter
        return found

    def adapter(self, session_id: str) -> RuntimeAdapter | None:
        """The runtime a session's turns run on (``None`` if it has none yet)."""
        return self._runtimes_of().get(session_id)

    def session_context(self, session_id: str) -> RunContext | None:
        """The per-turn context a session's turns run with (its system prompt and skill index)."""
        session = self._sessions.get(session_id)
        return session.runtime.context if session is not None and session.runtime is not None else None

    def session_pids(self) -> dict[str, int]:
        """The process id of every session that has a running process (an ``engine`` session's
        process, an ``openclaw`` session's bridge)."""
        pids: dict[str, int] = {}
        for sid, adapter in self._runtimes_of().items():
            if isinstance(adapter, ProcessSessionAdapter | OpenClawBridgeAdapter) and adapter.pid is not None:
                pids[sid] = adapter.pid
        return pids

    # -- api_app's runtimes and runs ----------------------------------------------------------

    def _runtimes(self, workspace: str, engine: EngineHandle) -> dict[str, ManagerAdapterFactory]:
        """``api_app``'s runtime table: every runtime type's sessions run on a :class:`SessionRuntime`
        (which resolves the type itself, from ``start_session`` or ``init``)."""

        def make() -> RuntimeAdapter:
            return SessionRuntime(self, workspace, engine.get())

        return {name: make for name in {DEFAULT_RUNTIME_TYPE, *self.adapter_factories}}

    def _observe_run(self, workspace: str, run: Run) -> None:
        """Every run ``api_app`` starts (a seed frame's turn or an API request's): its events go to
        the control plane in order, after the session's previous run's."""
        key = (workspace, run.session_id)
        task = asyncio.create_task(
            self._forward_run(workspace, run, self._forwarders.get(key)), name=f"forward-{run.session_id}"
        )
        self._forwarders[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._forwarders.get(key) is done:
                del self._forwarders[key]

        task.add_done_callback(forget)

    async def _forward_run(self, workspace: str, run: Run, previous: asyncio.Task[None] | None) -> None:
        """Send each event of ``run`` as an ``sse_event`` (usage also as ``usage_report``), then the
        session's transcript as ``transcript_sync``."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        stream_id = event_session_id(workspace, run.session_id)
        try:
            async for event in run.events(merge_text=True):
                if event is not None:
                    await forward_event(self.client, stream_id, event, model=self._model_of(workspace, run))
            await self._sync_transcript(workspace, run.session_id, stream_id)
        except Exception:
            log.exception("session %s: could not forward the run's events", stream_id)

    def _model_of(self, workspace: str, run: Run) -> str:
        adapter = self.workspaces.get(workspace).sessions.adapters.get(run.session_id)
        runtime = adapter.runtime if isinstance(adapter, SessionRuntime) else None
        return runtime.model if runtime is not None else ""

    async def _sync_transcript(self, workspace: str, session_id: str, stream_id: str) -> None:
        """``transcript_sync {session_id, workspace, title, messages}``: the stored transcript (as
        ``GET /api/sessions/{id}/history`` has it), at least once."""
        store = self.workspaces.get(workspace).transcripts
        try:
            data = await asyncio.to_thread(store.load, session_id)
        except (SessionNotFound, SessionCorrupt, InvalidSessionId, OSError) as exc:
            log.info("session %s: no transcript to sync (%s)", stream_id, exc)
            return
        await self.client.fire_and_forget(
            stream_id,
            FF_TRANSCRIPT_SYNC,
            session_id=session_id,
            workspace=workspace,
            title=data["title"],
            messages=data["messages"],
        )

    # -- the runtime factory -------------------------------------------------------------------

    def engine_process_adapter(self, spec: SessionSpec) -> RuntimeAdapter:
        """The ``engine`` runtime: clawlet's engine in a session process."""
        skills = tuple(SkillRef(entry.skill_id, entry.name, entry.version) for entry in spec.skills)
        process_spec = SessionProcessSpec(
            session_dir=spec.session_dir,
            settings=spec.settings,
            skills=skills,
            on_request=spec.on_request,
            demo_token_delay=self.demo_token_delay,
            mcp_servers=mcp_server_names(spec.data.get("mcp_servers")),
            base_tools=spec.engine.build_tools,
        )
        return ProcessSessionAdapter(process_spec, self.process_options, self.template)

    async def openclaw_bridge_adapter(self, spec: SessionSpec) -> RuntimeAdapter:
        """The ``openclaw`` runtime: the Node.js bridge driving OpenClaw, run from this process.

        Raises :class:`~clawlet.runtime.openclaw_bridge.OpenClawUnavailable` (naming what is missing)
        when the bridge could not start here; nothing has been started or created then."""
        data = spec.data
        agent_config = openclaw_agent_config(spec.settings, data.get("agent_config") or {})
        requested = data.get("openclaw_config") or {}
        if not isinstance(requested, Mapping):
            raise ValueError("openclaw_config must be an object")
        openclaw_config = {key: value for key, value in requested.items() if key not in MACHINE_OPENCLAW_KEYS}
        if len(openclaw_config) != len(requested):
            ignored = ", ".join(sorted(set(requested) - set(openclaw_config)))
            log.warning(
                "session %s: ignoring openclaw_config %s (set on this machine)", spec.session_id, ignored
            )
        openclaw_config["skills_cache_dir"] = str(self.skills_dir)
        skill_index = [
            {"skill_id": entry.skill_id, "name": entry.name, "version": entry.version}
            for entry in spec.skills
        ]
        adapter = OpenClawBridgeAdapter(
            BridgeSpec(
                agent_config=dict(agent_config),
                skill_index=skill_index,
                api_keys=bridge_api_keys(spec.settings, self.client.api_keys),
                openclaw_config=openclaw_config,
                state_dir=spec.session_dir / OPENCLAW_STATE_DIR,
                on_request=spec.on_request,
                on_notify=functools.partial(self._bridge_notification, spec.session_id),
            ),
            self.openclaw_options,
        )
        await asyncio.to_thread(adapter.preflight)
        if not agent_config.get("model") and not openclaw_config.get("gateway_url"):
            raise OpenClawBridgeError(
                "the openclaw runtime needs a model: the control plane gave none (`clawlet control-plane"
                " set-runtime USER --model provider/model`) and this machine's own is the offline demo"
                " model (set CLAWLET_LLM_MODEL, with CLAWLET_PROVIDER or CLAWLET_LLM_BASE_URL)."
                " The session was not started."
            )
        return adapter

    def _refusal(self, requested: str, runtime_type: str) -> str | None:
        if runtime_type in self.adapter_factories:
            return None
        supported = ", ".join(sorted(self.adapter_factories))
        aliases = ", ".join(f"{alias} = {name}" for alias, name in RUNTIME_ALIASES.items())
        return (
            f"unknown runtime_type {requested!r}; supported: {supported} ({aliases}). "
            "The session was not started (no fallback to another runtime)."
        )

    # -- control-plane handlers ----------------------------------------------------------------

    def _observe_frame(self, direction: str, frame: dict[str, Any]) -> None:
        """Claim a session the moment its ``start_session`` frame is read.

        The client runs every handler as a task of its own, so a ``user_message`` read right behind
        ``start_session`` is routed (and, to an unknown session, dropped) before the start handler
        has run. The frame observer is called synchronously while the frame is dispatched, before
        any later frame is read: registering the session here is what keeps that message."""
        try:
            session_id = frame.get("session_id")
            if direction == "in" and isinstance(session_id, str) and not self._closed:
                if frame.get("type") == "start_session":
                    self._claim(session_id)
                elif frame.get("type") == "stop_session":  # a start right behind it is a new session
                    session = self._sessions.get(session_id)
                    if session is not None:
                        self._mark_stopping(session)
                        self._stop_targets.setdefault(session_id, deque()).append(session)
        finally:
            if self._frame_observer is not None:
                self._frame_observer(direction, frame)

    def _claim(self, session_id: str) -> _Session | None:
        """The session for a ``start_session`` of ``session_id``, created and registered with the
        client if needed (``None`` for an invalid id)."""
        try:
            validate_session_id(session_id)
        except InvalidSessionId:
            return None
        current = self._sessions.get(session_id)
        if current is not None and not current.stopping:
            return current
        session = _Session(session_id, "", replaces=current)
        self._sessions[session_id] = session
        self.client.register_session(
            session_id,
            functools.partial(self._on_user_message, session),
            functools.partial(self._on_cancel, session),
        )
        return session

    async def start_session(self, data: dict[str, Any]) -> None:
        """``start_session``: create the session's runtime from ``runtime_type`` and start it."""
        raw_id = data.get("session_id")
        if not isinstance(raw_id, str) or not raw_id:
            log.warning("start_session without a session_id; ignored")
            return
        try:
            session_id = validate_session_id(raw_id)
        except InvalidSessionId as exc:
            await self._error(raw_id, f"session {raw_id!r} was not started: {exc}")
            return
        if self._closed:
            await self._error(session_id, "the exec plane is shutting down; the session was not started")
            return
        session = self._claim(session_id)
        assert session is not None
        if session.handled:
            log.info("session %s is already running; ignoring a repeated start_session", session_id)
            return
        session.handled = True
        requested = (
            data.get("runtime_type") or self.init_defaults().get("runtime_type") or DEFAULT_RUNTIME_TYPE
        )
        requested = requested if isinstance(requested, str) else repr(requested)
        session.runtime_type = runtime_name(requested)
        if session.replaces is not None:  # the same id was being stopped: let that finish first
            await session.replaces.stopped.wait()
            session.replaces = None
            if session.stopping:  # and this one was stopped meanwhile
                return
        if not self.session_manager.is_busy(session_id):  # an API turn's runtime: this one replaces it
            await self.session_manager.release(session_id)
        refusal: str | None = None
        runtime: _Runtime | None = None
        try:
            runtime = await self._make_runtime(
                "", self.workspaces.default.engine, session_id, requested, data
            )
        except RuntimeFailure as exc:
            refusal = str(exc)
        if session.stopping:  # stopped while its runtime was being created: start nothing
            session.prepared.set()
            return
        session.runtime = runtime
        if runtime is None:
            session.refusal = refusal or "the session was not started"
            session.prepared.set()
            log.warning("refused session %s: %s", session_id, session.refusal)
            await self._error(session_id, session.refusal)
            return
        session.starting = asyncio.create_task(self._start_adapter(session), name=f"start-{session_id}")
        session.prepared.set()
        await session.starting

    def init_defaults(self) -> dict[str, Any]:
        """What ``init`` says about the user's sessions (each optional, as in ``start_session``):
        ``runtime_type``, ``agent_config``, ``skill_index`` and ``mcp_servers``."""
        init = self.client.init_data
        keys = ("runtime_type", "agent_config", "mcp_servers", "skill_index")
        return {key: init[key] for key in keys if key in init}

    def apply_init(self) -> None:
        """Give ``api_app``'s workspaces ``init``'s API keys and model (``agent_config``) for what
        runs in this process — titles and compression; turns get theirs with their runtime. Done
        after connecting and whenever a runtime is made (``init`` may change on a reconnect)."""
        agent_config = self.init_defaults().get("agent_config")
        agent_config = agent_config if isinstance(agent_config, Mapping) else {}
        for services in self.workspaces.all():
            settings = session_settings(services.engine.settings, agent_config, self.client.api_keys)
            services.settings = settings
            services.sessions.settings = settings

    async def session_runtime(
        self, workspace: str, engine: AgentEngine, session_id: str, runtime_type: str
    ) -> tuple[_Runtime, bool]:
        """The runtime for a turn of ``session_id`` in ``workspace`` and whether it was made (and
        started) here for the caller: the one its ``start_session`` made, else a new one from
        ``init``'s defaults. ``RuntimeFailure`` when the session was refused."""
        session = self._sessions.get(session_id) if workspace == "" else None
        if session is not None and not session.stopping and session.handled:
            await session.prepared.wait()
            if session.runtime is not None:
                return session.runtime, False
            raise RuntimeFailure(session.refusal or f"session {session_id} was not started")
        requested = runtime_type
        if runtime_type == DEFAULT_RUNTIME_TYPE:  # what a turn asks for unless told otherwise
            requested = str(self.init_defaults().get("runtime_type") or runtime_type)
        runtime = await self._make_runtime(workspace, engine, session_id, requested, {})
        try:
            await runtime.adapter.start(session_id, RunConfig(runtime_type=runtime.runtime_type))
        except BaseException:
            await runtime.adapter.stop()  # the next turn makes a new one
            raise
        return runtime, True

    async def _make_runtime(
        self,
        workspace: str,
        engine: AgentEngine,
        session_id: str,
        requested: str,
        data: Mapping[str, Any],
    ) -> _Runtime:
        """Build (not start) a session's runtime from ``data`` over ``init``'s defaults;
        ``RuntimeFailure`` saying why it cannot be made (the session is refused)."""
        self.apply_init()
        runtime_type = runtime_name(requested)
        refusal = self._refusal(requested, runtime_type)
        if refusal is not None:
            raise RuntimeFailure(refusal)
        data = {**self.init_defaults(), **{key: value for key, value in data.items() if value is not None}}
        try:
            agent_config = data.get("agent_config") or {}
            if not isinstance(agent_config, Mapping):
                raise ValueError("agent_config must be an object")
            settings = session_settings(engine.settings, agent_config, self.client.api_keys)
            if runtime_type == DEFAULT_RUNTIME_TYPE:
                model = describe_model(settings).name  # ProviderConfigError for an incomplete provider
            else:  # the runtime picks its model itself (OpenClaw: from agent_config, else this machine's)
                model = str(openclaw_agent_config(settings, agent_config).get("model") or runtime_type)
            index = parse_skill_index(data.get("skill_index"))
            usable = tuple(entry for entry in index.entries if check_requirements(entry)[0])
            block = available_skills_block(usable, self.skills_dir, read_tool=LOAD_SKILL_TOOL)
            skill_ids = frozenset(entry.skill_id for entry in usable)
            spec = SessionSpec(
                session_id=session_id,
                runtime_type=runtime_type,
                session_dir=self.session_dir(workspace, session_id),
                settings=settings,
                skills=usable,
                on_request=functools.partial(self._runtime_request, session_id, skill_ids),
                data=data,
                engine=engine,
            )
        except Exception as exc:
            raise RuntimeFailure(f"session {session_id} was not started: {exc}") from exc
        try:
            made = self.adapter_factories[runtime_type](spec)
            adapter = await made if inspect.isawaitable(made) else made
        except RuntimeFailure as exc:  # e.g. the runtime is not installed here: say what is missing
            raise RuntimeFailure(f"session {session_id}: {exc}") from exc
        except Exception as exc:
            log.exception("could not create the %s runtime for session %s", runtime_type, session_id)
            raise RuntimeFailure(
                f"session {session_id} was not started: {type(exc).__name__}: {exc}"
            ) from exc
        context = RunContext(extra_system_prompt=session_prompt(agent_config, block))
        return _Runtime(adapter, runtime_type, model, context)

    def session_dir(self, workspace: str, session_id: str) -> Path:
        """A session's directory (its memory, checkpoints, process log): ``sessions/<id>``, or
        ``workspaces/<name>/sessions/<id>`` in a named workspace."""
        if not workspace:
            return self.sessions_dir / session_id
        return self.state_dir / WORKSPACES_DIR / workspace / SESSIONS_DIR / session_id

    async def _start_adapter(self, session: _Session) -> None:
        assert session.adapter is not None
        try:
            await session.adapter.start(session.session_id, RunConfig(runtime_type=session.runtime_type))
        except Exception as exc:
            log.error("session %s failed to start: %s", session.session_id, exc)
            await self._error(session.session_id, f"session {session.session_id} failed to start: {exc}")
        else:
            log.info("session %s started (runtime %s)", session.session_id, session.runtime_type)

    async def _on_user_message(self, session: _Session, data: dict[str, Any]) -> None:
        sid = session.session_id
        await session.prepared.wait()
        if session.refusal is not None:
            await self._error(sid, session.refusal)
            return
        text = data.get("content", data.get("message"))
        if not isinstance(text, str) or not text.strip():
            await self._error(sid, "user_message needs a non-empty string 'content' (or 'message')")
            return
        mode = data.get("approval_mode", DEFAULT_CONTEXT.approval_mode)
        if mode not in APPROVAL_MODES:
            await self._error(sid, f"approval_mode must be one of {', '.join(APPROVAL_MODES)}")
            return
        epoch = session.cancel_epoch
        async with session.turn_lock:
            if session.stopping or session.adapter is None:
                await self._error(sid, f"session {sid} was stopped; the message was not run")
                return
            if session.starting is not None:
                await asyncio.shield(session.starting)
            if session.cancel_epoch != epoch:  # cancelled while it waited
                await forward_event(self.client, sid, RunCancelled(sid, ""), model="")
                return
            session.turn_running = True
            try:
                await self._run_turn(session, text, RunContext(approval_mode=mode), epoch)
            finally:
                session.turn_running = False

    async def _run_turn(self, session: _Session, text: str, context: RunContext, epoch: int) -> None:
        """Run one turn through ``api_app``'s ``SessionManager`` (its events go out from
        :meth:`_observe_run`); returns once they are all sent."""
        sid, manager = session.session_id, self.session_manager
        config = RunConfig(runtime_type=session.runtime_type)
        try:
            run = await manager.start_turn(sid, text, config, title=False, context=context)
        except SessionWaiting as exc:
            pending = ", ".join(item.approval_id for item in exc.pending)
            await self._error(
                sid, f"session {sid} waits for a decision ({pending}); decide or cancel it first"
            )
            return
        except SessionBusy:
            await self._error(sid, f"session {sid} is still answering; the message was not run")
            return
        except Exception as exc:
            log.exception("session %s: the turn could not start", sid)
            await self._error(sid, f"{type(exc).__name__}: {exc}")
            return
        if session.cancel_epoch != epoch:  # a cancel that came while it started
            await manager.cancel(sid)
        await run.wait()
        forwarder = self._forwarders.get(("", sid))
        if forwarder is not None:
            await asyncio.shield(forwarder)

    async def _on_cancel(self, session: _Session, data: dict[str, Any]) -> None:
        session.cancel_epoch += 1
        if session.turn_running or self.session_manager.is_waiting(session.session_id):
            await self.session_manager.cancel(session.session_id)  # a waiting turn's decisions too

    async def stop_session(self, data: dict[str, Any]) -> None:
        """``stop_session``: stop the runtime, send a last snapshot, forget the session."""
        sid = data.get("session_id")
        if not isinstance(sid, str):
            log.info("stop_session without a session_id; ignored")
            return
        targets = self._stop_targets.get(sid)  # the session the frame meant, when it was read
        session = targets.popleft() if targets else self._sessions.get(sid)
        if targets is not None and not targets:
            del self._stop_targets[sid]
        if session is None:
            log.info("stop_session for unknown session %r; ignored", sid)
            return
        await self._stop(session)

    async def _stop(self, session: _Session) -> None:
        """Stop ``session`` once, however many stop requests there are."""
        self._mark_stopping(session)
        if session.stop_task is None:
            session.stop_task = asyncio.create_task(
                self._stop_once(session), name=f"stop-{session.session_id}"
            )
        await asyncio.shield(session.stop_task)

    async def _stop_once(self, session: _Session) -> None:
        try:
            if session.starting is not None:
                await asyncio.shield(session.starting)
            adapter = session.adapter
            if adapter is not None:
                await self.session_manager.release(session.session_id)  # cancels a running turn
                await adapter.stop()
                async with session.turn_lock:  # the cancelled turn has sent its final event
                    pass
                await self._send_snapshot(session.session_id, adapter, reason="stop")
        finally:
            if self._sessions.get(session.session_id) is session:
                del self._sessions[session.session_id]
                self.client.unregister_session(session.session_id)
            session.stopped.set()
            log.info("session %s stopped", session.session_id)

    @staticmethod
    def _mark_stopping(session: _Session) -> None:
        if session.stopping:
            return
        session.stopping = True
        session.cancel_epoch += 1
        if session.refusal is None and session.adapter is None:  # stopped before it was started
            session.refusal = f"session {session.session_id} was stopped"
        session.prepared.set()

    async def _runtime_request(
        self, sid: str, skill_ids: frozenset[str], method: str, params: dict[str, Any]
    ) -> Any:
        """A runtime's request that needs the control plane.

        * ``load_skill {skill_id, version}`` (the engine's session process) → ``{path, skill_md}``;
        * ``get_skill_package {skill_id, version}`` (the OpenClaw bridge) → ``{path}``;

        both fetch the package into the shared cache on a miss, for skills of the session's index
        (``skill_ids``) only. ``memory_search {query, top_k}`` and ``mcp_call {server, tool,
        arguments}`` (the bridge) go to the control plane as the engine's would."""
        if method in (LOAD_SKILL_TOOL, METHOD_GET_SKILL_PACKAGE):
            skill_id = str(params.get("skill_id") or "")
            version = str(params.get("version") or "latest")
            if skill_id not in skill_ids:
                raise LookupError(f"skill {skill_id!r} is not in this session's skill index")

            async def fetch(wanted: str, wanted_version: str) -> Mapping[str, Any]:
                package = await self.client.get_skill_package(sid, wanted, wanted_version)
                return cast(Mapping[str, Any], package)

            cache = SkillPackageCache(self.skills_dir, fetch)
            path = await cache.load(skill_id, version)
            if method == METHOD_GET_SKILL_PACKAGE:
                return {"path": str(path)}
            return {"path": str(path), "skill_md": await asyncio.to_thread(cache.read_skill_md, skill_id)}
        if method == METHOD_MEMORY_SEARCH:
            top_k = params.get("top_k")
            top_k = top_k if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0 else 5
            return await self.client.memory_search(sid, str(params.get("query") or ""), top_k)
        if method == METHOD_MCP_CALL:
            arguments = params.get("arguments")
            return await self.client.mcp_call(
                sid,
                str(params.get("server") or ""),
                str(params.get("tool") or ""),
                dict(arguments) if isinstance(arguments, Mapping) else {},
            )
        raise LookupError(f"unknown request {method!r}")

    async def _bridge_notification(self, session_id: str, method: str, params: dict[str, Any]) -> None:
        """The OpenClaw bridge's ``fire_and_forget`` (``usage_report``, ``audit_log``) → the control
        plane, for this session."""
        if method not in BRIDGE_NOTIFICATIONS:
            log.info("session %s: dropping the bridge's unknown fire_and_forget %r", session_id, method)
            return
        await self.client.fire_and_forget(session_id, method, **params)

    async def _error(self, session_id: str, message: str) -> None:
        await forward_event(self.client, session_id, RunFailed(message, session_id), model="")

    # -- snapshots -----------------------------------------------------------------------------

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.snapshot_interval)
            try:
                await self.sync_snapshots()
            except Exception:
                log.exception("snapshot sync failed")

    async def sync_snapshots(self) -> int:
        """One snapshot round: ``snapshot_sync`` for every session that has a runtime (started by
        ``start_session`` or by an API request); skipped while disconnected. Returns how many
        snapshots were sent."""
        if not self.client.connected:
            self.snapshot_rounds_skipped += 1
            log.info("[degraded] snapshot sync skipped: the control plane is unreachable")
            return 0
        stopping = {sid for sid, session in self._sessions.items() if session.stopping}
        sent = 0
        for sid, adapter in self._runtimes_of().items():
            if sid not in stopping and await self._send_snapshot(sid, adapter, reason="periodic"):
                sent += 1
        return sent

    async def _send_snapshot(self, session_id: str, adapter: RuntimeAdapter | None, *, reason: str) -> bool:
        if adapter is None or not self.client.connected:
            return False
        try:
            snapshot = await asyncio.to_thread(adapter.get_snapshot)
        except Exception:
            log.exception("session %s: could not take a snapshot", session_id)
            return False
        if not snapshot:
            return False
        await self.client.fire_and_forget(session_id, FF_SNAPSHOT_SYNC, reason=reason, **snapshot)
        self.snapshots_sent += 1
        return True


# -- the daemon ----------------------------------------------------------------------------------


async def connect_with_retry(client: ControlPlaneClient, stop: asyncio.Event) -> bool:
    """Connect, retrying on the client's backoff schedule (then every last delay) until it works
    or ``stop`` is set (False). A final refusal (bad JWT, revoked user) is raised."""
    attempt = 0
    while not stop.is_set():
        try:
            await client.connect()
            return True
        except ControlPlaneRefused as exc:
            if exc.final:
                raise
            last: Exception = exc
        except ControlPlaneUnavailable as exc:
            last = exc
        delay = client.backoff[min(attempt, len(client.backoff) - 1)]
        attempt += 1
        log.warning("cannot connect to the control plane (%s); retrying in %gs", last, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
    return False


async def run_exec_plane(
    state_dir: Path | str,
    settings: Settings,
    *,
    environ: Mapping[str, str] | None = None,
    demo_token_delay: float = 0.0,
    stop: asyncio.Event | None = None,
    process_options: ProcessOptions | None = None,
) -> int:
    """The daemon: connect (``USER_ID``, ``VM_TOKEN``, ``VM_TICKET``, ``CONTROL_PLANE_WS``), serve
    sessions until SIGTERM/SIGINT (or ``stop``), then stop every session and close the connection.

    Returns 0 after a requested stop, 1 when the control plane refused this machine for good.
    ``ValueError`` when the environment is incomplete or invalid."""
    env = os.environ if environ is None else environ
    client = ControlPlaneClient.from_env(env, state_dir=state_dir)
    plane = ExecPlane(
        client, state_dir, settings, demo_token_delay=demo_token_delay, process_options=process_options
    )
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
            pass
    code = 0
    try:
        await plane.start()
        log.info(
            "exec plane for user %s: connecting to %s (state in %s)",
            client.user_id,
            safe_url(client.url),
            plane.state_dir,
        )
        if not await connect_with_retry(client, stop):
            return 0
        plane.apply_init()
        closed = asyncio.create_task(client.wait_closed())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if closed.done() and not closed.cancelled() and closed.exception() is not None:
            log.error("the control plane connection ended for good: %s", closed.exception())
            code = 1
        for task in (closed, stopping):
            task.cancel()
        await asyncio.gather(closed, stopping, return_exceptions=True)
    except ControlPlaneRefused as exc:
        log.error("%s; not retrying", exc)
        code = 1
    finally:
        log.info("exec plane stopping: %d sessions", len(plane.sessions))
        await plane.shutdown()
        await client.close()
        for sig in handled:
            loop.remove_signal_handler(sig)
    return code

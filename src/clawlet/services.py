"""The services one server process holds, built once and shared by every edge.

A named workspace is a clawlet home of its own under ``workspaces_root`` (its own workspace files,
memory, skills, knowledge and transcripts); :class:`Workspaces` builds its services on first use.
The default workspace (no name, or ``shared`` as the UniAiAgent seed calls it) is the main home.

A workspace's :class:`~clawlet.engine.agent.AgentEngine` is built on first use
(:attr:`Services.engine`): importing it loads LangChain and LangGraph, which ``clawlet serve`` does
not need before it is ready (see :mod:`clawlet.cli`).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clawlet.config import RuntimeConfig, Settings
from clawlet.files import EditableFiles
from clawlet.home import init_home
from clawlet.memory.stores import MEMORY_SOURCE, KnowledgeBase, MemoryIndex, build_embedder
from clawlet.runtime.engine_adapter import EngineAdapter, EngineHandle
from clawlet.runtime.manager import AdapterFactory, Run, SessionManager
from clawlet.sessions.store import TranscriptStore
from clawlet.skills.scanner import refresh_snapshot

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from clawlet.engine.agent import AgentEngine
    from clawlet.runtime.engine_pool import EnginePool


@dataclass
class Services:
    settings: Settings
    runtime_config: RuntimeConfig
    transcripts: TranscriptStore
    sessions: SessionManager
    files: EditableFiles
    memory: MemoryIndex
    knowledge: KnowledgeBase
    engine_handle: EngineHandle

    @property
    def engine(self) -> AgentEngine:
        return self.engine_handle.get()


RuntimeTable = Callable[[str, EngineHandle], dict[str, AdapterFactory]]
"""The runtimes of a workspace's sessions: ``(workspace name, its engine's handle) → {runtime type:
factory}`` (the name is ``""`` for the default workspace; ``handle.get()`` builds the engine on first
call)."""


WorkspaceRunObserver = Callable[[str, Run], None]
"""Called with every run any workspace's ``SessionManager`` starts: ``(workspace name, run)``."""


def local_runtimes(_workspace: str, engine: EngineHandle) -> dict[str, AdapterFactory]:
    """Local mode: every session runs the engine in this process."""
    return {"engine": lambda: EngineAdapter(engine.get())}


def pooled_runtimes(pool: EnginePool) -> RuntimeTable:
    """``clawlet serve`` with engine workers: every session's turns run on ``pool``."""
    from clawlet.runtime.engine_pool import PooledEngineAdapter

    def table(_workspace: str, engine: EngineHandle) -> dict[str, AdapterFactory]:
        return {"engine": lambda: PooledEngineAdapter(pool, engine)}

    return table


def build_services(
    settings: Settings,
    *,
    demo_token_delay: float = 0.0,
    runtimes: RuntimeTable = local_runtimes,
    workspace: str = "",
    on_run: WorkspaceRunObserver | None = None,
    model: BaseChatModel | None = None,
) -> Services:
    """The services of ``settings``' home; ``model`` replaces the configured provider's chat model
    (an in-process model a test gives)."""
    paths = settings.paths
    runtime_config = RuntimeConfig(paths.config_file)
    embedder = build_embedder(settings)
    memory = MemoryIndex(paths, embedder)
    knowledge = KnowledgeBase(paths, embedder)
    engine = EngineHandle(settings, runtime_config, memory, knowledge, demo_token_delay, model)
    transcripts = TranscriptStore(paths.sessions, paths.root)
    observer = None if on_run is None else functools.partial(on_run, workspace)
    manager = SessionManager(settings, transcripts, runtimes(workspace, engine), observer)
    files = EditableFiles(paths.root)

    def after_save(relative: str) -> None:
        if relative.startswith("skills/") and relative.endswith("/SKILL.md"):
            refresh_snapshot(paths.root)
        elif relative == MEMORY_SOURCE:
            memory.refresh()
        elif relative.startswith("knowledge/"):
            knowledge.refresh()

    files.on_save(after_save)
    return Services(settings, runtime_config, transcripts, manager, files, memory, knowledge, engine)


WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
DEFAULT_WORKSPACE_NAMES = ("", "shared", "default")


class InvalidWorkspace(ValueError):
    """A workspace name that could not be a directory name (traversal, odd characters)."""


class Workspaces:
    """The default workspace's services plus lazily built ones for named workspaces."""

    def __init__(
        self,
        default: Services,
        *,
        demo_token_delay: float = 0.0,
        runtimes: RuntimeTable = local_runtimes,
        on_run: WorkspaceRunObserver | None = None,
    ) -> None:
        self.default = default
        self.demo_token_delay = demo_token_delay
        self.runtimes = runtimes
        self.on_run = on_run
        self._named: dict[str, Services] = {}
        self._lock = threading.Lock()

    def get(self, name: str | None) -> Services:
        if name is None or name.strip().lower() in DEFAULT_WORKSPACE_NAMES:
            return self.default
        name = name.strip()
        if not WORKSPACE_NAME.fullmatch(name):
            raise InvalidWorkspace(
                "workspace names are 1-64 letters, digits, '_' or '-', starting with a letter or digit"
            )
        with self._lock:
            services = self._named.get(name)
            if services is None:
                base = self.default.settings
                settings = base.model_copy(update={"home": base.workspaces_root / name})
                init_home(settings.paths)
                services = build_services(
                    settings,
                    demo_token_delay=self.demo_token_delay,
                    runtimes=self.runtimes,
                    workspace=name,
                    on_run=self.on_run,
                )
                # the main home's tool approval policies apply here unless this workspace overrides them
                services.runtime_config.parent = self.default.runtime_config
                services.sessions.mark_interrupted_turns()  # before this process runs any of its turns
                self._named[name] = services
            return services

    def all(self) -> list[Services]:
        with self._lock:
            return [self.default, *self._named.values()]

"""The services one server process holds, built once and shared by every edge."""

from __future__ import annotations

from dataclasses import dataclass

from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.agent import AgentEngine
from clawlet.files import EditableFiles
from clawlet.memory.stores import MEMORY_SOURCE, KnowledgeBase, MemoryIndex, build_embedder
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.runtime.manager import SessionManager
from clawlet.sessions.store import TranscriptStore
from clawlet.skills.scanner import refresh_snapshot


@dataclass
class Services:
    settings: Settings
    runtime_config: RuntimeConfig
    engine: AgentEngine
    transcripts: TranscriptStore
    sessions: SessionManager
    files: EditableFiles
    memory: MemoryIndex
    knowledge: KnowledgeBase


def build_services(settings: Settings, *, demo_token_delay: float = 0.0) -> Services:
    paths = settings.paths
    runtime_config = RuntimeConfig(paths.config_file)
    embedder = build_embedder(settings)
    memory = MemoryIndex(paths, embedder)
    knowledge = KnowledgeBase(paths, embedder)
    engine = AgentEngine(settings, runtime_config, memory, knowledge, demo_token_delay=demo_token_delay)
    transcripts = TranscriptStore(paths.sessions)
    manager = SessionManager(settings, transcripts, {"engine": lambda: EngineAdapter(engine)})
    files = EditableFiles(paths.root)

    def after_save(relative: str) -> None:
        if relative.startswith("skills/") and relative.endswith("/SKILL.md"):
            refresh_snapshot(paths.root)
        elif relative == MEMORY_SOURCE:
            memory.refresh()
        elif relative.startswith("knowledge/"):
            knowledge.refresh()

    files.on_save(after_save)
    return Services(settings, runtime_config, engine, transcripts, manager, files, memory, knowledge)

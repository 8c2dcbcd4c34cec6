"""The services one server process holds, built once and shared by every edge."""

from __future__ import annotations

from dataclasses import dataclass

from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.agent import AgentEngine
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.runtime.manager import SessionManager
from clawlet.sessions.store import TranscriptStore


@dataclass
class Services:
    settings: Settings
    runtime_config: RuntimeConfig
    engine: AgentEngine
    transcripts: TranscriptStore
    sessions: SessionManager


def build_services(settings: Settings, *, demo_token_delay: float = 0.0) -> Services:
    paths = settings.paths
    runtime_config = RuntimeConfig(paths.config_file)
    engine = AgentEngine(settings, runtime_config, demo_token_delay=demo_token_delay)
    transcripts = TranscriptStore(paths.sessions)
    manager = SessionManager(settings, transcripts, {"engine": lambda: EngineAdapter(engine)})
    return Services(settings, runtime_config, engine, transcripts, manager)

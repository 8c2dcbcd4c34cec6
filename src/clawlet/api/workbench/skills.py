"""``GET /api/skills`` and ``GET /api/status``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from clawlet import __version__
from clawlet.api.deps import ServicesDep
from clawlet.llm.providers import describe_model
from clawlet.skills.scanner import refresh_snapshot

router = APIRouter()


@router.get("/skills")
def list_skills(services: ServicesDep) -> dict[str, Any]:
    result = refresh_snapshot(services.settings.paths.root)
    return {
        "skills": [skill.to_dict() for skill in result.skills],
        "problems": [asdict(problem) for problem in result.problems],
    }


@router.get("/status")
def status(services: ServicesDep) -> dict[str, Any]:
    info = describe_model(services.settings)
    return {
        "version": __version__,
        "model": {"provider": info.provider, "name": info.name, "label": info.label, "is_demo": info.is_demo},
        "home": str(services.settings.paths.root),
        "rag_mode": services.runtime_config.get_rag_mode(),
    }

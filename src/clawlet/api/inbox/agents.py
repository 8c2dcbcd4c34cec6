"""``/api/v1/agents`` (create, list, get) and ``/api/v1/openclaw/models``, all from openclaw.json.

There is no PATCH or DELETE, as in the seed: agents are created here but never changed or removed.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from clawlet.api.deps import InboxDep
from clawlet.inbox.agents import AgentInfo
from clawlet.inbox.service import InboxService, UnknownAgent

router = APIRouter()


class CreateAgent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=100)
    model: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=500)


def _stamp(inbox: InboxService) -> int:
    """Agents carry no times of their own: the seed generates them when answering; clawlet uses
    the modification time of openclaw.json (stable between calls), or now without one."""
    try:
        return int(os.stat(inbox.agents.config_file).st_mtime * 1000)
    except OSError:
        return int(time.time() * 1000)


def _agent_json(agent: AgentInfo, stamp: int, task_count: int) -> dict[str, Any]:
    return {**agent.to_json(stamp), "taskCount": task_count}


@router.post("/agents", status_code=201)
async def create_agent(body: CreateAgent, inbox: InboxDep) -> dict[str, Any]:
    agent = await asyncio.to_thread(
        inbox.agents.create_agent, body.id, body.name, body.model, body.description
    )
    return _agent_json(agent, _stamp(inbox), 0)


@router.get("/agents")
async def list_agents(inbox: InboxDep) -> list[dict[str, Any]]:
    stamp = _stamp(inbox)
    return [_agent_json(agent, stamp, count) for agent, count in await inbox.list_agents()]


@router.get("/agents/{agent_id}")
async def get_agent(agent_id: str, inbox: InboxDep) -> dict[str, Any]:
    for agent, count in await inbox.list_agents():
        if agent.id == agent_id:
            return _agent_json(agent, _stamp(inbox), count)
    raise UnknownAgent(agent_id)


@router.get("/openclaw/models")
async def list_models(inbox: InboxDep) -> list[dict[str, Any]]:
    return [model.to_json() for model in await asyncio.to_thread(inbox.agents.list_models)]

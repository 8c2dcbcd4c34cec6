"""``/api/config``: the RAG switch and the tool approval policies, persisted in ``config.json``.

``GET /api/config/tool-approvals[?workspace=NAME]`` →
``{workspace, listens_beyond_loopback, policies, configured, inherited, defaults}``: ``policies`` is
what applies to every tool now (``allow``/``ask``/``deny``), ``configured`` the workspace's own
``config.json`` entries, ``inherited`` the main home's (for a named workspace), ``defaults`` the
built-in ones. ``PUT`` with ``{"policies": {tool: policy}}`` replaces the workspace's own entries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, StrictBool

from clawlet.api.deps import ServicesDep, WorkspacesDep
from clawlet.config import ApprovalPolicy
from clawlet.engine.tool_approvals import default_policies
from clawlet.errors import ApiError
from clawlet.services import InvalidWorkspace, Services, Workspaces
from clawlet.tools.ask_user import ASK_USER_TOOL

router = APIRouter()


class RagMode(BaseModel):
    enabled: StrictBool


@router.get("/config/rag-mode")
def get_rag_mode(services: ServicesDep) -> RagMode:
    return RagMode(enabled=services.runtime_config.get_rag_mode())


@router.put("/config/rag-mode")
async def set_rag_mode(body: RagMode, services: ServicesDep) -> RagMode:
    await asyncio.to_thread(services.runtime_config.set_rag_mode, body.enabled)
    return RagMode(enabled=body.enabled)


class ToolApprovals(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: dict[str, ApprovalPolicy]


def _workspace(workspaces: Workspaces, name: str | None) -> Services:
    try:
        return workspaces.get(name)
    except InvalidWorkspace as exc:
        raise ApiError(422, "invalid_workspace", str(exc)) from exc


async def _describe(services: Services, name: str | None) -> dict[str, Any]:
    tools = await services.engine.available_tool_names()
    config = services.runtime_config
    return {
        "workspace": name or "shared",
        "listens_beyond_loopback": services.settings.listens_beyond_loopback,
        "policies": services.engine.tool_policies(),
        "configured": config.get_tool_approvals(),
        "inherited": config.inherited_tool_approvals(),
        "defaults": default_policies(services.settings, tools),
    }


@router.get("/config/tool-approvals")
async def get_tool_approvals(workspaces: WorkspacesDep, workspace: str | None = None) -> dict[str, Any]:
    return await _describe(_workspace(workspaces, workspace), workspace)


@router.put("/config/tool-approvals")
async def set_tool_approvals(
    body: ToolApprovals, workspaces: WorkspacesDep, workspace: str | None = None
) -> dict[str, Any]:
    services = _workspace(workspaces, workspace)
    known = set(await services.engine.available_tool_names())
    unknown = sorted(set(body.policies) - known)
    if unknown:
        raise ApiError(
            422,
            "unknown_tool",
            f"unknown tool(s): {', '.join(unknown)}; known tools: {', '.join(sorted(known))}",
            {"unknown": unknown},
        )
    if body.policies.get(ASK_USER_TOOL) == "allow":
        raise ApiError(422, "invalid_policy", f"{ASK_USER_TOOL} can only ask or be denied (ask or deny)")
    policies: dict[str, ApprovalPolicy] = dict(body.policies)
    await asyncio.to_thread(services.runtime_config.set_tool_approvals, policies)
    return await _describe(services, workspace)

"""Dependency aliases for route functions.

Each is a coroutine function although it only reads ``app.state``: FastAPI runs a plain function
dependency on a worker thread (a hop to another thread and back, and the GIL handed over twice,
before the endpoint even starts); a coroutine runs on the event loop."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from clawlet.inbox.service import InboxService
from clawlet.services import Services, Workspaces


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_workspaces(request: Request) -> Workspaces:
    workspaces: Workspaces = request.app.state.workspaces
    return workspaces


WorkspacesDep = Annotated[Workspaces, Depends(get_workspaces)]


async def get_inbox(request: Request) -> InboxService:
    inbox: InboxService = request.app.state.inbox
    return inbox


InboxDep = Annotated[InboxService, Depends(get_inbox)]

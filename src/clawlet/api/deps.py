"""Dependency aliases for route functions."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from clawlet.inbox.service import InboxService
from clawlet.services import Services, Workspaces


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_workspaces(request: Request) -> Workspaces:
    workspaces: Workspaces = request.app.state.workspaces
    return workspaces


WorkspacesDep = Annotated[Workspaces, Depends(get_workspaces)]


def get_inbox(request: Request) -> InboxService:
    inbox: InboxService = request.app.state.inbox
    return inbox


InboxDep = Annotated[InboxService, Depends(get_inbox)]

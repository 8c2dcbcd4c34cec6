"""Exec planes for the tests: a :class:`ControlPlaneClient` for a
:class:`~tests.support.scripted_control_plane.ScriptedControlPlane`, made as ``clawlet exec-plane``
makes one (token and ticket issued by that control plane), with quick heartbeats and reconnects."""

from __future__ import annotations

from pathlib import Path

from clawlet.execplane.client import ControlPlaneClient
from tests.support.scripted_control_plane import ScriptedControlPlane


def client_for(plane: ScriptedControlPlane, user_id: str, state_dir: Path) -> ControlPlaneClient:
    """A not yet connected client of ``user_id`` for ``plane``, keeping its state in ``state_dir``."""
    return ControlPlaneClient(
        plane.url,
        user_id,
        plane.issue_token(user_id),
        plane.issue_ticket(user_id),
        state_dir=state_dir,
        heartbeat_interval=0.2,
        backoff=[0.05, 0.1, 0.2],
    )

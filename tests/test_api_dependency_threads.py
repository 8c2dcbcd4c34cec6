"""A turn's request reaches its endpoint without a hop to a worker thread (issue 17): FastAPI runs a
plain-function dependency on a worker thread, so the services and workspaces the routes depend on
are given by coroutines, on the event loop. Counted, through a real server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.dependencies import utils as dependency_utils

from clawlet.api.app import create_app
from clawlet.config import Settings
from tests.conftest import LiveServer


def test_the_chat_surfaces_solve_their_dependencies_on_the_event_loop(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []
    real = dependency_utils.run_in_threadpool

    async def counting(call: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(call, "__name__", repr(call)))
        return await real(call, *args, **kwargs)

    monkeypatch.setattr(dependency_utils, "run_in_threadpool", counting)
    requests: list[tuple[str, dict[str, Any]]] = [
        (
            "/v1/chat/completions",
            {"model": "clawlet", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("/api/chat", {"message": "hi"}),
        ("/api/agent", {"prompt": "hi"}),
    ]
    for path, body in requests:
        response = httpx.post(f"{server.url}{path}", json=body, timeout=60)
        assert response.status_code == 200, (path, response.text)
    assert hops == []


def test_the_turn_endpoints_are_matched_before_the_other_routes(settings: Settings) -> None:
    """A request is matched against the routes in order, several times per request: the routers of
    the turn endpoints come right after FastAPI's own documentation routes."""
    from starlette.routing import Match

    app = create_app(settings)

    def checked_before_match(path: str) -> int:
        scope = {"type": "http", "path": path, "method": "POST", "root_path": "", "headers": []}
        for index, route in enumerate(app.router.routes):
            if route.matches(scope)[0] == Match.FULL:
                return index
        raise AssertionError(f"no route for {path}")

    assert [checked_before_match(p) for p in ("/api/chat", "/v1/chat/completions", "/api/agent")] == [4, 5, 6]

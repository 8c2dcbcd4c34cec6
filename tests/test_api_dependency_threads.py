"""A turn's request reaches its endpoint without a hop to a worker thread (issue 17): FastAPI runs a
plain-function dependency on a worker thread, so the services and workspaces the routes depend on
are given by coroutines, on the event loop. Counted, through a real server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.dependencies import utils as dependency_utils

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

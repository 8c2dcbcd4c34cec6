"""``GET /auth``, the probe the web UIs use to decide whether to show their sign-in screen."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from clawlet.config import Settings
from tests.conftest import LiveServer


def test_no_token_configured_means_no_sign_in(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/auth")
    assert response.status_code == 200
    assert response.json() == {"required": False, "authenticated": True}
    # whatever a browser still sends is ignored
    stale = httpx.get(f"{server.url}/auth", headers={"Authorization": "Bearer old"})
    assert stale.json() == {"required": False, "authenticated": True}


def test_with_a_token_it_checks_without_a_401(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(settings.model_copy(update={"api_token": "s3cret", "api_keys": "other,keys"}))
    anonymous = httpx.get(f"{server.url}/auth")
    assert anonymous.status_code == 200
    assert anonymous.json() == {"required": True, "authenticated": False}
    assert anonymous.headers["cache-control"] == "no-store"
    wrong = httpx.get(f"{server.url}/auth", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 200 and wrong.json() == {"required": True, "authenticated": False}
    for token in ("s3cret", "keys"):
        right = httpx.get(f"{server.url}/auth", headers={"Authorization": f"Bearer {token}"})
        assert right.json() == {"required": True, "authenticated": True}
    # the probe opens nothing else
    assert httpx.get(f"{server.url}/api/status").status_code == 401
    wrong_stream = httpx.get(f"{server.url}/api/v1/events", headers={"Authorization": "Bearer nope"})
    assert wrong_stream.status_code == 401

"""Host and Origin checks (clawlet.api.origin_guard) against real servers on loopback: DNS
rebinding, cross-origin WebSockets and cross-site requests are refused before any handler runs."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from clawlet.api.gateway_ws import build_gateway_app
from clawlet.config import Settings
from clawlet.controlplane.frontend import create_cluster_app
from clawlet.controlplane.server import ControlPlaneConfig, new_jwt_secret
from clawlet.serving import uvicorn_options
from clawlet.testing.prompt_server import PromptServer
from tests.conftest import LiveServer, assert_error, free_port

EVIL = "evil.example"
TOKEN = "s3cret-token"


@contextmanager
def serving(app: ASGIApp, *, lifespan: Literal["auto", "off"] = "auto") -> Iterator[int]:
    """``app`` on a real uvicorn server on 127.0.0.1 (in a thread); yields its port."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan, **uvicorn_options()
    )
    server = PromptServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def session_files(settings: Settings) -> list[Path]:
    return sorted(settings.paths.sessions.glob("*.json"))


async def first_frame(port: int, path: str = "/gateway", **options: Any) -> dict[str, Any]:
    """Open a gateway WebSocket to 127.0.0.1:``port`` (``uri_host``: the name in the URI, hence in
    ``Host``) and return its first frame."""
    uri_host = options.pop("uri_host", f"127.0.0.1:{port}")
    async with connect(f"ws://{uri_host}{path}", host="127.0.0.1", port=port, **options) as ws:
        frame: dict[str, Any] = json.loads(await ws.recv())
        return frame


async def refused_status(port: int, path: str = "/gateway", **options: Any) -> int:
    with pytest.raises(InvalidStatus) as refused:
        await first_frame(port, path, **options)
    return refused.value.response.status_code


# -- DNS rebinding: a page on another name that resolves to 127.0.0.1 ---------------------------------


def test_a_rebound_host_runs_nothing(server: LiveServer, settings: Settings) -> None:
    before = session_files(settings)
    rebound = {"Host": f"{EVIL}:{server.port}", "Origin": f"http://{EVIL}:{server.port}"}
    chat = httpx.post(
        f"{server.url}/api/chat", json={"message": "run: id", "session_id": "rebound"}, headers=rebound
    )
    error = assert_error(chat, 421, "host_not_allowed")
    assert "CLAWLET_ALLOWED_HOSTS" in error["message"]
    assert session_files(settings) == before, "a session was written for a rebound request"

    written = httpx.post(
        f"{server.url}/api/files",
        json={"path": "workspace/rebound.md", "content": "x"},
        headers={"Host": f"{EVIL}:{server.port}"},
    )
    assert_error(written, 421, "host_not_allowed")
    assert not (settings.paths.workspace / "rebound.md").exists()

    completion = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "run: id"}]},
        headers={"Host": EVIL},
    )
    assert completion.status_code == 421
    assert completion.json()["error"]["code"] == "host_not_allowed"
    assert completion.json()["error"]["type"]  # OpenAI's error shape
    # even reading is refused: the Host check comes before any handler
    assert httpx.get(f"{server.url}/health", headers={"Host": EVIL}).status_code == 421
    assert httpx.get(f"{server.url}/", headers={"Host": f"{EVIL}:{server.port}"}).status_code == 421


def test_the_names_of_this_machine_are_answered(server: LiveServer) -> None:
    for host in ("localhost", "127.0.0.1", "[::1]", socket.gethostname()):
        response = httpx.get(f"{server.url}/api/status", headers={"Host": f"{host}:{server.port}"})
        assert response.status_code == 200, (host, response.text)
    # the same names with another port are not this server (a page served there is another origin)
    for host in (f"localhost:{server.port + 1}", "localhost", "127.0.0.1:9999", "", "a@localhost"):
        response = httpx.get(f"{server.url}/api/status", headers={"Host": host})
        assert response.status_code == 421, host


def test_allowed_hosts_setting(
    live_server: Callable[..., LiveServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAWLET_ALLOWED_HOSTS", f"clawlet.lan, {EVIL}:8443")
    server = live_server(Settings())
    assert httpx.get(f"{server.url}/api/status", headers={"Host": "clawlet.lan"}).status_code == 200
    assert httpx.get(f"{server.url}/api/status", headers={"Host": "clawlet.lan:80"}).status_code == 200
    assert httpx.get(f"{server.url}/api/status", headers={"Host": f"{EVIL}:8443"}).status_code == 200
    assert httpx.get(f"{server.url}/api/status", headers={"Host": f"{EVIL}:8444"}).status_code == 421
    monkeypatch.setenv("CLAWLET_ALLOWED_HOSTS", "*")
    anything = live_server(Settings())
    assert httpx.get(f"{anything.url}/api/status", headers={"Host": EVIL}).status_code == 200


# -- cross-site requests from browser pages ------------------------------------------------------


def test_state_changing_requests_from_other_origins_are_refused(
    server: LiveServer, settings: Settings
) -> None:
    def post_file(headers: dict[str, str], name: str) -> httpx.Response:
        body = {"path": f"workspace/{name}.md", "content": "x"}
        return httpx.post(f"{server.url}/api/files", json=body, headers=headers)

    for name, headers in {
        "evil-origin": {"Origin": f"http://{EVIL}"},
        "other-port": {"Origin": "http://localhost:9999"},
        "other-loopback": {"Origin": "http://127.0.0.2:9999"},
        "null-origin": {"Origin": "null"},
        "cross-site": {"Sec-Fetch-Site": "cross-site"},
        "same-site": {"Sec-Fetch-Site": "same-site"},
    }.items():
        assert_error(post_file(headers, name), 403, "origin_not_allowed")
        assert not (settings.paths.workspace / f"{name}.md").exists(), name
    assert (
        "CLAWLET_ALLOWED_ORIGINS"
        in assert_error(post_file({"Origin": f"http://{EVIL}"}, "e"), 403, "origin_not_allowed")["message"]
    )

    completion = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Origin": f"http://{EVIL}"},
    )
    assert completion.status_code == 403 and completion.json()["error"]["code"] == "origin_not_allowed"
    assert completion.json()["error"]["type"]  # OpenAI's error shape

    # the server's own pages, and clients that are not browsers, pass
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    assert post_file(own, "own").status_code == 200
    by_name = {"Host": f"localhost:{server.port}", "Origin": f"http://localhost:{server.port}"}
    assert post_file(by_name, "by-name").status_code == 200
    assert post_file({}, "curl").status_code == 200
    # reading is not state-changing: a link from another site still opens the workbench
    assert httpx.get(f"{server.url}/api/status", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200


def test_allowed_origins_setting(
    live_server: Callable[..., LiveServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAWLET_ALLOWED_ORIGINS", "http://localhost:5173, https://ui.example")
    server = live_server(Settings())
    for origin in ("http://localhost:5173", "https://ui.example", "https://UI.example:443"):
        body = {"path": "workspace/listed.md", "content": origin}
        response = httpx.post(f"{server.url}/api/files", json=body, headers={"Origin": origin})
        assert response.status_code == 200, (origin, response.text)
    refused = httpx.post(
        f"{server.url}/api/files",
        json={"path": "workspace/x.md", "content": "x"},
        headers={"Origin": "http://ui.example"},
    )
    assert_error(refused, 403, "origin_not_allowed")


# -- the gateway WebSocket -----------------------------------------------------------------------


async def test_gateway_refuses_rebound_hosts_and_other_origins(
    server: LiveServer, settings: Settings
) -> None:
    gateway_app = build_gateway_app(server.app.state.gateway)
    with serving(gateway_app, lifespan="off") as gateway_port:
        for port, path in ((server.port, "/gateway"), (gateway_port, "/"), (gateway_port, "/gateway")):
            assert await refused_status(port, path, uri_host=f"{EVIL}:{port}") == 421
            for origin in (f"http://{EVIL}:{port}", "http://127.0.0.2:9999", "http://localhost:9999"):
                assert await refused_status(port, path, origin=origin) == 403, origin
            # no Origin (OpenClaw's CLI), the server's own origin, by address or by name: accepted
            assert (await first_frame(port, path))["event"] == "connect.challenge"
            own = await first_frame(port, path, origin=f"http://127.0.0.1:{port}")
            assert own["event"] == "connect.challenge"
            by_name = await first_frame(
                port, path, uri_host=f"localhost:{port}", origin=f"http://localhost:{port}"
            )
            assert by_name["event"] == "connect.challenge"


async def test_gateway_refuses_other_origins_with_a_token_too(live_server: Callable[..., LiveServer]) -> None:
    server = live_server(Settings(api_token=TOKEN))
    assert await refused_status(server.port, origin=f"http://{EVIL}") == 403
    assert (await first_frame(server.port))["event"] == "connect.challenge"


async def test_gateway_allowed_origins(live_server: Callable[..., LiveServer]) -> None:
    server = live_server(Settings(allowed_origins="http://localhost:9999"))
    frame = await first_frame(server.port, origin="http://localhost:9999")
    assert frame["event"] == "connect.challenge"
    assert await refused_status(server.port, origin="http://localhost:9998") == 403


# -- the API documentation -----------------------------------------------------------------------


def test_api_docs_need_the_token_when_one_is_set(live_server: Callable[..., LiveServer]) -> None:
    open_server = live_server()
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{open_server.url}{path}").status_code == 200, path
    guarded = live_server(Settings(api_token=TOKEN))
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert_error(httpx.get(f"{guarded.url}{path}"), 401, "unauthorized")
        authorised = httpx.get(f"{guarded.url}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
        assert authorised.status_code == 200, path


# -- the control plane (cluster mode) ------------------------------------------------------------


async def test_control_plane_checks_host_and_origin(tmp_path: Path, settings: Settings) -> None:
    config = ControlPlaneConfig(
        data_dir=tmp_path / "cp", jwt_secret=new_jwt_secret(), public_url="http://cp.internal:8100"
    )
    with serving(create_cluster_app(config, settings)) as port:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{base}/health")).status_code == 200
            # the host of the public URL (where execution planes connect) is this server too
            assert (
                await client.get(f"{base}/health", headers={"Host": "cp.internal:8100"})
            ).status_code == 200
            assert_error(await client.get(f"{base}/health", headers={"Host": EVIL}), 421, "host_not_allowed")
            rebound = await client.post(f"{base}/api/chat", json={"message": "hi"}, headers={"Host": EVIL})
            assert_error(rebound, 421, "host_not_allowed")
            cross = await client.post(
                f"{base}/api/chat", json={"message": "hi"}, headers={"Origin": f"http://{EVIL}"}
            )
            assert_error(cross, 403, "origin_not_allowed")
        # /ws/vm: a browser page from elsewhere or a rebound name is refused before the upgrade;
        # execution planes (no Origin) get the handshake, here refused for its missing ticket
        assert await refused_status(port, "/ws/vm", origin=f"http://{EVIL}") == 403
        assert await refused_status(port, "/ws/vm", uri_host=f"{EVIL}:{port}") == 421
        async with connect(f"ws://127.0.0.1:{port}/ws/vm") as ws:
            assert ws.response is not None and ws.response.status_code == 101

"""Serving the built UI: SPA fallback, cached assets, API paths untouched, and the not-built page."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from clawlet.api.static import ASSET_CACHE, install_static


def make_client(web_dir: Path) -> TestClient:
    app = FastAPI()

    @app.get("/api/ping")
    def ping() -> dict[str, bool]:
        return {"ok": True}

    install_static(app, web_dir)
    return TestClient(app)


def test_serves_index_assets_and_spa_fallback(tmp_path: Path) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><div id=root></div>", encoding="utf-8")
    (tmp_path / "assets" / "index-abc123.js").write_text("console.log(1)", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("no", encoding="utf-8")
    client = make_client(tmp_path)

    for path in ("/", "/sessions/abc", "/some/deep/link"):
        response = client.get(path)
        assert response.status_code == 200
        assert "id=root" in response.text
        assert response.headers["cache-control"] == "no-cache"
    asset = client.get("/assets/index-abc123.js")
    assert asset.status_code == 200
    assert asset.headers["cache-control"] == ASSET_CACHE
    assert client.get("/assets/missing.js").status_code == 404
    assert client.get("/assets/..%2Fsecret.txt").status_code == 404
    assert client.get("/api/ping").json() == {"ok": True}
    assert client.get("/api/unknown").status_code == 404
    assert client.get("/v1/unknown").status_code == 404


def test_unbuilt_ui_answers_a_plain_page_with_build_instructions(tmp_path: Path) -> None:
    client = make_client(tmp_path / "missing")
    response = client.get("/")
    assert response.status_code == 200
    assert "scripts/setup" in response.text
    assert "npm run build" in response.text


def test_the_inbox_has_its_own_page_and_public_files(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><div id=root>workbench</div>", encoding="utf-8")
    (tmp_path / "inbox.html").write_text("<!doctype html><div id=root>inbox</div>", encoding="utf-8")
    (tmp_path / "inbox" / "sw.js").write_text("self.addEventListener('fetch', () => {})", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("no", encoding="utf-8")
    client = make_client(tmp_path)
    for path in ("/inbox", "/inbox/", "/inbox/agents/main", "/inbox/agents/main/tasks/01ABC"):
        response = client.get(path)
        assert response.status_code == 200 and ">inbox<" in response.text, path
    worker = client.get("/inbox/sw.js")
    assert worker.status_code == 200 and "addEventListener" in worker.text
    assert worker.headers["cache-control"] == "no-cache"
    assert ">inbox<" in client.get("/inbox/..%2Fsecret.txt").text  # never a file outside inbox/
    assert ">workbench<" in client.get("/sessions/x").text

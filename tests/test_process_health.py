"""``PUT /process`` exactly as Open WebUI's external document loader calls it, and ``/health``,
``/health/live`` and ``/health/ready`` against a real server (and a real scripted LLM endpoint)."""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import docx
import httpx
import pytest

from clawlet.config import Settings
from clawlet.runtime import health_checks
from clawlet.runtime.openclaw_bridge import node_supported, probe_openclaw, version_tuple
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests.conftest import LiveServer, free_port
from tests.test_retrieval import _minimal_pdf

OWUI_ID = "3f2a9c1e-7b4d-4e8a-9f10-2c3d4e5f6a7b"  # Open WebUI prefixes names with its file id


def put_process(
    server: LiveServer,
    data: bytes,
    filename: str | bytes | None = None,
    content_type: str | None = None,
    token: str | None = None,
) -> httpx.Response:
    """The request Open WebUI's ExternalDocumentLoader makes (``filename`` is sent as given)."""
    headers: list[tuple[bytes, bytes]] = []
    if filename is not None:
        headers.append((b"X-Filename", filename if isinstance(filename, bytes) else filename.encode()))
    if content_type is not None:
        headers.append((b"Content-Type", content_type.encode()))
    if token is not None:
        headers.append((b"Authorization", f"Bearer {token}".encode()))
    return httpx.put(f"{server.url}/process", content=data, headers=headers, timeout=30)


def owui_name(name: str) -> str:
    return quote(f"{OWUI_ID}_{name}")


def make_docx(*paragraphs: str, table: list[list[str]] | None = None) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


# -- /process ------------------------------------------------------------------------------------


def test_pdf_upload_returns_text_and_saves_the_file(server: LiveServer, settings: Settings) -> None:
    pdf = _minimal_pdf("Quarterly revenue grew twelve percent")
    response = put_process(server, pdf, owui_name("报告 2026.pdf"), "application/pdf")
    assert response.status_code == 200, response.text
    body = response.json()
    assert "Quarterly revenue grew twelve percent" in body["page_content"]
    meta = body["metadata"]
    assert meta["source"] == "报告 2026.pdf"
    assert meta["path"] == "uploads/报告 2026.pdf"
    assert meta["content_type"] == "application/pdf"
    assert meta["size"] == len(pdf) and meta["pages"] == 1
    assert (settings.paths.root / meta["path"]).read_bytes() == pdf

    again = put_process(server, pdf, owui_name("报告 2026.pdf"), "application/pdf").json()
    assert again["metadata"]["path"] == "uploads/报告 2026_2.pdf"  # never overwritten
    assert (settings.paths.root / "uploads" / "报告 2026.pdf").read_bytes() == pdf


def test_utf8_chinese_text_and_markdown(server: LiveServer, settings: Settings) -> None:
    text = "# 周报\n\n本周完成了检索模块，下周开始接入 Open WebUI。\n"
    response = put_process(server, text.encode("utf-8"), owui_name("周报.md"), "text/markdown")
    assert response.status_code == 200
    assert response.json()["page_content"] == text
    assert response.json()["metadata"]["content_type"] == "text/markdown"
    assert (settings.paths.root / "uploads" / "周报.md").read_text(encoding="utf-8") == text


def test_gbk_text_is_decoded(server: LiveServer) -> None:
    text = "会议纪要：明天上午十点在三楼开会，讨论预算。"
    response = put_process(server, text.encode("gbk"), owui_name("纪要.txt"))
    assert response.status_code == 200
    assert response.json()["page_content"] == text
    assert response.json()["metadata"]["content_type"] == "text/plain"


def test_docx_paragraphs_and_tables(server: LiveServer) -> None:
    data = make_docx("项目计划", "第一阶段完成需求分析。", table=[["阶段", "负责人"], ["设计", "张三"]])
    response = put_process(
        server,
        data,
        owui_name("计划.docx"),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    )
    assert response.status_code == 200, response.text
    content = response.json()["page_content"]
    assert "项目计划" in content and "第一阶段完成需求分析。" in content
    assert "阶段 | 负责人" in content and "设计 | 张三" in content


def test_html_becomes_markdown(server: LiveServer) -> None:
    html = "<html><body><h1>Release notes</h1><p>Fixed the <b>upload</b> bug.</p></body></html>"
    content = put_process(server, html.encode(), owui_name("notes.html"), "text/html").json()["page_content"]
    assert "# Release notes" in content and "**upload**" in content and "<p>" not in content


def test_type_is_sniffed_without_name_or_content_type(server: LiveServer, settings: Settings) -> None:
    pdf = _minimal_pdf("Sniffed from the magic bytes")
    response = put_process(server, pdf)
    assert response.status_code == 200
    meta = response.json()["metadata"]
    assert "Sniffed from the magic bytes" in response.json()["page_content"]
    assert meta["path"].startswith("uploads/upload-") and meta["path"].endswith(".pdf")
    assert meta["source"] == meta["path"].removeprefix("uploads/")
    assert meta["content_type"] == "application/pdf"
    assert (settings.paths.root / meta["path"]).is_file()


def test_unquoted_utf8_filename_header(server: LiveServer) -> None:
    response = put_process(server, "要点".encode(), f"{OWUI_ID}_笔记 v2.txt".encode())
    assert response.status_code == 200
    assert response.json()["metadata"]["source"] == "笔记 v2.txt"
    assert response.json()["metadata"]["path"] == "uploads/笔记 v2.txt"


@pytest.mark.parametrize("name", ["../../etc/x.txt", "..\\..\\etc\\x.txt", "/etc/x.txt"])
def test_traversal_in_the_filename_stays_in_uploads(
    server: LiveServer, settings: Settings, name: str
) -> None:
    response = put_process(server, b"harmless", quote(name, safe=""))
    assert response.status_code == 200
    assert response.json()["metadata"]["path"] == "uploads/x.txt"
    saved = settings.paths.root / "uploads" / "x.txt"
    assert saved.read_bytes() == b"harmless"
    assert not (settings.paths.root.parent / "etc").exists()


def test_hidden_and_empty_names_are_made_safe(server: LiveServer) -> None:
    hidden = put_process(server, b"x", quote("..env")).json()["metadata"]["path"]
    assert hidden == "uploads/env"
    blank = put_process(server, b"y", quote("../")).json()["metadata"]["path"]
    assert blank.startswith("uploads/upload-") and blank.endswith(".txt")


@pytest.mark.parametrize(
    ("data", "name", "content_type"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(200), "photo.png", "image/png"),
        (bytes(range(256)) * 8, "blob.dat", None),
        (bytes(range(256)) * 8, None, None),
        (_minimal_pdf(""), "scan.pdf", "application/pdf"),
        (b"%PDF-1.4 this is not really a pdf", "broken.pdf", "application/pdf"),
        (b"PK\x03\x04 not a zip", "broken.docx", None),
        (b"   \n\n  ", "blank.txt", "text/plain"),
    ],
)
def test_no_extractable_text_is_422_for_the_fallback(
    server: LiveServer, settings: Settings, data: bytes, name: str | None, content_type: str | None
) -> None:
    response = put_process(server, data, owui_name(name) if name else None, content_type)
    assert response.status_code == 422
    assert response.json()["detail"].startswith("No extractable text")
    assert not (settings.paths.root / "uploads").exists() or not any(
        (settings.paths.root / "uploads").iterdir()
    )


def test_size_limit_and_empty_body(live_server: Callable[..., LiveServer], settings: Settings) -> None:
    server = live_server(settings.model_copy(update={"max_upload_bytes": 1000}))
    response = put_process(server, b"a" * 4000, owui_name("big.txt"))
    assert response.status_code == 413
    assert "1000 bytes" in response.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while reading
        for _ in range(8):
            yield b"b" * 500

    streamed = httpx.put(f"{server.url}/process", content=chunks(), headers={"X-Filename": "s.txt"})
    assert streamed.status_code == 413
    assert put_process(server, b"c" * 1000, owui_name("fits.txt")).status_code == 200

    empty = put_process(server, b"", owui_name("empty.txt"))
    assert empty.status_code == 400
    assert empty.json()["error"]["code"] == "empty_body"
    assert sorted(p.name for p in (settings.paths.root / "uploads").iterdir()) == ["fits.txt"]


def test_process_needs_the_token_when_one_is_set(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(settings.model_copy(update={"api_token": "s3cret"}))
    refused = put_process(server, b"hello", owui_name("a.txt"))
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    assert put_process(server, b"hello", owui_name("a.txt"), token="wrong").status_code == 401
    accepted = put_process(server, b"hello", owui_name("a.txt"), token="s3cret")
    assert accepted.status_code == 200 and accepted.json()["page_content"] == "hello"


# -- /health -------------------------------------------------------------------------------------

CHECK_KEYS = {"llm", "workspace", "mcp", "openclaw_runtime", "inbox", "sandbox"}


def get_health(server: LiveServer, path: str = "/health", **headers: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=30)


def test_health_in_demo_mode(server: LiveServer, settings: Settings) -> None:
    response = get_health(server)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "healthy"
    assert body["version"] and body["timestamp"].endswith("Z")
    assert body["uptime_seconds"] >= 0 and body["uptime"] == body["uptime_seconds"]
    assert set(body["checks"]) == CHECK_KEYS
    for check in body["checks"].values():
        assert set(check) == {"status", "message", "details", "timestamp"}
    llm = body["checks"]["llm"]
    assert llm["status"] == "healthy" and llm["details"]["provider"] == "demo"
    assert "demo" in llm["message"]
    workspace = body["checks"]["workspace"]
    assert workspace["status"] == "healthy"
    assert workspace["details"] == {"path": str(settings.paths.root), "readable": True, "writable": True}
    assert body["checks"]["mcp"]["status"] == "not_configured"
    runtime = body["checks"]["openclaw_runtime"]
    assert runtime["status"] in {"healthy", "unavailable"} and runtime["details"]["optional"] is True
    assert body["openclaw_available"] is (runtime["status"] == "healthy")
    assert body["checks"]["inbox"]["status"] == "healthy"
    assert body["checks"]["inbox"]["details"] == {"backend": "local", "tasks": 0}
    assert not list(settings.paths.root.glob(".health-*"))  # the probe file is removed


def fake_openclaw_install(root: Path, node_version: str) -> Path:
    """A directory for ``PATH`` with a ``node`` that is ``node_version`` and an ``openclaw`` CLI
    (the symlink npm makes to a package's ``openclaw.mjs``), plus a bridge with its dependencies."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    node = bin_dir / "node"
    node.write_text(f"#!/bin/sh\necho {node_version}\n", encoding="utf-8")
    package = root / "openclaw"
    package.mkdir()
    entry = package / "openclaw.mjs"
    entry.write_text("#!/bin/sh\necho 2026.9.6\n", encoding="utf-8")
    (package / "package.json").write_text(json.dumps({"name": "openclaw", "version": "2026.9.6"}))
    for path in (node, entry):
        path.chmod(0o755)
    (bin_dir / "openclaw").symlink_to(entry)
    bridge = root / "bridge"
    (bridge / "src").mkdir(parents=True)
    (bridge / "src" / "main.mjs").write_text("", encoding="utf-8")
    (bridge / "node_modules" / "ws").mkdir(parents=True)
    (bridge / "node_modules" / "ws" / "package.json").write_text("{}", encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("version", "available"),
    [
        ("v24.15.0", False),
        ("v24.16.0", True),
        ("v24.21.0", True),
        ("v25.2.1", False),  # before issue 15 /health said yes while the bridge refused it
        ("v26.0.0", False),
        ("v26.1.0", True),
    ],
)
def test_the_openclaw_check_is_the_bridges_own_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, available: bool
) -> None:
    """One rule (OpenClaw's ``engines.node``: >=24.16.0 <25 || >=26.1.0) for ``/health`` and for
    the bridge's check before an ``openclaw`` session starts."""
    root = fake_openclaw_install(tmp_path, version)
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("CLAWLET_OPENCLAW_BRIDGE", str(root / "bridge"))
    monkeypatch.setattr(health_checks, "_runtime_cache", [])
    check = health_checks.probe_openclaw_runtime()
    assert check["status"] == ("healthy" if available else "unavailable"), check
    assert probe_openclaw().available is available  # what the bridge's preflight decides
    assert node_supported(version_tuple(version)) is available
    assert check["details"]["node_version"] == version
    if not available:
        assert f"Node.js {version} is outside OpenClaw's range >=24.16.0 <25 || >=26.1.0" in check["message"]
        assert str(root) not in check["message"]  # paths only in the details (hidden without the token)


def test_health_says_openclaw_is_unavailable_on_a_node_the_bridge_refuses(
    live_server: Callable[..., LiveServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_openclaw_install(tmp_path / "openclaw-install", "v25.2.1")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("CLAWLET_OPENCLAW_BRIDGE", str(root / "bridge"))
    monkeypatch.setattr(health_checks, "_runtime_cache", [])
    body = get_health(live_server()).json()
    runtime = body["checks"]["openclaw_runtime"]
    assert body["openclaw_available"] is False and runtime["status"] == "unavailable", runtime
    assert runtime["details"]["node_required"] == ">=24.16.0 <25 || >=26.1.0"


def test_health_reports_mcp_config(server: LiveServer, settings: Settings) -> None:
    config = settings.paths.root / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"calc": {"command": "python3", "args": ["c.py"]}}}))
    mcp = get_health(server).json()["checks"]["mcp"]
    assert mcp["status"] == "healthy" and mcp["details"]["servers"] == 1
    assert mcp["details"]["server_names"] == ["calc"]

    config.write_text("{not json")
    response = get_health(server)
    assert response.status_code == 200 and response.json()["status"] == "degraded"
    assert response.json()["checks"]["mcp"]["status"] == "degraded"


def openai_settings(settings: Settings, base_url: str) -> Settings:
    return settings.model_copy(
        update={
            "provider": "openai",
            "llm_base_url": base_url,
            "llm_model": "scripted-model",
            "llm_api_key": "k",
        }
    )


def test_health_probes_a_reachable_llm(live_server: Callable[..., LiveServer], settings: Settings) -> None:
    with ScriptedOpenAIServer() as llm:
        server = live_server(openai_settings(settings, llm.base_url))
        response = get_health(server)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "healthy"
    check = body["checks"]["llm"]
    assert check["status"] == "healthy"
    assert check["details"]["reachable"] is True and check["details"]["http_status"] == 200
    assert check["details"]["provider"] == "openai" and check["details"]["model"] == "scripted-model"


def test_health_with_an_unreachable_llm_is_degraded(
    live_server: Callable[..., LiveServer], settings: Settings
) -> None:
    server = live_server(openai_settings(settings, f"http://127.0.0.1:{free_port()}/v1"))
    response = get_health(server)
    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    check = response.json()["checks"]["llm"]
    assert check["status"] == "degraded" and check["details"]["reachable"] is False
    assert "unreachable" in check["message"]


def test_health_when_the_home_is_gone_is_unhealthy(server: LiveServer, settings: Settings) -> None:
    assert get_health(server, "/health/ready").status_code == 200
    home = settings.paths.root
    moved = home.with_name("home-moved")
    home.rename(moved)
    home.write_text("a file where the home should be")
    try:
        response = get_health(server)
        assert response.status_code == 503
        assert response.json()["status"] == "unhealthy"
        workspace = response.json()["checks"]["workspace"]
        assert workspace["status"] == "unhealthy" and workspace["details"]["writable"] is False
        ready = get_health(server, "/health/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
        assert get_health(server, "/health/live").json() == {"status": "ok"}
    finally:
        home.unlink()
        moved.rename(home)
    assert get_health(server, "/health/ready").status_code == 200


def test_health_when_the_home_is_read_only_is_unhealthy(server: LiveServer, settings: Settings) -> None:
    home = settings.paths.root
    mode = home.stat().st_mode
    home.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(home, os.W_OK):
            pytest.skip("permissions are not enforced for this user (root)")
        response = get_health(server)
        assert response.status_code == 503 and response.json()["status"] == "unhealthy"
        assert response.json()["checks"]["workspace"]["details"]["writable"] is False
        assert get_health(server, "/health/ready").status_code == 503
    finally:
        home.chmod(mode)


def test_health_endpoints_with_a_token(live_server: Callable[..., LiveServer], settings: Settings) -> None:
    server = live_server(settings.model_copy(update={"api_token": "s3cret"}))
    assert get_health(server, "/health/live").json() == {"status": "ok"}
    assert get_health(server, "/health/ready").status_code == 200
    public = get_health(server)
    assert public.status_code == 200 and set(public.json()["checks"]) == CHECK_KEYS
    assert "path" not in public.json()["checks"]["workspace"]["details"]  # no local paths leak
    private = get_health(server, Authorization="Bearer s3cret")
    assert private.json()["checks"]["workspace"]["details"]["path"] == str(settings.paths.root)
    assert httpx.get(f"{server.url}/api/status").status_code == 401  # the rest stays guarded

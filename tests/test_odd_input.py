"""Odd input gets a 4xx in the surface's error format, never a 500, and the connection stays open.

A lone UTF-16 surrogate in a JSON string (``"x\\ud800"``) used to reach a file, a log line, SQLite or
tiktoken and raise ``UnicodeEncodeError``: a 500 that also dropped the client's keep-alive
connection. It is refused before any route runs, on every surface.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from clawlet.config import Settings
from tests.conftest import LiveServer, assert_error

LONE = "x\ud800y"


def post_json(server: LiveServer, path: str, body: Any, method: str = "POST") -> httpx.Response:
    """Send ``body`` as JSON with non-ASCII escaped (``\\ud800``), as any JSON encoder may: httpx's own
    encoder would refuse to send a lone surrogate at all."""
    return httpx.request(
        method,
        f"{server.url}{path}",
        content=json.dumps(body).encode("ascii"),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )


def assert_invalid_field(response: httpx.Response, field: str) -> None:
    error = assert_error(response, 422, "invalid_request")
    assert error["details"] == [{"field": field, "message": error["details"][0]["message"]}]
    assert "surrogate" in error["message"]


def test_a_lone_surrogate_in_a_saved_file_is_refused_and_nothing_is_written(
    server: LiveServer, settings: Settings
) -> None:
    response = post_json(server, "/api/files", {"path": "workspace/odd.md", "content": LONE})
    assert_invalid_field(response, "content")
    assert not (settings.paths.root / "workspace" / "odd.md").exists()
    named = post_json(server, "/api/files", {"path": f"workspace/{LONE}.md", "content": "x"})
    assert_invalid_field(named, "path")


def test_a_lone_surrogate_in_the_workbench_chat_is_refused_before_a_session_exists(
    server: LiveServer, settings: Settings
) -> None:
    response = post_json(server, "/api/chat", {"message": LONE, "stream": False})
    assert_invalid_field(response, "message")
    key = post_json(server, "/api/chat", {"message": "hi", "stream": False, LONE: 1})
    assert_invalid_field(key, "x\\ud800y")  # the key is named with the surrogate escaped
    renamed = post_json(server, "/api/sessions", {"title": LONE})
    assert_invalid_field(renamed, "title")
    assert list((settings.paths.root / "sessions").glob("*.json")) == []


def test_a_lone_surrogate_in_an_openai_message_gets_openais_400(server: LiveServer) -> None:
    response = post_json(
        server,
        "/v1/chat/completions",
        {"model": "clawlet", "messages": [{"role": "user", "content": LONE}], "stream": True},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages.0.content"
    assert "surrogate" in error["message"]


def test_a_lone_surrogate_on_the_native_endpoint_and_the_inbox_is_refused(server: LiveServer) -> None:
    assert_invalid_field(post_json(server, "/api/agent", {"prompt": LONE}), "prompt")
    assert_invalid_field(post_json(server, "/api/agent", {"prompt": "hi", "files": [LONE]}), "files.0")
    assert_invalid_field(post_json(server, "/api/v1/tasks", {"content": LONE}), "content")
    task = post_json(server, "/api/v1/tasks", {"content": "say hi"})
    assert task.status_code == 201, task.text
    task_id = task.json()["id"]
    assert_invalid_field(post_json(server, f"/api/v1/tasks/{task_id}/messages", {"content": LONE}), "content")
    assert_invalid_field(post_json(server, f"/api/v1/tasks/{task_id}", {"title": LONE}, "PATCH"), "title")
    assert_invalid_field(post_json(server, "/api/v1/agents", {"id": "odd", "name": LONE}), "name")


def test_surrogates_spelled_as_raw_bytes_are_refused_too(server: LiveServer) -> None:
    """Python's JSON decoder lets the bytes ED A0 80 through as a lone surrogate as well."""
    response = httpx.post(
        f"{server.url}/api/files",
        content=b'{"path": "workspace/odd.md", "content": "x\xed\xa0\x80"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert_invalid_field(response, "content")


def test_valid_text_that_looks_like_a_surrogate_is_kept(server: LiveServer, settings: Settings) -> None:
    """An escaped pair is one character (an emoji); an escaped backslash is plain text."""
    text = "smile \U0001f600 and a literal \\ud800"
    response = post_json(server, "/api/files", {"path": "workspace/fine.md", "content": text})
    assert response.status_code == 200, response.text
    assert (settings.paths.root / "workspace" / "fine.md").read_text(encoding="utf-8") == text


def test_a_document_with_surrogate_bytes_is_not_a_json_request(server: LiveServer) -> None:
    """``PUT /process`` takes a document's bytes: decoded strictly, never into a lone surrogate."""
    response = httpx.put(
        f"{server.url}/process",
        content=b'{"text": "x\\ud800", "raw": "x\xed\xa0\x80"}',
        headers={"Content-Type": "application/json", "X-Filename": "odd%ED%A0%80.json"},
        timeout=60,
    )
    assert response.status_code in {200, 422}, response.text


def test_a_deeply_nested_body_is_a_4xx(server: LiveServer) -> None:
    response = httpx.post(
        f"{server.url}/api/files", content=b"[" * 30000, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send one HTTP/1.1 request on an open connection and read its whole answer (Content-Length)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-answer"
        body += chunk
    return head


@pytest.mark.parametrize(
    ("path", "fields", "status"),
    [
        ("/api/files", {"path": "workspace/a.md", "content": LONE}, b"422"),
        (
            "/v1/chat/completions",
            {"model": "clawlet", "messages": [{"role": "user", "content": LONE}]},
            b"400",
        ),
    ],
    ids=["workbench", "openai"],
)
def test_a_refused_body_keeps_the_keep_alive_connection(
    server: LiveServer, path: str, fields: dict[str, Any], status: bytes
) -> None:
    body = json.dumps(fields).encode()
    odd = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    follow_up = f"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = exchange(sock, odd)
        assert head.split(b" ")[1] == status, head
        assert b"connection: close" not in head.lower()
        assert exchange(sock, follow_up).split(b" ")[1] == b"200"


def test_405_names_every_allowed_method_on_both_surfaces(server: LiveServer) -> None:
    workbench = httpx.delete(f"{server.url}/api/files")
    assert_error(workbench, 405, "method_not_allowed")
    assert workbench.headers["allow"] == "GET, POST"
    openai = httpx.delete(f"{server.url}/v1/chat/completions")
    assert openai.status_code == 405
    assert openai.headers["allow"] == "POST"
    assert openai.json()["error"]["type"] == "invalid_request_error"


def test_openapi_documents_the_error_answers_and_event_streams(server: LiveServer) -> None:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    files = paths["/api/files"]["get"]["responses"]
    assert {"401", "403", "404", "421", "422"} <= set(files)
    assert files["404"]["content"]["application/json"]["schema"]["required"] == ["error"]
    completions = paths["/v1/chat/completions"]["post"]["responses"]
    assert {"400", "401", "403", "409"} <= set(completions) and "422" not in completions
    assert {"application/json", "text/event-stream"} <= set(completions["200"]["content"])
    assert set(paths["/api/agent"]["post"]["responses"]["200"]["content"]) == {"text/event-stream"}
    assert "text/event-stream" in paths["/api/v1/events"]["get"]["responses"]["200"]["content"]
    assert "application/octet-stream" in paths["/process"]["put"]["requestBody"]["content"]


def test_unauthorised_bodies_are_not_read(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a token set, a request without it gets the 401 first, whatever its body holds."""
    monkeypatch.setenv("CLAWLET_API_TOKEN", "odd-input-token-0123456789")
    server = live_server(Settings())
    assert_error(
        post_json(server, "/api/files", {"path": "workspace/a.md", "content": LONE}), 401, "unauthorized"
    )


@pytest.mark.slow
def test_every_path_answers_an_undocumented_method_with_405_and_its_allow(server: LiveServer) -> None:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    for template, operations in paths.items():
        documented = {method.upper() for method in operations}
        method = next(m for m in ("PATCH", "DELETE", "PUT", "POST") if m not in documented)
        path = template.replace("{", "").replace("}", "")  # any value fits a path parameter
        response = httpx.request(method, f"{server.url}{path}", timeout=60)
        assert response.status_code == 405, (method, path, response.text)
        assert set(response.headers["allow"].split(", ")) == documented, (method, path)

"""Files, tokens, RAG-mode config and compression endpoints: success and bad input."""

from __future__ import annotations

import json
import os
import socket

import httpx
import pytest

from clawlet.tokens import count_tokens
from tests.conftest import LiveServer


def chat(server: LiveServer, session_id: str, message: str) -> None:
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": message, "session_id": session_id, "stream": False},
        timeout=60,
    )
    assert response.status_code == 200, response.text


def test_token_count_is_exact_cl100k_with_network_disabled() -> None:
    with pytest.raises(Exception, match=r"[Ss]ocket"):
        socket.create_connection(("203.0.113.7", 443), timeout=1)
    assert count_tokens("hello world") == 2
    assert count_tokens("tiktoken is great!") == 6
    assert count_tokens("你好，世界") == 6
    assert count_tokens("<|endoftext|>") > 1  # special-token text counts as plain text


def test_files_read_save_and_refuse_traversal(server: LiveServer) -> None:
    base = f"{server.url}/api/files"
    ok = httpx.get(base, params={"path": "workspace/SOUL.md"})
    assert ok.status_code == 200
    assert ok.json()["content"].startswith("# Soul")
    assert ok.json()["tokens"] == count_tokens(ok.json()["content"])

    saved = httpx.post(base, json={"path": "memory/MEMORY.md", "content": "# 记忆\n用户喜欢绿茶。"})
    assert saved.status_code == 200 and saved.json()["path"] == "memory/MEMORY.md"
    memory = server.settings.paths.memory_file.read_text(encoding="utf-8")
    assert memory == "# 记忆\n用户喜欢绿茶。"
    assert not [p for p in memory_dir_files(server) if p.startswith(".")]

    outside = server.settings.paths.root.parent / "secret.txt"
    outside.write_text("top secret", encoding="utf-8")
    os.symlink(outside, server.settings.paths.workspace / "link.md")
    for bad in (
        "../secret.txt",
        "/etc/passwd",
        "workspace/../../secret.txt",
        "workspace%2F..%2F..%2Fsecret.txt",
        "workspace\\..\\..\\secret.txt",
        "sessions/x.json",
        "config.json",
        "workspace",
        "workspace/link.md",
    ):
        response = httpx.get(base, params={"path": bad})
        assert response.status_code == 403, (bad, response.text)
        assert response.json()["error"]["code"] == "forbidden_path"
        assert "top secret" not in response.text
        post = httpx.post(base, json={"path": bad, "content": "x"})
        assert post.status_code == 403, bad
    assert outside.read_text(encoding="utf-8") == "top secret"

    missing = httpx.get(base, params={"path": "knowledge/none.md"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert httpx.get(base).status_code == 422
    assert httpx.post(base, json={"path": "memory/MEMORY.md"}).status_code == 422


def memory_dir_files(server: LiveServer) -> list[str]:
    return os.listdir(server.settings.paths.memory_file.parent)


def test_saving_a_skill_refreshes_the_snapshot(server: LiveServer) -> None:
    content = "---\nname: 翻译\ndescription: 把中文翻译成英文\n---\n1. 翻译\n"
    response = httpx.post(
        f"{server.url}/api/files", json={"path": "skills/translate/SKILL.md", "content": content}
    )
    assert response.status_code == 200
    snapshot = server.settings.paths.skills_snapshot.read_text(encoding="utf-8")
    assert "<name>翻译</name>" in snapshot
    assert "skills/translate/SKILL.md" in snapshot


def test_token_endpoints(server: LiveServer) -> None:
    chat(server, "t1", "你好")
    response = httpx.get(f"{server.url}/api/tokens/session/t1")
    assert response.status_code == 200
    body = response.json()
    assert body["system_tokens"] > 100
    assert body["message_tokens"] >= count_tokens("你好")
    assert body["total_tokens"] == body["system_tokens"] + body["message_tokens"]
    assert httpx.get(f"{server.url}/api/tokens/session/nope").status_code == 404

    files = httpx.post(
        f"{server.url}/api/tokens/files", json={"paths": ["workspace/SOUL.md", "knowledge/x.md"]}
    )
    assert files.status_code == 200
    soul = server.settings.paths.workspace.joinpath("SOUL.md").read_text(encoding="utf-8")
    assert files.json()["files"][0] == {
        "path": "workspace/SOUL.md",
        "tokens": count_tokens(soul),
        "exists": True,
    }
    assert files.json()["files"][1]["exists"] is False
    assert httpx.post(f"{server.url}/api/tokens/files", json={"paths": []}).status_code == 422
    bad = httpx.post(f"{server.url}/api/tokens/files", json={"paths": ["../etc/passwd"]})
    assert bad.status_code == 403


def test_rag_mode_config_persists(server: LiveServer) -> None:
    url = f"{server.url}/api/config/rag-mode"
    assert httpx.get(url).json() == {"enabled": False}
    assert httpx.put(url, json={"enabled": True}).json() == {"enabled": True}
    assert httpx.get(url).json() == {"enabled": True}
    stored = json.loads(server.settings.paths.config_file.read_text(encoding="utf-8"))
    assert stored["rag_mode"] is True
    for bad in ({"enabled": "yes"}, {}, {"enabled": None}):
        response = httpx.put(url, json=bad)
        assert response.status_code == 422
        assert "error" in response.json()
    assert httpx.get(url).json() == {"enabled": True}


def test_compression_archives_first_half_and_keeps_every_message(server: LiveServer) -> None:
    short = "c-short"
    chat(server, short, "hello")
    response = httpx.post(f"{server.url}/api/sessions/{short}/compress")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_enough_messages"
    assert httpx.post(f"{server.url}/api/sessions/nope/compress").status_code == 404

    session = "c-long"
    for message in ("run: echo one", "python: 6*7", "你好", "read workspace/USER.md"):
        chat(server, session, message)
    path = server.settings.paths.sessions / f"{session}.json"
    before = json.loads(path.read_text(encoding="utf-8"))["messages"]
    assert len(before) == 11  # the plain 你好 turn has a single segment

    result = httpx.post(f"{server.url}/api/sessions/{session}/compress")
    assert result.status_code == 200, result.text
    body = result.json()
    # 50% of 11 is 5, extended to 6 so the second turn's last segment stays with it
    assert body["archived_count"] == 6 and body["remaining_count"] == 5
    assert len(body["summary"]) <= 500

    after = json.loads(path.read_text(encoding="utf-8"))
    assert after["messages"] == before[6:]
    assert after["messages"][0]["role"] == "user"
    assert after["compressed_context"] == body["summary"]
    archives = list((server.settings.paths.sessions / "archive").glob(f"{session}_*.json"))
    assert len(archives) == 1
    assert json.loads(archives[0].read_text(encoding="utf-8"))["messages"] == before[:6]

    agent_view = httpx.get(f"{server.url}/api/sessions/{session}/messages").json()["messages"]
    assert agent_view[1]["role"] == "assistant"
    assert agent_view[1]["content"].startswith("[以下是之前对话的摘要]")

    chat(server, session, "run: echo again")
    second = httpx.post(f"{server.url}/api/sessions/{session}/compress")
    assert second.status_code == 200
    context = json.loads(path.read_text(encoding="utf-8"))["compressed_context"]
    assert context.count("\n---\n") == 1
    archived_total = sum(
        len(json.loads(p.read_text(encoding="utf-8"))["messages"])
        for p in (server.settings.paths.sessions / "archive").glob(f"{session}_*.json")
    )
    remaining = len(json.loads(path.read_text(encoding="utf-8"))["messages"])
    assert archived_total + remaining == 14

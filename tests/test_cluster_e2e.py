"""Cluster mode end to end: a control plane and two execution planes (users alice and bob), each a
separate OS process on loopback, driven only through the HTTP API as users drive it.

The processes are started by :class:`clawlet.cluster.local_cluster.LocalCluster`, the same code as
``clawlet cluster``; the last test runs that command itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.runtime.openclaw_bridge import default_bridge_dir
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import free_port, parse_sse
from tests.support.openclaw_gateway import real_openclaw

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    # settings that name one shared place (a database, a workspace base, an openclaw.json) must not
    # make users share it: the control plane keeps each user's data under that user's home
    monkeypatch.setenv("WORKSPACE_BASE", str(tmp_path / "shared" / "workspaces"))
    monkeypatch.setenv("CLAWLET_DATABASE_URL", f"sqlite:///{tmp_path / 'shared' / 'inbox.db'}")
    monkeypatch.setenv("OPENCLAW_CONFIG_PATH", str(tmp_path / "shared" / "openclaw.json"))
    started = LocalCluster(tmp_path / "cluster", ["alice", "bob"], free_port())
    try:
        started.start()
        yield started
    finally:
        started.stop()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def chat(
    cluster: LocalCluster, user: str, message: str, session_id: str
) -> list[tuple[str, dict[str, object]]]:
    response = httpx.post(
        f"{cluster.base_url}/api/chat",
        json={"message": message, "session_id": session_id},
        headers=auth(cluster.tokens[user]),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def raw_events(cluster: LocalCluster, user: str, session_id: str, until: str) -> list[dict[str, object]]:
    """The execution plane's events of a session, from the first, up to one of type ``until``."""
    seen: list[dict[str, object]] = []
    url = f"{cluster.base_url}/api/cluster/sessions/{session_id}/events?after=0"
    with httpx.stream("GET", url, headers=auth(cluster.tokens[user]), timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1]["type"] == until:
                    return seen
    raise AssertionError(f"the stream ended before {until}: {seen}")


def test_two_users_chat_and_stay_apart(cluster: LocalCluster) -> None:
    alice = chat(cluster, "alice", "run: echo 来自-alice", "s1")
    names = [name for name, _ in alice]
    assert names[0] == "token" and names[-2:] == ["done", "title"]
    assert "tool_start" in names and "tool_end" in names
    tool_end = next(data for name, data in alice if name == "tool_end")
    assert "来自-alice" in str(tool_end["output"])
    bob = chat(cluster, "bob", "hello from bob 你好", "s1")  # the same session id as alice's
    done = next(data for name, data in bob if name == "done")
    assert "你好" in str(done["content"]) and "来自-alice" not in str(done["content"])

    # each user sees their own session (with the reply recorded, as locally: alice's tool call and
    # the answer after it are two assistant segments), never the other's
    for user, text, replies in (("alice", "run: echo 来自-alice", 2), ("bob", "hello from bob 你好", 1)):
        history = httpx.get(f"{cluster.base_url}/api/sessions/s1/history", headers=auth(cluster.tokens[user]))
        messages = history.json()["messages"]
        assert [m["role"] for m in messages] == ["user"] + ["assistant"] * replies
        assert messages[0]["content"] == text
    # the conversation lives on each user's own machine and nowhere else: one transcript each,
    # and the control plane keeps no home of any user
    for user, text in (("alice", "来自-alice"), ("bob", "你好")):
        transcript = cluster.data_dir / "exec-planes" / user / "home" / "sessions" / "s1.json"
        assert text in transcript.read_text(encoding="utf-8")
    assert "来自-alice" not in (cluster.data_dir / "exec-planes/bob/home/sessions/s1.json").read_text("utf-8")
    assert not (cluster.data_dir / "control-plane" / "users").exists()

    # the OpenAI-compatible surface, per user
    completion = httpx.post(
        f"{cluster.base_url}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "hi 世界"}]},
        headers=auth(cluster.tokens["bob"]),
        timeout=60,
    )
    assert completion.status_code == 200
    assert "世界" in completion.json()["choices"][0]["message"]["content"]
    # the Responses API: its named SSE events through the tunnel, stored on the user's machine
    streamed = httpx.post(
        f"{cluster.base_url}/v1/responses",
        json={"model": "clawlet", "input": "hi 世界", "stream": True},
        headers=auth(cluster.tokens["bob"]),
        timeout=60,
    )
    frames = parse_sse(streamed.text)
    assert frames[0][0] == "response.created" and frames[-1][0] == "response.completed"
    response_id = str(frames[0][1]["response"]["id"])  # type: ignore[index]
    stored = httpx.get(f"{cluster.base_url}/v1/responses/{response_id}", headers=auth(cluster.tokens["bob"]))
    assert stored.status_code == 200 and stored.json()["status"] == "completed"
    assert (cluster.data_dir / f"exec-planes/bob/home/responses/{response_id}.json").is_file()
    other = httpx.get(f"{cluster.base_url}/v1/responses/{response_id}", headers=auth(cluster.tokens["alice"]))
    assert other.status_code == 404 and other.json()["error"]["param"] == "response_id"

    # the execution plane's own events, as the seed's vocabulary, to their owner only
    events = raw_events(cluster, "alice", "s1", until="execution_complete")
    kinds = [event["type"] for event in events]
    assert kinds[0] == "text_chunk" and "tool_call_start" in kinds and "tool_call_complete" in kinds
    seqs = [event["seq"] for event in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    me = httpx.get(f"{cluster.base_url}/api/cluster/me", headers=auth(cluster.tokens["alice"])).json()
    assert me == {"user_id": "alice", "exec_plane_connected": True}


NODE = shutil.which("node")
OPENCLAW_E2E_SKIP = (
    "node is not on PATH (the OpenClaw bridge needs Node.js >= 20)"
    if NODE is None
    else None
    if (default_bridge_dir() / "node_modules" / "ws" / "package.json").is_file()
    else f"the OpenClaw bridge's dependencies are not installed: run `npm ci` in {default_bridge_dir()}"
)
FAKE_OPENCLAW = """import fs from 'node:fs';
const config = JSON.parse(fs.readFileSync(process.env.OPENCLAW_CONFIG_PATH, 'utf8'));
const provider = Object.values(config.models.providers)[0];
console.log(`fake openclaw: model ${config.agents.defaults.model.primary} at ${provider.baseUrl}`);
process.exit(3);
"""


def openclaw_machine(root: Path, node_version: str) -> dict[str, str]:
    """An execution plane's environment for the ``openclaw`` runtime without the real OpenClaw: a
    ``node`` that says it is ``node_version`` and otherwise is this machine's Node (the real bridge
    runs on it), and an ``openclaw`` whose ``gateway`` prints the model of the ``openclaw.json`` the
    bridge wrote for it, then exits 3."""
    root.mkdir(parents=True)
    node = root / "node"
    node.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo {node_version}; exit 0; fi\nexec {NODE} "$@"\n',
        encoding="utf-8",
    )
    node.chmod(0o755)
    package = root / "openclaw"
    package.mkdir()
    (package / "package.json").write_text(json.dumps({"name": "openclaw", "version": "2026.9.6"}))
    (package / "openclaw.mjs").write_text(FAKE_OPENCLAW, encoding="utf-8")
    return {"CLAWLET_OPENCLAW_NODE": str(node), "CLAWLET_OPENCLAW_BIN": str(package)}


def chat_error(cluster: LocalCluster, user: str, message: str, session_id: str) -> str:
    events = chat(cluster, user, message, session_id)
    errors = [str(data["error"]) for name, data in events if name == "error"]
    assert errors, events
    return errors[0]


@pytest.mark.skipif(OPENCLAW_E2E_SKIP is not None, reason=OPENCLAW_E2E_SKIP or "")
def test_an_openclaw_user_chats_over_the_api_with_the_stored_or_the_machines_model(tmp_path: Path) -> None:
    """Issue 15 §4: ``POST /api/chat`` for a user whose runtime is ``openclaw`` reaches OpenClaw with
    a model and no extra step: the execution plane's own (``CLAWLET_LLM_*``) when the control plane
    stores none, else the one ``add-user``/``set-runtime`` stored. The real OpenClaw is not
    installed here: the bridge (real, on this machine's Node) starts a fake ``openclaw gateway``
    that reports the model it was configured with. Without a Node OpenClaw accepts, the user gets
    the bridge's clear error about Node."""
    cluster = LocalCluster(tmp_path / "cluster", ["alice", "carol"], free_port())
    cli = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", str(cluster.cp_dir)]

    def admin(*args: str) -> str:
        done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    admin("add-user", "carol", "--runtime-type", "openclaw", "--model", "openai/gpt-4o-mini")
    own_model = {
        "CLAWLET_PROVIDER": "openai",
        "CLAWLET_LLM_MODEL": "exec-plane-model",
        "CLAWLET_LLM_BASE_URL": "http://127.0.0.1:9/v1",
    }
    try:
        cluster.prepare_users()
        cluster.start_control_plane()
        alice_env = {**own_model, **openclaw_machine(tmp_path / "alice-machine", "v24.21.0")}
        cluster.start_exec_plane("alice", {**cluster.vm_credentials("alice"), **alice_env})
        carol_env = {**own_model, **openclaw_machine(tmp_path / "carol-machine", "v24.15.0")}
        cluster.start_exec_plane("carol", {**cluster.vm_credentials("carol"), **carol_env})
        cluster.wait_connected(2)

        assert "runtime=openclaw" in admin("set-runtime", "alice", "--runtime-type", "openclaw")
        error = chat_error(cluster, "alice", "hello openclaw", "oc1")
        assert "agent_config.model is required" not in error
        assert "fake openclaw: model openai/exec-plane-model at http://127.0.0.1:9/v1" in error, error
        assert "openclaw gateway exited with code 3" in error

        admin(
            "set-runtime", "alice", "--model", "deepseek/deepseek-chat", "--base-url", "http://127.0.0.1:8/v1"
        )
        error = chat_error(cluster, "alice", "hello again", "oc2")
        assert "fake openclaw: model deepseek/deepseek-chat at http://127.0.0.1:8/v1" in error, error

        error = chat_error(cluster, "carol", "hello", "oc3")
        assert "agent_config.model is required" not in error
        assert "OpenClaw is not available on this machine" in error
        assert "is Node v24.15.0; OpenClaw needs >=24.16.0 <25 or >=26.1.0" in error, error
    finally:
        cluster.stop()


REAL_OPENCLAW = real_openclaw()  # at import: the autouse fixture clears CLAWLET_*


@REAL_OPENCLAW.skip
@pytest.mark.skipif(OPENCLAW_E2E_SKIP is not None, reason=OPENCLAW_E2E_SKIP or "")
def test_an_openclaw_user_gets_the_real_openclaws_answer_over_the_api(tmp_path: Path) -> None:
    """Issue 15's acceptance, on the real OpenClaw ``scripts/test`` installs: ``POST /api/chat`` for
    a user added with ``--runtime-type openclaw`` and nothing else streams the real OpenClaw's
    answer; its model is the execution plane's own, clawlet's scripted OpenAI-compatible server."""
    install = REAL_OPENCLAW.require()
    reply = "Hello from the scripted model, through OpenClaw in cluster mode!"
    cluster = LocalCluster(tmp_path / "cluster", ["dana"], free_port())
    cli = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", str(cluster.cp_dir)]
    added = subprocess.run([*cli, "add-user", "dana", "--runtime-type", "openclaw"], timeout=120, check=False)
    assert added.returncode == 0
    with ScriptedOpenAIServer(lambda _request: text_turn(reply, chunks=4)) as llm:
        machine = {
            "CLAWLET_OPENCLAW_NODE": str(install.node),
            "CLAWLET_OPENCLAW_BIN": str(install.entry),
            "CLAWLET_PROVIDER": "openai",
            "CLAWLET_LLM_MODEL": llm.model,
            "CLAWLET_LLM_BASE_URL": llm.base_url,
        }
        try:
            cluster.prepare_users()
            cluster.start_control_plane()
            cluster.start_exec_plane("dana", {**cluster.vm_credentials("dana"), **machine})
            cluster.wait_connected(1)
            response = httpx.post(
                f"{cluster.base_url}/api/chat",
                json={"message": "hello openclaw", "session_id": "real"},
                headers=auth(cluster.tokens["dana"]),
                timeout=600,  # a private OpenClaw gateway takes a while to start
            )
            assert response.status_code == 200, response.text
            events = parse_sse(response.text)
            done = next((data for name, data in events if name == "done"), None)
            assert done is not None and reply in str(done["content"]), events
            assert any(name == "token" for name, _ in events)
            assert any(request.get("model") == llm.model for request in llm.requests)
            # the model was called by OpenClaw (its own tools and its internal-context message), not
            # by clawlet's engine
            openclaw_calls = [
                request
                for request in llm.requests
                if "sessions_yield"
                in {tool.get("function", {}).get("name") for tool in request.get("tools") or []}
                and "BEGIN_OPENCLAW_INTERNAL_CONTEXT" in json.dumps(request.get("messages"))
            ]
            assert openclaw_calls, [sorted(request) for request in llm.requests]
            assert "hello openclaw" in json.dumps(openclaw_calls[0]["messages"], ensure_ascii=False)
        finally:
            cluster.stop()


def test_cross_user_access_is_refused(cluster: LocalCluster) -> None:
    chat(cluster, "alice", "secret plans", "alice-only")
    base, bob = cluster.base_url, auth(cluster.tokens["bob"])
    listed = httpx.get(f"{base}/api/sessions", headers=bob).json()
    assert all(item["id"] != "alice-only" for item in listed)
    assert httpx.get(f"{base}/api/sessions/alice-only/history", headers=bob).status_code == 404
    assert httpx.get(f"{base}/api/cluster/sessions/alice-only/events", headers=bob).status_code == 404
    assert httpx.delete(f"{base}/api/sessions/alice-only", headers=bob).status_code == 404
    # alice's session is still there, untouched
    history = httpx.get(f"{base}/api/sessions/alice-only/history", headers=auth(cluster.tokens["alice"]))
    assert history.status_code == 200 and history.json()["messages"][0]["content"] == "secret plans"
    # inbox agents and tasks, and named workspaces, are per user too
    created = httpx.post(
        f"{base}/api/v1/agents",
        json={"id": "alice-agent", "name": "Alice's"},
        headers=auth(cluster.tokens["alice"]),
    )
    assert created.status_code == 201, created.text
    assert "alice-agent" in [
        a["id"] for a in httpx.get(f"{base}/api/v1/agents", headers=auth(cluster.tokens["alice"])).json()
    ]
    assert "alice-agent" not in [a["id"] for a in httpx.get(f"{base}/api/v1/agents", headers=bob).json()]
    in_workspace = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "workspace=research hi"}]},
        headers=auth(cluster.tokens["alice"]),
        timeout=60,
    )
    assert in_workspace.status_code == 200, in_workspace.text
    alice_home = cluster.data_dir / "exec-planes" / "alice" / "home"  # on alice's machine
    assert (alice_home / "workspaces" / "research").is_dir()
    assert not (cluster.data_dir / "exec-planes" / "bob" / "home" / "workspaces" / "research").exists()
    assert not (cluster.cp_dir.parent.parent / "shared").exists()  # nothing went to the shared places
    # files are per user too
    alice_files = httpx.get(f"{base}/api/files?path=memory/MEMORY.md", headers=auth(cluster.tokens["alice"]))
    assert alice_files.status_code == 200
    # no token, a wrong token, and a VM-style token are all refused in each surface's format
    for headers in ({}, auth("wrong"), auth("clu_" + "x" * 43)):
        workbench = httpx.get(f"{base}/api/sessions", headers=headers)
        assert workbench.status_code == 401 and workbench.json()["error"]["code"] == "unauthorized"
        openai = httpx.post(f"{base}/v1/chat/completions", json={}, headers=headers)
        assert openai.status_code == 401 and openai.json()["error"]["code"] == "invalid_api_key"
    # the UI, health and the sign-in probe are public
    assert httpx.get(f"{base}/").status_code == 200
    assert httpx.get(f"{base}/auth").json() == {"required": True, "authenticated": False}
    assert httpx.get(f"{base}/auth", headers=auth("wrong")).json()["authenticated"] is False
    assert httpx.get(f"{base}/auth", headers=bob).json() == {"required": True, "authenticated": True}
    assert httpx.get(f"{base}/health").json()["connected_exec_planes"] == 2


def test_a_user_without_a_connected_exec_plane_gets_a_clear_error(cluster: LocalCluster) -> None:
    cluster.kill("exec-plane-bob", signal.SIGTERM)
    deadline = time.monotonic() + 120
    while httpx.get(f"{cluster.base_url}/health").json()["connected_exec_planes"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    headers = auth(cluster.tokens["bob"])
    response = httpx.post(
        f"{cluster.base_url}/api/chat", json={"message": "anyone there?", "session_id": "s9"}, headers=headers
    )
    assert response.status_code == 503 and response.json()["error"]["code"] == "exec_plane_offline"
    assert "clawlet exec-plane" in response.json()["error"]["message"]
    # each surface says it in its own format
    openai = httpx.post(
        f"{cluster.base_url}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
    )
    assert openai.status_code == 503 and openai.json()["error"]["code"] == "exec_plane_offline"
    me = httpx.get(f"{cluster.base_url}/api/cluster/me", headers=headers).json()
    assert me == {"user_id": "bob", "exec_plane_connected": False}
    # alice is unaffected
    assert chat(cluster, "alice", "still here", "s9")[-2][0] == "done"


def test_the_clawlet_cluster_command(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "dev-cluster"
    command = [sys.executable, "-m", "clawlet", "cluster", "--users", "carol", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
    )
    output: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if "Ctrl+C stops everything" in line:
                break
        token = json.loads((data_dir / "tokens.json").read_text())["carol"]
        assert any(token in line for line in output)
        response = httpx.post(
            f"http://127.0.0.1:{port}/api/chat",
            json={"message": "hi from the cluster command", "session_id": "c1"},
            headers=auth(token),
            timeout=60,
        )
        assert [name for name, _ in parse_sse(response.text)][-2:] == ["done", "title"]
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    assert process.returncode == 0, "".join(output) + rest
    # every process it started is gone: nothing listens on the port any more
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_cancelling_a_remote_turn(cluster: LocalCluster) -> None:
    base, alice = cluster.base_url, auth(cluster.tokens["alice"])
    seen: list[tuple[str, dict[str, object]]] = []
    body = {"message": "run: sleep 30", "session_id": "slow"}
    with httpx.stream("POST", f"{base}/api/chat", json=body, headers=alice, timeout=60) as response:
        lines = response.iter_lines()
        name = ""
        for line in lines:
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                seen.append((name, json.loads(line[5:])))
                if name == "tool_start":
                    cancelled = httpx.post(f"{base}/api/sessions/slow/cancel", headers=alice, timeout=30)
                    assert cancelled.json()["cancelled"] is True
                if name in ("done", "error"):
                    break
    assert seen[-1][0] == "done" and seen[-1][1].get("cancelled") is True
    # the session works again at once (the cancelled command did not keep it busy)
    again = chat(cluster, "alice", "are you there?", "slow")
    assert [name for name, _ in again][-1] == "done"


def test_long_term_memory_and_remote_mcp_from_a_remote_session(cluster: LocalCluster, tmp_path: Path) -> None:
    """The session process's ``long_term_memory`` and ``remote_mcp`` tools reach the control plane
    (``memory_search`` / ``mcp_call``) through the exec plane, for that user's data only."""
    data = str(cluster.cp_dir)
    add = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", data]
    subprocess.run([*add, "add-memory", "alice", "Alice 最喜欢乌龙茶 (oolong tea)"], check=True, timeout=60)
    subprocess.run([*add, "add-memory", "bob", "Bob 喜欢咖啡"], check=True, timeout=60)
    servers = tmp_path / "mcp.json"
    server_script = str(Path(__file__).parent / "support" / "mcp_server.py")
    servers.write_text(json.dumps({"tools": {"command": sys.executable, "args": [server_script]}}))
    subprocess.run([*add, "set-mcp", "alice", str(servers)], check=True, timeout=60)

    recalled = chat(cluster, "alice", 'call: long_term_memory {"query": "乌龙茶"}', "ltm")
    output = str(next(data for name, data in recalled if name == "tool_end")["output"])
    assert "乌龙茶" in output and "咖啡" not in output
    added = chat(
        cluster,
        "alice",
        'call: remote_mcp {"server": "tools", "tool": "add", "arguments": {"a": 2, "b": 40}}',
        "mcp",
    )
    tool_end = next(data for name, data in added if name == "tool_end")
    assert "42" in str(tool_end["output"]) and not tool_end["is_error"]
    # bob has no MCP servers: his sessions are not offered the tool
    refused = chat(cluster, "bob", 'call: remote_mcp {"server": "tools", "tool": "add"}', "mcp")
    assert "not available" in str(next(data for name, data in refused if name == "done")["content"])


def test_a_published_skill_reaches_sessions_started_over_http(cluster: LocalCluster, tmp_path: Path) -> None:
    skill = tmp_path / "haiku"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: haiku\ndescription: 写俳句 (write a haiku)\n---\n\n5-7-5 音节。\n"
    )
    (skill / "scripts" / "count.py").write_text("print(17)\n")
    cli = [sys.executable, "-m", "clawlet", "control-plane", "--data-dir", str(cluster.cp_dir)]
    published = subprocess.run(
        [*cli, "add-skill", "haiku", "1.0", str(skill)], capture_output=True, text=True
    )
    assert published.returncode == 0 and "2 files" in published.stdout, published.stderr

    loaded = chat(cluster, "alice", 'call: load_skill {"name": "haiku"}', "skills")
    output = str(next(data for name, data in loaded if name == "tool_end")["output"])
    assert "5-7-5 音节" in output
    cached = cluster.data_dir / "exec-planes" / "alice" / "home" / ".skills" / "haiku"
    assert (cached / "scripts" / "count.py").read_text() == "print(17)\n"

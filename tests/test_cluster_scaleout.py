"""Cluster mode scaled out (issue 15's acceptance): two control-plane instances behind a real load
balancer, sharing a real PostgreSQL and a real Redis, and two users' execution planes — every part a
separate OS process on loopback, driven only from outside.

* ``clawlet control-plane serve`` ×2 (A, B): the same database (``CLAWLET_CP_DATABASE_URL``, a fresh
  schema of the suite's PostgreSQL), the same broker (``CLAWLET_REDIS_URL``, a Redis of this test's
  own), the same JWT secret (``CLAWLET_CP_JWT_SECRET``), and the balancer's URL as their public URL;
* HAProxy (Debian's) in front, round robin with health checks on ``/health``;
* ``clawlet exec-plane`` for alice and bob, connected through the balancer, with the scripted model.

Which instance an execution plane lands on is the balancer's choice; the test reads it from Redis
(the presence record names the instance, whose ``/health`` says its ``instance_id``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.controlplane.db import ControlPlaneStore
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests.conftest import free_port
from tests.support.postgres import SKIP_REASON as NO_POSTGRES
from tests.support.postgres import fresh_schema_url
from tests.support.redis import HAVE_REDIS_SERVER, NO_REDIS_SERVER, RedisServer
from tests.test_cluster_faults import gated_code, llm_env, scripted_reply, turn_requests, usage_of, usage_rows

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(NO_POSTGRES), reason=NO_POSTGRES),
    pytest.mark.skipif(not HAVE_REDIS_SERVER, reason=NO_REDIS_SERVER),
    pytest.mark.skipif(HAPROXY is None, reason="haproxy not found (install the haproxy package)"),
]

DEADLINE = 90.0
"""Seconds any one awaited state may take (generous: a loaded 2-core machine)."""
HAPROXY_CONFIG = """\
global
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 5m
    timeout server 5m
    timeout tunnel 1h
    option redispatch
    retries 3
frontend clawlet
    bind 127.0.0.1:{lb}
    default_backend control_planes
backend control_planes
    balance roundrobin
    option httpchk
    http-check send meth GET uri /health ver HTTP/1.1 hdr Host 127.0.0.1:{lb}
    http-check expect status 200
    server a 127.0.0.1:{a} check inter 300ms fall 2 rise 1
    server b 127.0.0.1:{b} check inter 300ms fall 2 rise 1
"""


def wait_for(condition: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def get_json(url: str, token: str | None = None) -> Any:
    try:
        response = httpx.get(url, headers=auth(token) if token else {}, timeout=10)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Scaled:
    """The processes of the scaled-out cluster and how to reach them."""

    root: Path
    env: dict[str, str]
    lb_url: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    redis_url: str = ""
    database_url: str = ""

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        with (self.root / "logs" / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, **(env or {})},
            )

    def clawlet(self, *args: str, instance: str = "a") -> str:
        """Run ``clawlet control-plane <args>`` (with that instance's data directory) to completion."""
        command = [
            sys.executable,
            "-m",
            "clawlet",
            "control-plane",
            "--data-dir",
            str(self.root / instance),
            *args,
        ]
        run = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
        return run.stdout

    def start_instance(self, name: str) -> None:
        port = self.ports[name]
        data = self.root / name
        self.spawn(
            name,
            [
                sys.executable,
                "-m",
                "clawlet",
                "control-plane",
                "--data-dir",
                str(data),
                "serve",
                "--port",
                str(port),
                "--public-url",
                self.lb_url,
            ],
        )
        wait_for(lambda: get_json(f"http://127.0.0.1:{port}/health"), f"instance {name} to answer")

    def instance_id(self, name: str) -> str:
        health = get_json(f"http://127.0.0.1:{self.ports[name]}/health")
        assert health is not None and health.get("instance_id"), health
        return str(health["instance_id"])

    def holder(self, user: str) -> str | None:
        """The instance (``a``/``b``) whose presence record holds ``user``'s execution plane."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            held = client.get(f"clawlet:presence:{user}")
        finally:
            client.close()
        if held is None:
            return None
        ids = {name: self.instance_id(name) for name in ("a", "b") if name in self.processes}
        return next((name for name, value in ids.items() if value == held.decode()), None)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
def scaled(tmp_path: Path, llm: ScriptedOpenAIServer) -> Iterator[Scaled]:
    redis_server = RedisServer(tmp_path / "redis")
    with fresh_schema_url("clawlet_scaleout") as database_url:
        redis_url = redis_server.start()
        lb = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CLAWLET_")},
            "CLAWLET_HOME": str(tmp_path / "home"),
            "CLAWLET_CP_DATABASE_URL": database_url,
            "CLAWLET_REDIS_URL": redis_url,
            "CLAWLET_CP_JWT_SECRET": secrets.token_hex(32),
        }
        cluster = Scaled(
            tmp_path, env, f"http://127.0.0.1:{lb}", redis_url=redis_url, database_url=database_url
        )
        cluster.ports = {"a": free_port(), "b": free_port(), "lb": lb}
        try:
            for user in ("alice", "bob"):
                cluster.tokens[user] = cluster.clawlet("add-user", user).strip().splitlines()[-1]
            cluster.start_instance("a")
            cluster.start_instance("b")
            config = tmp_path / "haproxy.cfg"
            config.write_text(HAPROXY_CONFIG.format(lb=lb, a=cluster.ports["a"], b=cluster.ports["b"]))
            cluster.spawn("haproxy", [str(HAPROXY), "-db", "-f", str(config)])
            wait_for(lambda: get_json(f"{cluster.lb_url}/health"), "the balancer to answer")
            for user in ("alice", "bob"):
                exported = cluster.clawlet("vm-credentials", user)
                credentials = dict(line.split("=", 1) for line in exported.splitlines() if "=" in line)
                state = tmp_path / "machines" / user
                cluster.spawn(
                    f"exec-plane-{user}",
                    [sys.executable, "-m", "clawlet", "exec-plane", "--state-dir", str(state)],
                    {**credentials, **llm_env(llm)},
                )
            wait_for(
                lambda: cluster.holder("alice") and cluster.holder("bob"), "both execution planes to connect"
            )
            yield cluster
        finally:
            cluster.stop()
            redis_server.stop()


class ChatStream(threading.Thread):
    """``POST /api/chat`` read as it streams, in a thread: ``events`` grows as events arrive."""

    def __init__(self, url: str, token: str, message: str, session_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.message, self.session_id = url, token, message, session_id
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.status: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {"message": self.message, "session_id": self.session_id}
        try:
            with httpx.stream(
                "POST", self.url, json=body, headers=auth(self.token), timeout=DEADLINE
            ) as response:
                self.status = response.status_code
                name = "message"
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        self.events.append((name, json.loads(line[5:])))
                        name = "message"
        except BaseException as exc:  # reported by the test
            self.error = exc

    def names(self) -> list[str]:
        return [name for name, _ in self.events]


def test_a_chat_through_the_other_instance_survives_a_kill_9_of_the_one_holding_the_exec_plane(
    scaled: Scaled, llm: ScriptedOpenAIServer
) -> None:
    a = scaled.holder("alice")
    assert a in ("a", "b")
    b = "b" if a == "a" else "a"
    gate = "gate-scaleout"
    stream = ChatStream(
        f"http://127.0.0.1:{scaled.ports[b]}/api/chat",
        scaled.tokens["alice"],
        "python: " + gated_code(gate, "工具-output-42"),
        "s1",
    )
    stream.start()
    # every event reaches instance B while the socket is on A: the turn is mid-tool now
    wait_for(
        lambda: "tool_start" in stream.names(), "the tool to start (streamed through the other instance)"
    )
    assert stream.status == 200
    scaled.kill(a)
    wait_for(lambda: scaled.holder("alice") == b, "alice's execution plane to reconnect through the balancer")
    (scaled.root / "machines" / "alice" / "home" / "workspace" / gate).touch()
    stream.join(DEADLINE)
    assert not stream.is_alive() and stream.error is None, stream.error
    names = stream.names()
    assert names.count("tool_end") == 1 and names.count("done") == 1, names
    tool_end = next(data for name, data in stream.events if name == "tool_end")
    assert "工具-output-42" in str(tool_end["output"])
    done = next(data for name, data in stream.events if name == "done")
    assert "工具-output-42" in str(done["content"])

    # the history (read through the balancer) holds the question and the answer exactly once
    history = get_json(f"{scaled.lb_url}/api/sessions/s1/history", scaled.tokens["alice"])
    assert history is not None
    roles = [message["role"] for message in history["messages"]]
    assert roles.count("user") == 1, roles
    answers = [
        m for m in history["messages"] if m["role"] == "assistant" and "工具-output-42" in m["content"]
    ]
    assert len(answers) == 1, history["messages"]

    # the turn's usage (its two model calls) arrived once, whatever was replayed
    store = ControlPlaneStore.open(scaled.database_url)
    try:

        def usage() -> tuple[int, int]:
            rows = usage_rows(store, "alice", "s1")
            return sum(row["tokens_in"] for row in rows), sum(row["tokens_out"] for row in rows)

        expected = usage_of(llm)
        assert len(turn_requests(llm)) == 2 and expected[0] > 0
        wait_for(lambda: usage() == expected, f"the turn's usage {expected} to arrive (have {usage()})")
    finally:
        store.close()

    # long-term memory added with the dead instance's data directory is found by the survivor
    # (it lives in the database: the survivor's memory_search sees it)
    scaled.clawlet("add-memory", "alice", "Alice 最喜欢乌龙茶 (oolong tea)", instance=a)
    recall = ChatStream(f"{scaled.lb_url}/api/chat", scaled.tokens["alice"], "recall: 乌龙茶", "s2")
    recall.run()
    assert recall.status == 200 and recall.error is None, recall.error
    recalled = next(data for name, data in recall.events if name == "tool_end")
    assert "乌龙茶" in str(recalled["output"]), recall.events

    # bob, whose execution plane was on either instance, chats through the balancer as before
    bob = ChatStream(f"{scaled.lb_url}/api/chat", scaled.tokens["bob"], "你好 from bob", "s1")
    bob.run()
    assert bob.status == 200 and "done" in bob.names(), bob.events
    assert "你好" in str(next(data for name, data in bob.events if name == "done")["content"])

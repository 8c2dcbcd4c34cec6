"""``clawlet serve`` is ready before it imports what only a chat turn needs (issue 17, start and size).

LangChain, LangGraph, the model SDKs, numpy, jsonschema and httpx cost about a second and 40 MB
to import; the server imports them when the first request that needs them arrives (see
:mod:`clawlet.services`), not before ``/health/ready`` answers. The serve command runs in a real
subprocess (its own ``sys.modules``), answers real HTTP on loopback, and reports which of those
packages it has loaded when it is ready and after one chat turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

LOADED_LATER = (
    "langchain",
    "langchain_core",
    "langgraph",
    "langchain_openai",
    "langchain_anthropic",
    "openai",
    "anthropic",
    "numpy",
    "jsonschema",
    "httpx",
)

SERVE_AND_REPORT = """
import json, os, sys, threading, time, urllib.request

from clawlet.cli import main

port, watched = sys.argv[1], set(sys.argv[2].split(","))
url = f"http://127.0.0.1:{port}"
threading.Thread(target=main, args=(["serve", "--port", port],), daemon=True).start()


def loaded():
    return sorted({name.split(".")[0] for name in sys.modules} & watched)


deadline = time.monotonic() + 120
while True:
    try:
        with urllib.request.urlopen(url + "/health/ready", timeout=10) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        raise SystemExit("not ready")
    time.sleep(0.05)
at_ready = loaded()
turn = urllib.request.Request(
    url + "/api/chat",
    data=json.dumps({"message": "hello", "session_id": "startup"}).encode(),
    headers={"Content-Type": "application/json"},
)
with urllib.request.urlopen(turn, timeout=120) as response:
    stream = response.read().decode()
print(json.dumps({"at_ready": at_ready, "after_turn": loaded(), "done": "event: done" in stream}), flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_serve_is_ready_before_it_imports_the_agent_stack(clawlet_home: Path) -> None:
    env = {**os.environ, "CLAWLET_HOME": str(clawlet_home), "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [sys.executable, "-c", SERVE_AND_REPORT, str(free_port()), ",".join(LOADED_LATER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["at_ready"] == []
    # the first turn imports what it needs and is answered
    assert report["done"]
    assert {"langchain", "langchain_core", "langgraph"} <= set(report["after_turn"])

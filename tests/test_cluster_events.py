"""One lossless event path: a cluster turn carries what the same turn carries locally.

A cluster turn runs on the execution plane's own local-mode app (the HTTP tunnel), so the API
streams what a local run produces; the execution plane also forwards clawlet's typed events
(:func:`clawlet.events.event_to_json`) over ``/ws/vm`` for the control plane's event log, and the
seed-001 names are made only at the
``/api/cluster/sessions/{id}/events`` edge (:mod:`clawlet.controlplane.seed_events`).

A real cluster (a control plane and an execution plane as separate processes on loopback) and a
real local-mode server both use the same scripted OpenAI-compatible model (see
``tests/test_cluster_faults.py``: ``python: <code>`` calls ``python_repl``); RAG mode is on in both
homes, which hold the same ``MEMORY.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.cluster.local_cluster import LocalCluster
from clawlet.config import RuntimeConfig, Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer
from tests import test_cluster_faults as faults
from tests.conftest import LiveServer, parse_sse
from tests.test_cluster_faults import DEADLINE, Events, auth, chat, llm_env, names

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

llm = faults.llm
make_cluster = faults.make_cluster

MEMORY_NOTE = "Tool greetings: the python tool prints a greeting when asked.\n"
TURN = "python: print('hi from the tool')"
SEED_EVENT_TYPES = frozenset(
    {
        "text_chunk",
        "thinking",
        "tool_call_start",
        "tool_call_complete",
        "execution_complete",
        "execution_error",
        "approval_required",
        "question",
    }
)
"""The execution plane's SSE vocabulary (seed 001 §7.4, and clawlet's approval events)."""


def collapsed(events: Events) -> list[str]:
    """The event names with runs of the same name (text tokens) counted once."""
    kinds: list[str] = []
    for name in names(events):
        if not kinds or kinds[-1] != name:
            kinds.append(name)
    return kinds


def prepare_home(home: Path) -> None:
    """RAG mode on and the same long-term memory in ``home``."""
    (home / "memory").mkdir(parents=True, exist_ok=True)
    (home / "memory" / "MEMORY.md").write_text(MEMORY_NOTE, encoding="utf-8")
    RuntimeConfig(home / "config.json").set_rag_mode(True)


def local_chat(server: LiveServer, message: str, session_id: str) -> Events:
    response = httpx.post(
        f"{server.url}/api/chat", json={"message": message, "session_id": session_id}, timeout=DEADLINE
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def seed_events(cluster: LocalCluster, user: str, session_id: str) -> list[dict[str, Any]]:
    """``/api/cluster/sessions/{id}/events`` from the first event up to the first
    ``execution_complete``."""
    seen: list[dict[str, Any]] = []
    url = f"{cluster.base_url}/api/cluster/sessions/{session_id}/events?after=0"
    timeout = httpx.Timeout(DEADLINE, read=DEADLINE)
    with httpx.stream("GET", url, headers=auth(cluster.tokens[user]), timeout=timeout) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1]["type"] == "execution_complete":
                    return seen
    raise AssertionError(f"the stream ended before execution_complete: {seen}")


def test_a_cluster_turn_streams_what_a_local_turn_streams(
    make_cluster: Callable[..., LocalCluster],
    llm: ScriptedOpenAIServer,
    settings: Settings,
    live_server: Callable[..., LiveServer],
) -> None:
    cluster = make_cluster(["alice"], exec_env=llm_env(llm))
    prepare_home(cluster.data_dir / "exec-planes" / "alice" / "home")
    remote = chat(cluster, "alice", TURN, "s1")

    prepare_home(settings.paths.root)
    local_settings = settings.model_copy(
        update={
            "provider": "openai",
            "llm_base_url": llm.base_url,
            "llm_model": llm.model,
            "llm_api_key": "test-key",
        }
    )
    local = local_chat(live_server(local_settings), TURN, "s1")

    # the same kinds in the same order: the retrieval, the tool, the new segment after it, the
    # answer's tokens, the end and the title
    assert collapsed(local) == [
        "retrieval",
        "tool_start",
        "tool_end",
        "new_response",
        "token",
        "done",
        "title",
    ], local
    assert collapsed(remote) == collapsed(local), remote
    by_name = {name: data for name, data in local}
    remote_by_name = {name: data for name, data in remote}
    for name in ("retrieval", "tool_start", "tool_end"):
        # the same but for the model's call id (each scripted answer makes a new one)
        same = {key: value for key, value in remote_by_name[name].items() if key != "call_id"}
        assert same == {key: value for key, value in by_name[name].items() if key != "call_id"}, name
    assert remote_by_name["tool_start"]["call_id"] == remote_by_name["tool_end"]["call_id"] != ""
    assert by_name["retrieval"]["results"], "the memory note was not retrieved"
    assert remote_by_name["done"]["content"] == by_name["done"]["content"]
    assert "hi from the tool" in str(by_name["done"]["content"])

    # the seed-001 edge still speaks the seed's names, with call ids, and nothing of clawlet's own
    raw = seed_events(cluster, "alice", "s1")
    kinds = [event["type"] for event in raw]
    assert set(kinds) <= SEED_EVENT_TYPES, kinds
    assert kinds[0] == "tool_call_start" and kinds[1] == "tool_call_complete", kinds
    assert kinds[-1] == "execution_complete" and "text_chunk" in kinds, kinds
    assert raw[0]["call_id"] and raw[0]["call_id"] == raw[1]["call_id"]
    assert all("kind" not in event for event in raw), raw
    assert raw[-1]["content"] == remote_by_name["done"]["content"]
    seqs = [event["seq"] for event in raw]
    assert seqs == sorted(set(seqs)), seqs


def test_v1_usage_in_cluster_mode_is_the_models_usage(
    make_cluster: Callable[..., LocalCluster], llm: ScriptedOpenAIServer
) -> None:
    cluster = make_cluster(["alice"], exec_env=llm_env(llm))
    before = len(llm.usages)
    completion = httpx.post(
        f"{cluster.base_url}/v1/chat/completions",
        json={"model": "clawlet", "messages": [{"role": "user", "content": "python: print(6 * 7)"}]},
        headers=auth(cluster.tokens["alice"]),
        timeout=DEADLINE,
    )
    assert completion.status_code == 200, completion.text
    body = completion.json()
    assert "42" in body["choices"][0]["message"]["content"]
    reported = llm.usages[before:]
    assert len(reported) == 2, reported  # the tool call, then the answer
    assert body["usage"] == {
        "prompt_tokens": sum(item["prompt_tokens"] for item in reported),
        "completion_tokens": sum(item["completion_tokens"] for item in reported),
        "total_tokens": sum(item["total_tokens"] for item in reported),
    }

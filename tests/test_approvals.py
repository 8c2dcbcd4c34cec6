"""Tool approvals and agent questions (issue 9): the allow/ask/deny policy, pausing before a tool
runs, approve / edit / reject / answer, exactly-once side effects across pause and resume, a
restart while waiting, and what the OpenAI-compatible and native endpoints (which cannot ask) do.

Everything runs against a real server (the app on uvicorn) and real files; the model is the demo
model (``run: <command>``, ``ask: <question>``) or the scripted OpenAI-compatible server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawlet.config import RuntimeConfig, Settings
from clawlet.engine.context import RunContext
from clawlet.engine.tool_approvals import apply_policies, effective_policies
from clawlet.runtime.engine_adapter import EngineAdapter
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from tests.conftest import LiveServer, assert_error, lines_of, parse_sse
from tests.support.transcripts import calls_shown

Events = list[tuple[str, dict[str, Any]]]


# -- helpers -----------------------------------------------------------------------------------


def set_policies(
    server: LiveServer, policies: dict[str, str], workspace: str | None = None
) -> dict[str, Any]:
    params = {"workspace": workspace} if workspace else {}
    response = httpx.put(
        f"{server.url}/api/config/tool-approvals", params=params, json={"policies": policies}, timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def chat(server: LiveServer, session_id: str, message: str) -> Events:
    response = httpx.post(
        f"{server.url}/api/chat", json={"message": message, "session_id": session_id}, timeout=60
    )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def decide(server: LiveServer, session_id: str, approval_id: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/sessions/{session_id}/approvals/{approval_id}", json=body, timeout=60
    )


def decide_ok(server: LiveServer, session_id: str, approval_id: str, **body: Any) -> Events:
    response = decide(server, session_id, approval_id, **body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


def names(events: Events) -> list[str]:
    return [name for name, _ in events]


def one(events: Events, name: str) -> dict[str, Any]:
    found = [data for event, data in events if event == name]
    assert len(found) == 1, f"expected one {name!r} in {names(events)}"
    return found[0]


def pending(server: LiveServer, session_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/api/sessions/{session_id}/approvals", timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def transcript(settings: Settings, session_id: str) -> list[dict[str, Any]]:
    data = json.loads((settings.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8"))
    messages: list[dict[str, Any]] = data["messages"]
    return messages


APPEND = "run: echo once >> workspace/side.txt && wc -l < workspace/side.txt"


# -- the policy ------------------------------------------------------------------------------


def test_default_policy_depends_on_where_the_server_listens(settings: Settings) -> None:
    config = RuntimeConfig(settings.paths.config_file)
    tools = ["terminal", "python_repl", "read_file", "ask_user", "calc_add"]
    assert effective_policies(settings, config, tools) == {
        "terminal": "allow",
        "python_repl": "allow",
        "read_file": "allow",
        "ask_user": "ask",
        "calc_add": "allow",
    }
    lan = settings.model_copy(update={"host": "0.0.0.0"})
    assert lan.listens_beyond_loopback and not settings.listens_beyond_loopback
    assert settings.model_copy(update={"host": "::1"}).listens_beyond_loopback is False
    assert effective_policies(lan, config, tools) == {
        "terminal": "ask",
        "python_repl": "ask",
        "read_file": "allow",
        "ask_user": "ask",
        "calc_add": "allow",
    }


def test_configured_policies_layer_over_the_main_home(settings: Settings, tmp_path: Path) -> None:
    main = RuntimeConfig(settings.paths.config_file)
    main.set_rag_mode(True)
    main.set_tool_approvals({"terminal": "deny", "fetch_url": "ask"})
    workspace = RuntimeConfig(tmp_path / "ws" / "config.json", parent=main)
    workspace.set_tool_approvals({"terminal": "ask"})
    assert main.get_rag_mode() is True  # other switches are kept
    assert workspace.configured_tool_approvals() == {"terminal": "ask", "fetch_url": "ask"}
    policies = effective_policies(settings, workspace, ["terminal", "fetch_url", "read_file", "ask_user"])
    assert policies == {"terminal": "ask", "fetch_url": "ask", "read_file": "allow", "ask_user": "ask"}

    asking = apply_policies(RunContext(approval_mode="ask"), {**policies, "read_file": "deny"})
    assert asking.ask_tools == {"terminal", "fetch_url", "ask_user"}
    assert not asking.tool_allowed("read_file") and asking.tool_allowed("terminal")
    denying = apply_policies(RunContext(), policies)
    assert denying.ask_tools == frozenset() and not denying.tool_allowed("terminal")
    assert not denying.tool_allowed("ask_user") and denying.tool_allowed("read_file")
    skipping = apply_policies(RunContext(approval_mode="allow"), policies)
    assert skipping.tool_allowed("terminal") and not skipping.tool_allowed("ask_user")
    assert skipping.skipped_approval == {"terminal", "fetch_url"}


def test_the_policy_is_edited_through_the_config_api(server: LiveServer) -> None:
    initial = httpx.get(f"{server.url}/api/config/tool-approvals", timeout=30).json()
    assert initial["policies"]["terminal"] == "allow" and initial["policies"]["ask_user"] == "ask"
    assert initial["configured"] == {} and initial["listens_beyond_loopback"] is False
    body = set_policies(server, {"terminal": "ask", "read_file": "deny"})
    assert body["configured"] == {"read_file": "deny", "terminal": "ask"}
    assert body["policies"]["terminal"] == "ask" and body["policies"]["python_repl"] == "allow"
    saved = json.loads(server.settings.paths.config_file.read_text(encoding="utf-8"))
    assert saved["tool_approvals"] == {"read_file": "deny", "terminal": "ask"}

    named = httpx.get(f"{server.url}/api/config/tool-approvals?workspace=team", timeout=30).json()
    assert named["workspace"] == "team" and named["inherited"] == {"read_file": "deny", "terminal": "ask"}
    named = set_policies(server, {"terminal": "allow"}, workspace="team")
    assert named["policies"]["terminal"] == "allow" and named["policies"]["read_file"] == "deny"

    url = f"{server.url}/api/config/tool-approvals"
    assert_error(httpx.put(url, json={"policies": {"terminal": "maybe"}}), 422, "invalid_request")
    assert_error(httpx.put(url, json={"policies": {"nope": "ask"}}), 422, "unknown_tool")
    assert_error(httpx.put(url, json={"policies": {"ask_user": "allow"}}), 422, "invalid_policy")
    assert_error(httpx.put(url, json={"terminal": "ask"}), 422, "invalid_request")
    assert_error(httpx.get(url, params={"workspace": "../x"}), 422, "invalid_workspace")
    assert set_policies(server, {})["configured"] == {}
    assert "tool_approvals" not in json.loads(server.settings.paths.config_file.read_text(encoding="utf-8"))


# -- the workbench: allow / ask / deny -------------------------------------------------------


def test_allow_runs_at_once_and_deny_is_not_offered(server: LiveServer) -> None:
    set_policies(server, {"terminal": "allow"})
    events = chat(server, "allow1", "run: echo allowed")
    assert "approval_required" not in names(events) and names(events)[-2:] == ["done", "title"]
    assert one(events, "tool_end")["output"] == "allowed"

    set_policies(server, {"terminal": "deny"})
    events = chat(server, "deny1", "run: echo denied")
    assert "tool_start" not in names(events)
    assert "not available" in one(events, "done")["content"]  # the demo model was not offered it


def test_approve_runs_the_tool_exactly_once(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    side = server.settings.paths.workspace / "side.txt"
    events = chat(server, "a1", APPEND)
    assert names(events)[-3:] == ["tool_start", "approval_required", "waiting"]
    request = one(events, "approval_required")
    assert request["tool"] == "terminal" and request["args"] == {"command": APPEND[5:]}
    assert request["allowed_decisions"] == ["approve", "edit", "reject"]
    assert request["call_id"].startswith("call_demo_")
    waiting = one(events, "waiting")
    assert waiting["session_id"] == "a1" and waiting["content"] == f"Running `{APPEND[5:]}` in the terminal."
    assert [item["approval_id"] for item in waiting["pending"]] == [request["approval_id"]]
    assert "title" not in names(events)
    assert not side.exists(), "the tool ran before it was approved"

    listed = pending(server, "a1")
    assert listed["waiting"] is True and listed["running"] is False
    assert listed["pending"] == [{"kind": "tool", **{k: v for k, v in request.items() if k != "type"}}]
    history = httpx.get(f"{server.url}/api/sessions/a1/history", timeout=30).json()
    assert history["waiting"] is True and history["running"] is False
    assert calls_shown(history["messages"][-1]["tool_calls"]) == [
        {"tool": "terminal", "input": APPEND[5:], "output": ""}
    ]
    # the stored call is the one the approval is for
    assert history["messages"][-1]["tool_calls"][0]["call_id"] == request["call_id"]

    continued = decide_ok(server, "a1", request["approval_id"], decision="approve")
    assert names(continued)[:2] == ["tool_end", "new_response"]
    assert names(continued)[-2:] == ["done", "title"]
    assert one(continued, "tool_end")["output"] == "1"
    assert lines_of(side) == ["once"]
    assert one(continued, "done")["content"].startswith("[demo] `terminal` returned:")

    # no segment twice: the paused segment was completed in place
    stored = transcript(server.settings, "a1")
    assert calls_shown(stored[1].pop("tool_calls")) == [
        {"tool": "terminal", "input": APPEND[5:], "output": "1"}
    ]
    assert stored == [
        {"role": "user", "content": APPEND},
        {
            "role": "assistant",
            "content": f"Running `{APPEND[5:]}` in the terminal.",
        },
        {"role": "assistant", "content": "[demo] `terminal` returned:\n\n```\n1\n```"},
    ]
    assert pending(server, "a1") == {"session_id": "a1", "waiting": False, "running": False, "pending": []}
    checkpoints = server.settings.paths.sessions / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir()), "the finished run's state was kept"

    again = decide(server, "a1", request["approval_id"], decision="approve")
    assert assert_error(again, 409, "approval_decided")["details"]["decision"] == "approve"
    assert lines_of(side) == ["once"]
    # the session works on as usual
    assert names(chat(server, "a1", "hello"))[-1] == "done"


def test_the_engine_adapter_is_kept_only_while_the_session_waits(server: LiveServer) -> None:
    """An ``EngineAdapter`` keeps nothing between turns: the manager drops it when a turn ends,
    except while the session waits for a decision (the continuation makes another otherwise)."""
    adapters = server.app.state.services.sessions.adapters
    set_policies(server, {"terminal": "ask"})
    assert names(chat(server, "d1", "hello"))[-1] in ("done", "title")
    assert "d1" not in adapters
    request = one(chat(server, "d2", APPEND), "approval_required")
    assert isinstance(adapters["d2"], EngineAdapter)
    assert names(decide_ok(server, "d2", request["approval_id"], decision="approve"))[-2:] == [
        "done",
        "title",
    ]
    assert "d2" not in adapters
    assert names(chat(server, "d2", "hello again"))[-1] == "done"  # a new one serves the next turn
    assert "d2" not in adapters


def test_edit_runs_the_tool_with_the_edited_arguments(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    events = chat(server, "e1", "run: echo original > workspace/edited.txt")
    approval = one(events, "approval_required")["approval_id"]
    bad = decide(server, "e1", approval, decision="edit", args={"cmd": "x"})
    assert "command" in assert_error(bad, 422, "invalid_decision")["message"]
    continued = decide_ok(
        server, "e1", approval, decision="edit", args={"command": "echo changed > workspace/edited.txt"}
    )
    assert (server.settings.paths.workspace / "edited.txt").read_text(encoding="utf-8") == "changed\n"
    output = one(continued, "tool_end")["output"]
    assert "replaced this tool call" in output and "echo changed > workspace/edited.txt" in output
    assert one(continued, "done")["content"].startswith("[demo] `terminal` returned:")
    stored = transcript(server.settings, "e1")
    assert stored[1]["tool_calls"][0]["input"] == "echo changed > workspace/edited.txt"
    assert len(stored) == 3


def test_reject_tells_the_model_why_and_it_answers(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    events = chat(server, "r1", "run: echo nope > workspace/rejected.txt")
    approval = one(events, "approval_required")["approval_id"]
    # the policy changing meanwhile does not change what was asked: the rejection still holds
    set_policies(server, {"terminal": "allow"})
    continued = decide_ok(server, "r1", approval, decision="reject", message="not on my machine")
    end = one(continued, "tool_end")
    assert end["is_error"] is True and "not on my machine" in end["output"]
    done = one(continued, "done")["content"]
    assert "reported an error" in done and "not on my machine" in done
    assert not (server.settings.paths.workspace / "rejected.txt").exists()
    assert transcript(server.settings, "r1")[1]["tool_calls"][0]["output"] == end["output"]


def test_an_approved_tool_that_fails_does_not_crash_the_run(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    events = chat(server, "f1", "run: mkfs /dev/null")
    continued = decide_ok(server, "f1", one(events, "approval_required")["approval_id"], decision="approve")
    end = one(continued, "tool_end")
    assert end["is_error"] is True and "blacklist" in end["output"]
    assert names(continued)[-2:] == ["done", "title"]
    stored = transcript(server.settings, "f1")[1]["tool_calls"][0]
    assert stored["is_error"] is True and stored["output"] == end["output"]


def test_decision_errors(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    events = chat(server, "x1", "run: echo x")
    approval = one(events, "approval_required")["approval_id"]
    assert_error(decide(server, "x1", "unknown-id", decision="approve"), 404, "approval_not_found")
    assert_error(decide(server, "nosuch", approval, decision="approve"), 404, "not_found")
    assert_error(httpx.get(f"{server.url}/api/sessions/nosuch/approvals"), 404, "not_found")
    assert_error(decide(server, "x1", approval, decision="maybe"), 422, "invalid_request")
    assert_error(decide(server, "x1", approval, decision="edit"), 422, "invalid_request")
    assert_error(
        decide(server, "x1", approval, decision="approve", args={"command": "x"}), 422, "invalid_request"
    )
    assert_error(decide(server, "x1", approval, decision="approve", extra=1), 422, "invalid_request")
    assert_error(decide(server, "x1", approval, decision="answer", message="hi"), 422, "invalid_decision")
    busy = httpx.post(f"{server.url}/api/chat", json={"message": "again", "session_id": "x1"}, timeout=30)
    error = assert_error(busy, 409, "session_waiting")
    assert error["details"]["pending"][0]["approval_id"] == approval
    # every edge refuses a new turn of a waiting session the same way (no 500)
    agent = httpx.post(f"{server.url}/api/agent", json={"prompt": "again", "session-id": "x1"}, timeout=30)
    assert_error(agent, 409, "session_waiting")
    body = {"model": "clawlet", "session_id": "x1", "messages": [{"role": "user", "content": "again"}]}
    openai = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
    assert openai.status_code == 409 and openai.json()["error"]["code"] == "session_waiting"
    # nothing of the refused requests was decided or saved
    assert pending(server, "x1")["pending"][0]["approval_id"] == approval
    assert transcript(server.settings, "x1")[-1]["tool_calls"][0]["output"] == ""


def test_cancel_drops_what_a_session_waits_for(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    events = chat(server, "c1", "run: echo never > workspace/cancelled.txt")
    approval = one(events, "approval_required")["approval_id"]
    response = httpx.post(f"{server.url}/api/sessions/c1/cancel", timeout=30)
    assert response.json() == {"session_id": "c1", "cancelled": True}
    assert pending(server, "c1")["waiting"] is False
    assert_error(decide(server, "c1", approval, decision="approve"), 409, "approval_decided")
    assert not (server.settings.paths.workspace / "cancelled.txt").exists()
    assert "cancelled" in transcript(server.settings, "c1")[-1]["tool_calls"][0]["output"]
    assert names(chat(server, "c1", "hello"))[-1] == "done"  # the session takes messages again


def test_the_agent_asks_a_question_and_the_answer_resumes_it(server: LiveServer) -> None:
    events = chat(server, "q1", "ask: which colour do you like?")
    question = one(events, "question")
    assert question["question"] == "which colour do you like?"
    assert question["allowed_decisions"] == ["answer", "reject"]
    assert one(events, "waiting")["pending"][0]["kind"] == "question"
    listed = {item["id"]: item["waiting"] for item in httpx.get(f"{server.url}/api/sessions").json()}
    assert listed["q1"] is True  # the session list says which sessions wait
    assert_error(decide(server, "q1", question["approval_id"], decision="approve"), 422, "invalid_decision")
    assert_error(decide(server, "q1", question["approval_id"], decision="answer"), 422, "invalid_request")
    continued = decide_ok(server, "q1", question["approval_id"], decision="answer", message="green")
    assert one(continued, "tool_end")["output"] == "green"
    assert one(continued, "done")["content"] == "[demo] You answered: green"
    stored = transcript(server.settings, "q1")
    assert calls_shown(stored[1]["tool_calls"]) == [
        {"tool": "ask_user", "input": "which colour do you like?", "output": "green"}
    ]
    assert len(stored) == 3
    assert {item["id"]: item["waiting"] for item in httpx.get(f"{server.url}/api/sessions").json()}[
        "q1"
    ] is False

    declined = one(chat(server, "q2", "ask: your age?"), "question")["approval_id"]
    continued = decide_ok(server, "q2", declined, decision="reject", message="rather not say")
    assert one(continued, "tool_end")["is_error"] is True
    assert "rather not say" in one(continued, "done")["content"]


def test_json_mode_reports_waiting_and_decides(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    body = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "run: echo j", "session_id": "j1", "stream": False},
        timeout=60,
    ).json()
    assert body["waiting"] is True and body["cancelled"] is False and body["title"] is None
    approval = body["pending"][0]["approval_id"]
    done = decide(server, "j1", approval, decision="approve", stream=False).json()
    assert done["content"].startswith("[demo] `terminal` returned:") and "waiting" not in done


# -- a restart while waiting -----------------------------------------------------------------


def test_a_restarted_server_continues_a_waiting_run(
    settings: Settings, live_server: Callable[..., LiveServer]
) -> None:
    first = live_server()
    set_policies(first, {"terminal": "ask"})
    side = settings.paths.workspace / "side.txt"
    approval = one(chat(first, "restart1", APPEND), "approval_required")["approval_id"]
    first.stop()
    assert not side.exists()

    second = live_server()  # a new app and new services on the same home
    listed = pending(second, "restart1")
    assert [item["approval_id"] for item in listed["pending"]] == [approval]
    assert listed["pending"][0]["args"] == {"command": APPEND[5:]}
    continued = decide_ok(second, "restart1", approval, decision="approve")
    assert one(continued, "tool_end")["output"] == "1"
    assert names(continued)[-2:] == ["done", "title"]
    assert lines_of(side) == ["once"]
    assert len(transcript(settings, "restart1")) == 3


# -- several calls in one step (scripted model) ----------------------------------------------


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def scripted(live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer) -> LiveServer:
    return live_server(Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k"))


def agent_calls(llm: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    """The agent's model calls (a title request offers no tools)."""
    return [request for request in llm.requests if request.get("tools")]


def test_parallel_calls_each_wait_and_each_runs_once(scripted: LiveServer, llm: ScriptedOpenAIServer) -> None:
    set_policies(scripted, {"terminal": "ask"})
    home = scripted.settings.paths.root
    (home / "notes.txt").write_text("a note", encoding="utf-8")
    llm.set_script(
        [
            tool_turn(
                ToolCall("terminal", {"command": "echo A >> workspace/a.txt"}, id="call_a"),
                ToolCall("read_file", {"path": "notes.txt"}, id="call_r"),
                ToolCall("terminal", {"command": "echo B >> workspace/b.txt"}, id="call_b"),
                text="Doing three things.",
            ),
            text_turn("All done."),
            text_turn("Three things"),  # the session's title
        ]
    )
    events = chat(scripted, "p1", "go")
    assert names(events).count("approval_required") == 2
    assert one(events, "tool_end")["output"] == "a note"  # the allowed call ran in the same step
    by_call = {data["call_id"]: data["approval_id"] for name, data in events if name == "approval_required"}
    assert not (home / "workspace" / "a.txt").exists() and not (home / "workspace" / "b.txt").exists()

    first = decide_ok(scripted, "p1", by_call["call_a"], decision="approve")
    assert names(first) == ["tool_end", "waiting"]  # read_file's result is not reported again
    assert [item["call_id"] for item in one(first, "waiting")["pending"]] == ["call_b"]
    assert "approval_required" not in names(first)
    assert lines_of(home / "workspace" / "a.txt") == ["A"] and not (home / "workspace" / "b.txt").exists()
    assert len(agent_calls(llm)) == 1  # the model was not called again

    second = decide_ok(scripted, "p1", by_call["call_b"], decision="approve")
    assert names(second)[0] == "tool_end" and names(second).count("tool_end") == 1
    assert one(second, "done")["content"] == "All done."
    assert lines_of(home / "workspace" / "a.txt") == ["A"] and lines_of(home / "workspace" / "b.txt") == ["B"]
    assert len(agent_calls(llm)) == 2
    results = [m for m in agent_calls(llm)[1]["messages"] if m["role"] == "tool"]
    assert sorted(m["tool_call_id"] for m in results) == ["call_a", "call_b", "call_r"]

    stored = transcript(scripted.settings, "p1")
    assert calls_shown(stored[1]["tool_calls"]) == [
        {"tool": "terminal", "input": "echo A >> workspace/a.txt", "output": "(no output)"},
        {"tool": "read_file", "input": "notes.txt", "output": "a note"},
        {"tool": "terminal", "input": "echo B >> workspace/b.txt", "output": "(no output)"},
    ]
    assert [m["content"] for m in stored] == ["go", "Doing three things.", "All done."]


def test_a_denied_tool_called_anyway_is_refused(scripted: LiveServer, llm: ScriptedOpenAIServer) -> None:
    set_policies(scripted, {"terminal": "deny"})
    llm.set_script(
        [tool_turn(ToolCall("terminal", {"command": "echo hi > workspace/no.txt"})), text_turn("ok")]
    )
    events = chat(scripted, "d1", "go")
    offered = {tool["function"]["name"] for tool in llm.requests[0]["tools"]}
    assert "terminal" not in offered and "ask_user" in offered
    end = one(events, "tool_end")
    assert end["is_error"] is True and "denied by this workspace's approval policy" in end["output"]
    assert not (scripted.settings.paths.workspace / "no.txt").exists()


# -- surfaces that cannot ask ----------------------------------------------------------------

V1 = "/v1/chat/completions"


def completion(server: LiveServer, text: str, **extra: Any) -> str:
    body = {"model": "clawlet", "messages": [{"role": "user", "content": text}], "thinking": True, **extra}
    response = httpx.post(server.url + V1, json=body, timeout=60)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def test_openai_endpoint_denies_ask_tools_unless_permissions_are_skipped(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})
    home = server.settings.paths.root
    denied = completion(server, "run: echo v1 > workspace/v1.txt")
    thinking = denied.split("</think>")[0]
    assert "terminal need the user's approval" in thinking and "denied" in thinking
    assert "not available" in denied and not (home / "workspace" / "v1.txt").exists()

    allowed = completion(server, "run: echo v1 > workspace/v1.txt", dangerously_skip_permissions=True)
    assert (
        "dangerously-skip-permissions=true, so terminal run without approval" in allowed.split("</think>")[0]
    )
    assert (home / "workspace" / "v1.txt").read_text(encoding="utf-8") == "v1\n"

    # ask_user is never offered where no one can answer
    assert "not available" in completion(server, "ask: really?")
    assert not list((server.settings.paths.sessions / "approvals").glob("*.json"))


def test_openai_refuses_an_ask_tool_the_model_calls_anyway(
    scripted: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    set_policies(scripted, {"terminal": "ask"})
    llm.set_script(
        [tool_turn(ToolCall("terminal", {"command": "echo x > workspace/x.txt"})), text_turn("fine")]
    )
    content = completion(scripted, "go")
    assert "terminal" not in {tool["function"]["name"] for tool in llm.requests[0]["tools"]}
    assert "needs the user's approval" in content and content.endswith("fine")
    assert not (scripted.settings.paths.workspace / "x.txt").exists()


def test_streaming_openai_says_so_in_the_thinking_block(server: LiveServer) -> None:
    set_policies(server, {"python_repl": "ask"})
    body = {
        "model": "clawlet",
        "stream": True,
        "messages": [{"role": "user", "content": "python: 1 + 1 thinking=true"}],
    }
    with httpx.stream("POST", server.url + V1, json=body, timeout=60) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks if chunk["choices"])
    assert text.startswith("<think>\nsession-id=")
    assert "python_repl need the user's approval" in text.split("</think>")[0]


def test_native_endpoint_applies_the_permission_mode(server: LiveServer) -> None:
    set_policies(server, {"terminal": "ask"})

    def run(**extra: Any) -> list[dict[str, Any]]:
        response = httpx.post(
            f"{server.url}/api/agent", json={"prompt": "run: echo n > workspace/n.txt", **extra}, timeout=60
        )
        assert response.status_code == 200, response.text
        return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]

    lines = run()
    init = lines[0]
    assert (
        init["permission_mode"] == "deny"
        and "terminal" not in init["tools"]
        and "ask_user" not in init["tools"]
    )
    assert "terminal need the user's approval" in init["permissions"]
    assert lines[-1]["subtype"] == "success" and "not available" in lines[-1]["result"]
    assert not (server.settings.paths.workspace / "n.txt").exists()

    lines = run(**{"dangerously-skip-permissions": True})
    assert lines[0]["permission_mode"] == "skip" and "terminal" in lines[0]["tools"]
    assert (server.settings.paths.workspace / "n.txt").read_text(encoding="utf-8") == "n\n"


def test_two_calls_of_one_tool_in_one_message_are_paired_by_call_id(
    scripted: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    home = scripted.settings.paths.root
    (home / "one.txt").write_text("first", encoding="utf-8")
    (home / "two.txt").write_text("second", encoding="utf-8")
    llm.set_script(
        [
            tool_turn(
                ToolCall("read_file", {"path": "one.txt"}, id="call_1"),
                ToolCall("read_file", {"path": "two.txt"}, id="call_2"),
            ),
            text_turn("Read both."),
            text_turn("Two files"),  # the session's title
        ]
    )
    events = chat(scripted, "pair", "read both")
    starts = [data for name, data in events if name == "tool_start"]
    ends = [data for name, data in events if name == "tool_end"]
    assert [(data["call_id"], data["input"]) for data in starts] == [
        ("call_1", "one.txt"),
        ("call_2", "two.txt"),
    ]
    assert {data["call_id"]: data["output"] for data in ends} == {"call_1": "first", "call_2": "second"}
    stored = transcript(scripted.settings, "pair")
    assert [call.get("call_id") for call in stored[1]["tool_calls"]] == ["call_1", "call_2"]

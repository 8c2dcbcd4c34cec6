"""Per-request options (in-message, body, headers) with the seed's precedence; tool allow/deny;
workspaces; thinking display; and the native /api/agent endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from clawlet.api.options import AgentOptions, OptionError, extract_in_message
from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, Turn, text_turn
from tests.conftest import LiveServer

V1 = "/v1/chat/completions"


def test_in_message_options_are_parsed_and_removed() -> None:
    text, found = extract_in_message(
        'workspace=proj-1 thinking=true allowed-tools=["read_file","terminal"] 请读取 main.py '
        "dangerously-skip-permissions=true session-id=abc-123"
    )
    assert text == "请读取 main.py"
    assert found == {
        "workspace": "proj-1",
        "thinking": "tags",
        "allowed_tools": ["read_file", "terminal"],
        "skip_permissions": True,
        "session_id": "abc-123",
    }
    assert extract_in_message("price=3 apples")[0] == "price=3 apples"  # not an option name
    assert extract_in_message("thinking=code hi")[1] == {"thinking": "code"}
    for bad in ("allowed-tools=[read_file", "thinking=maybe x", "dangerously-skip-permissions=perhaps"):
        with pytest.raises(OptionError):
            extract_in_message(bad)
    options = AgentOptions()
    options.overlay({"workspace": "a"})
    options.overlay({"workspace": "b", "thinking": None})
    assert options.workspace == "b" and options.thinking is None


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def scripted_server(settings: Settings, live_server: object, llm: ScriptedOpenAIServer) -> LiveServer:
    custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
    server: LiveServer = live_server(custom)  # type: ignore[operator]
    return server


def offered_tools(request: dict[str, object]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}  # type: ignore[attr-defined,index]


def test_precedence_user_over_assistant_over_system_over_body_and_headers(
    scripted_server: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    llm.set_script([text_turn("ok")])
    response = httpx.post(
        scripted_server.url + V1,
        headers={"X-Clawlet-Workspace": "from-header", "X-Clawlet-Disallowed-Tools": "terminal"},
        json={
            "model": "clawlet",
            "workspace": "from-body",
            "messages": [
                {
                    "role": "system",
                    "content": 'Be terse. workspace=from-system disallowed-tools=["python_repl"]',
                },
                {"role": "user", "content": "earlier workspace=ignored-earlier-user"},
                {"role": "assistant", "content": "sure workspace=from-assistant"},
                {"role": "user", "content": "workspace=from-user 列出文件"},
            ],
        },
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-clawlet-workspace"] == "from-user"
    sent = llm.requests[0]
    assert "Be terse." in sent["messages"][0]["content"]  # the client's system prompt is kept
    assert "workspace=" not in json.dumps(sent["messages"], ensure_ascii=False)
    assert sent["messages"][-1] == {"role": "user", "content": "列出文件"}
    # disallowed-tools from the system message overrides the header's value
    assert "python_repl" not in offered_tools(sent) and "terminal" in offered_tools(sent)
    workspace_home = scripted_server.settings.workspaces_root / "from-user"
    session_id = response.headers["x-session-id"]
    assert (workspace_home / "sessions" / f"{session_id}.json").is_file()
    assert not (scripted_server.settings.paths.sessions / f"{session_id}.json").exists()


def test_disallowed_tool_is_not_offered_and_allowed_list_restricts(
    scripted_server: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    llm.set_script([text_turn("a"), text_turn("b")])
    base = {"model": "clawlet", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(
        scripted_server.url + V1, json={**base, "disallowed-tools": ["terminal", "python_repl"]}, timeout=60
    )
    assert {"terminal", "python_repl"}.isdisjoint(offered_tools(llm.requests[0]))
    assert "read_file" in offered_tools(llm.requests[0])
    httpx.post(scripted_server.url + V1, json={**base, "allowed_tools": ["read_file"]}, timeout=60)
    assert offered_tools(llm.requests[1]) == {"read_file"}


def test_unknown_tool_names_and_bad_workspace_are_400(server: LiveServer) -> None:
    for body_extra in ({"allowed-tools": ["rm_rf"]}, {"disallowed_tools": ["nope"]}):
        response = httpx.post(
            server.url + V1,
            json={"model": "clawlet", "messages": [{"role": "user", "content": "hi"}], **body_extra},
        )
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert "unknown tool" in response.json()["error"]["message"]
    in_message = httpx.post(
        server.url + V1,
        json={"model": "clawlet", "messages": [{"role": "user", "content": 'allowed-tools=["x"] hi'}]},
    )
    assert in_message.status_code == 400
    traversal = httpx.post(
        server.url + V1,
        json={"model": "clawlet", "messages": [{"role": "user", "content": "workspace=../etc hi"}]},
    )
    assert traversal.status_code == 400 and traversal.json()["error"]["code"] == "invalid_workspace"


def test_demo_model_cannot_call_a_disallowed_tool(server: LiveServer) -> None:
    response = httpx.post(
        server.url + V1,
        json={
            "model": "clawlet",
            "messages": [{"role": "user", "content": 'disallowed-tools=["terminal"] run: echo hi'}],
        },
        timeout=60,
    )
    assert response.status_code == 200
    assert "not available" in response.json()["choices"][0]["message"]["content"]


def test_workspaces_are_isolated(server: LiveServer) -> None:
    def ask(workspace: str, text: str) -> httpx.Response:
        return httpx.post(
            server.url + V1,
            json={
                "model": "clawlet",
                "messages": [{"role": "user", "content": f"workspace={workspace} {text}"}],
            },
            timeout=60,
        )

    ask("alpha", "run: echo secret-alpha > workspace/note.txt")
    beta = ask("beta", "read workspace/note.txt")
    assert "file not found" in beta.json()["choices"][0]["message"]["content"]
    alpha = ask("alpha", "read workspace/note.txt")
    assert "secret-alpha" in alpha.json()["choices"][0]["message"]["content"]
    root = server.settings.workspaces_root
    assert (root / "alpha" / "workspace" / "note.txt").is_file() and not (
        root / "beta" / "workspace" / "note.txt"
    ).exists()
    assert (root / "beta" / "workspace" / "SOUL.md").is_file()  # each workspace is a full home
    shared = ask("shared", "read workspace/note.txt")  # the seed's default name is the main home
    assert "file not found" in shared.json()["choices"][0]["message"]["content"]


def test_session_resume_by_in_message_session_id_and_thinking_block(server: LiveServer) -> None:
    first = httpx.post(
        server.url + V1,
        json={"model": "clawlet", "messages": [{"role": "user", "content": "thinking=true run: echo t1"}]},
        timeout=60,
    )
    content = first.json()["choices"][0]["message"]["content"]
    session_id = first.headers["x-session-id"]
    assert content.startswith(f"<think>\nsession-id={session_id}\n")
    assert "🔧 terminal: echo t1" in content and "→ t1" in content
    assert content.index("</think>") < content.index("[demo]")
    second = httpx.post(
        server.url + V1,
        json={
            "model": "clawlet",
            "messages": [
                {"role": "assistant", "content": f"session-id={session_id}"},
                {"role": "user", "content": "thinking=code run: echo t2"},
            ],
            "stream": True,
        },
        timeout=60,
    )
    assert second.headers["x-session-id"] == session_id
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in second.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert text.startswith("```thinking\nsession-id=") and "🔧 terminal: echo t2" in text
    stored = json.loads((server.settings.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8"))
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [
        "run: echo t1",
        "run: echo t2",
    ]


def test_native_agent_endpoint_streams_events(server: LiveServer) -> None:
    (server.settings.paths.root / "workspace" / "notes.md").write_text("hello", encoding="utf-8")
    response = httpx.post(
        f"{server.url}/api/agent",
        json={
            "prompt": "run: echo native",
            "session-id": "native-1",
            "system-prompt": "You are terse.",
            "disallowed-tools": ["python_repl"],
            "files": ["workspace/notes.md"],
        },
        timeout=60,
    )
    assert response.status_code == 200
    lines = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[0]["type"] == "system" and lines[0]["subtype"] == "init"
    assert lines[0]["session_id"] == "native-1" and "python_repl" not in lines[0]["tools"]
    kinds = [item["type"] for item in lines]
    assert {"text_delta", "tool_start", "tool_end", "new_segment"} <= set(kinds)
    assert lines[-1]["type"] == "result" and lines[-1]["subtype"] == "success"
    assert "native" in lines[-1]["result"]
    stored = json.loads((server.settings.paths.sessions / "native-1.json").read_text(encoding="utf-8"))
    assert "workspace/notes.md" in stored["messages"][0]["content"]

    alias = httpx.post(f"{server.url}/api/claude", json={"prompt": "hi"}, timeout=60)
    assert alias.status_code == 200 and '"type": "result"' in alias.text
    for bad, code in (
        ({"prompt": ""}, 422),
        ({"prompt": "hi", "files": ["../../etc/passwd"]}, 400),
        ({"prompt": "hi", "files": ["workspace/missing.md"]}, 400),
        ({"prompt": "hi", "allowed-tools": ["nope"]}, 400),
        ({"prompt": "hi", "workspace": "a/b"}, 400),
        ({"prompt": "hi", "unknown-field": 1}, 422),
    ):
        response = httpx.post(f"{server.url}/api/agent", json=bad)
        assert response.status_code == code, (bad, response.text)
        assert "error" in response.json()


def test_model_reasoning_streams_inside_the_think_block(settings: Settings, live_server: object) -> None:
    """DeepSeek's reasoning_content (native provider path) is shown only when thinking is on."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script(
            [
                Turn(text="答案是 4。", reasoning="先算 2+2，等于 4。"),
                Turn(text="答案是 4。", reasoning="先算 2+2，等于 4。"),
            ]
        )
        custom = Settings(
            provider="deepseek", deepseek_api_key="k", deepseek_base_url=llm.base_url, deepseek_model="r1"
        )
        server: LiveServer = live_server(custom)  # type: ignore[operator]
        body = {"model": "clawlet", "messages": [{"role": "user", "content": "2+2?"}]}
        shown = httpx.post(server.url + V1, json={**body, "thinking": True}, timeout=60)
        content = shown.json()["choices"][0]["message"]["content"]
        assert content.startswith("<think>\nsession-id=")
        assert "先算 2+2，等于 4。" in content
        assert content.index("等于 4") < content.index("</think>") < content.index("答案是 4。")
        hidden = httpx.post(server.url + V1, json=body, timeout=60)
        assert hidden.json()["choices"][0]["message"]["content"] == "答案是 4。"


def test_workbench_streams_model_reasoning_as_thinking_events(
    settings: Settings, live_server: object
) -> None:
    """The workbench SSE sends reasoning as its own ``thinking`` events, apart from the answer."""
    with ScriptedOpenAIServer() as llm:
        llm.set_script([Turn(text="答案是 4。", reasoning="先算 2+2，等于 4。"), text_turn("Sums")])
        custom = Settings(
            provider="deepseek", deepseek_api_key="k", deepseek_base_url=llm.base_url, deepseek_model="r1"
        )
        server: LiveServer = live_server(custom)  # type: ignore[operator]
        response = httpx.post(server.url + "/api/chat", json={"message": "2+2?"}, timeout=60)
        assert response.status_code == 200
        frames = [
            json.loads(frame.split("data: ", 1)[1])
            for frame in response.text.split("\n\n")
            if frame.startswith("event: ")
        ]
        thinking = "".join(f["content"] for f in frames if f["type"] == "thinking")
        answer = "".join(f["content"] for f in frames if f["type"] == "token")
        assert thinking == "先算 2+2，等于 4。"
        assert answer == "答案是 4。"
        types = [f["type"] for f in frames]
        assert types.index("thinking") < types.index("token") < types.index("done")
        assert frames[types.index("done")]["content"] == "答案是 4。"


def test_every_edge_builds_its_run_context_one_way() -> None:
    from clawlet.engine.context import RunContext
    from clawlet.llm.sampling import Sampling

    # the permission mode: skipping permissions wins, else asking where the edge can, else deny
    assert RunContext.for_edge().approval_mode == "deny"
    assert RunContext.for_edge(can_ask=True) == RunContext(approval_mode="ask")
    assert RunContext.for_edge(skip_permissions=True).approval_mode == "allow"
    assert RunContext.for_edge(can_ask=True, skip_permissions=True).approval_mode == "allow"
    # tool lists: None is every tool, an empty list none; duplicates collapse
    assert RunContext.for_edge().allowed_tools is None
    assert RunContext.for_edge(allowed_tools=[]).allowed_tools == frozenset()
    built = RunContext.for_edge(
        allowed_tools=["read_file", "read_file"],
        disallowed_tools=None,
        extra_system_prompt="Be brief.",
        sampling=Sampling(temperature=0.0),
    )
    assert built.allowed_tools == frozenset({"read_file"}) and built.disallowed_tools == frozenset()
    assert built.extra_system_prompt == "Be brief." and built.sampling == Sampling(temperature=0.0)
    assert not built.tool_allowed("terminal") and built.tool_allowed("read_file")

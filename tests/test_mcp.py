"""STDIO MCP servers from mcp.json become agent tools, obeying the allow/deny lists."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from clawlet.config import Settings
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, ToolCall, text_turn, tool_turn
from clawlet.tools.mcp import load_mcp_tools, read_mcp_config
from tests.conftest import LiveServer

SERVER_SCRIPT = Path(__file__).parent / "support" / "mcp_server.py"


def write_config(home: Path, servers: dict[str, object]) -> None:
    (home / "mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def calc_server(env: dict[str, str] | None = None) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(SERVER_SCRIPT)], "env": env or {}}


@pytest.mark.slow
def test_tools_load_and_a_broken_server_is_skipped(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_API_KEY", "do-not-leak")
    home = settings.paths.root
    write_config(
        home, {"calc": calc_server({"CALC_MODE": "test"}), "broken": {"command": "/nonexistent/bin"}}
    )
    loaded = asyncio.run(load_mcp_tools(home))
    names = {tool.name for tool in loaded.tools}
    assert {"calc_add", "calc_shout", "calc_whoami"} <= names
    assert loaded.servers == ["calc"] and "broken" in loaded.errors
    whoami = next(tool for tool in loaded.tools if tool.name == "calc_whoami")
    seen = str(asyncio.run(whoami.ainvoke({})))
    assert str(home) in seen and "CALC_MODE" in seen and "SECRET_API_KEY" not in seen


def test_bad_config_is_reported(settings: Settings) -> None:
    home = settings.paths.root
    (home / "mcp.json").write_text("{not json", encoding="utf-8")
    loaded = asyncio.run(load_mcp_tools(home))
    assert loaded.tools == [] and "mcp.json" in loaded.errors
    write_config(home, {"x": {"args": []}})
    with pytest.raises(ValueError, match="command"):
        read_mcp_config(home)


@pytest.mark.slow
def test_agent_calls_an_mcp_tool_and_deny_lists_apply(settings: Settings, live_server: object) -> None:
    write_config(settings.paths.root, {"calc": calc_server()})
    with ScriptedOpenAIServer() as llm:
        llm.set_script([tool_turn(ToolCall("calc_add", {"a": 19, "b": 23})), text_turn("The sum is 42.")])
        custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
        server: LiveServer = live_server(custom)  # type: ignore[operator]
        body = {"model": "clawlet", "messages": [{"role": "user", "content": "add 19 and 23"}]}
        response = httpx.post(
            f"{server.url}/v1/chat/completions", json={**body, "thinking": True}, timeout=60
        )
        assert response.status_code == 200, response.text
        content = response.json()["choices"][0]["message"]["content"]
        assert "🔧 calc_add" in content and "→ 42" in content and content.endswith("The sum is 42.")
        offered = {tool["function"]["name"] for tool in llm.requests[0]["tools"]}
        assert {"calc_add", "calc_shout", "terminal"} <= offered
        tool_result = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        assert tool_result and "42" in str(tool_result[0]["content"])

        llm.set_script([text_turn("no tools")])
        denied = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={**body, "disallowed_tools": ["calc_add"]},
            timeout=60,
        )
        assert denied.status_code == 200
        assert "calc_add" not in {tool["function"]["name"] for tool in llm.requests[2]["tools"]}
        assert "calc_shout" in {tool["function"]["name"] for tool in llm.requests[2]["tools"]}
        unknown = httpx.post(
            f"{server.url}/v1/chat/completions", json={**body, "allowed_tools": ["calc_nope"]}
        )
        assert unknown.status_code == 400

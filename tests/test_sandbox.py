"""The tool sandbox (bubblewrap), tried as an attacker driving the agent would: through a real
``clawlet serve`` process or the real app on loopback, the demo model's ``run:`` and ``python:``
phrasings, and a real MCP server. Host-side checks read the real files and ``/proc``."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clawlet.config import RuntimeConfig, Settings
from clawlet.tools.mcp import load_mcp_tools
from clawlet.tools.sandbox import SandboxUnavailable, ToolSandbox, bubblewrap_problem
from clawlet.tools.terminal import make_terminal_tool
from tests.conftest import LiveServer, ServeProcess, host_processes_with, parse_sse

BWRAP_PROBLEM = bubblewrap_problem()
needs_bubblewrap = pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap is unusable here: {BWRAP_PROBLEM}"
)
MCP_SERVER = Path(__file__).parent / "support" / "mcp_server.py"


def tool_output(url: str, message: str, session_id: str = "sandbox") -> str:
    """Send one chat turn; the output of the one tool the demo model called for it."""
    response = httpx.post(f"{url}/api/chat", json={"message": message, "session_id": session_id}, timeout=120)
    assert response.status_code == 200, response.text
    outputs = [data["output"] for name, data in parse_sse(response.text) if name == "tool_end"]
    assert len(outputs) == 1, response.text
    return str(outputs[0])


@pytest.fixture
def without_bubblewrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A ``PATH`` on which there is no ``bwrap`` (but ``cat`` and ``ls``), probed afresh."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for name in ("cat", "ls"):
        found = shutil.which(name)
        assert found
        (bin_dir / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    bubblewrap_problem.cache_clear()
    yield
    bubblewrap_problem.cache_clear()


# -- what the sandbox hides ----------------------------------------------------------------------


@needs_bubblewrap
@pytest.mark.slow
def test_the_terminal_cannot_reach_the_server_process_or_the_private_home(
    serve: list[ServeProcess], clawlet_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ_secret = f"aws-{secrets.token_hex(8)}"
    dotenv_secret = f"pw-{secrets.token_hex(8)}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", environ_secret)  # in the server's initial environment
    (tmp_path / ".env").write_text(f"SOME_PASSWORD={dotenv_secret}\n", encoding="utf-8")  # its cwd
    proc = ServeProcess(clawlet_home)
    serve.append(proc)
    first_line = proc.output().splitlines()[0]
    assert first_line.endswith("· sandbox bubblewrap"), first_line
    assert "warning" not in proc.output()
    server_pid = proc.process.pid

    assert tool_output(proc.url, "run: echo hello") == "hello"
    session_file = clawlet_home / "sessions" / "sandbox.json"
    config_file = clawlet_home / "config.json"
    config_file.write_text('{"rag_mode": false}\n', encoding="utf-8")
    assert session_file.is_file() and config_file.is_file()

    listing = tool_output(proc.url, "run: ls /proc").split()
    pids = {int(name) for name in listing if name.isdigit()}
    assert server_pid not in pids and len(pids) <= 5, pids  # a new PID namespace: only the sandbox's

    for command in (
        f"cat /proc/{server_pid}/environ",
        "cat /proc/$PPID/cwd/.env",
        f"cat {tmp_path}/.env",
        "cat sessions/sandbox.json",
        f"cat {session_file}",
        "cat config.json",
    ):
        output = tool_output(proc.url, f"run: {command}")
        assert "No such file or directory" in output and output.endswith("[exit code 1]"), (command, output)
    every_environ = tool_output(proc.url, "run: cat /proc/*/environ | tr '\\0' '\\n'")
    assert "PATH=" in every_environ and environ_secret not in every_environ
    assert dotenv_secret not in every_environ

    home_listing = set(tool_output(proc.url, f"run: ls -A {clawlet_home}").split())
    assert home_listing == {"knowledge", "memory", "scratch", "skills", "workspace"}
    transcript = session_file.read_text(encoding="utf-8")
    assert environ_secret not in transcript and dotenv_secret not in transcript


@needs_bubblewrap
def test_the_home_s_work_directories_are_writable_and_the_system_is_not(server: LiveServer) -> None:
    home = server.settings.paths.root
    assert tool_output(server.url, "run: echo from-sandbox > workspace/x.txt && cat workspace/x.txt") == (
        "from-sandbox"
    )
    assert (home / "workspace" / "x.txt").read_text(encoding="utf-8") == "from-sandbox\n"
    assert tool_output(server.url, "run: echo kept > scratch/notes.txt") == "(no output)"
    assert (home / "scratch" / "notes.txt").read_text(encoding="utf-8") == "kept\n"

    memory_before = server.settings.paths.memory_file.read_text(encoding="utf-8")
    for command in ("touch /usr/clawlet-sandbox-test", "echo injected >> memory/MEMORY.md"):
        output = tool_output(server.url, f"run: {command}")
        assert "Read-only file system" in output, output
    assert not Path("/usr/clawlet-sandbox-test").exists()
    assert server.settings.paths.memory_file.read_text(encoding="utf-8") == memory_before

    # the home's root is an empty tmpfs: what is written there never reaches the real home
    tool_output(server.url, "run: echo '{}' > config.json && echo x > sessions.json")
    assert not (home / "sessions.json").exists() and not (home / "config.json").exists()


@needs_bubblewrap
def test_python_repl_runs_in_the_sandbox(server: LiveServer) -> None:
    assert tool_output(server.url, "python: print(6 * 7)") == "42"
    listing = tool_output(server.url, "python: import os; sorted(os.listdir('.'))")
    assert listing == repr(["knowledge", "memory", "scratch", "skills", "workspace"])
    pids = tool_output(
        server.url, "python: import os; sorted(int(p) for p in os.listdir('/proc') if p.isdigit())"
    )
    assert max(json.loads(pids)) < 10, pids


# -- the network switch --------------------------------------------------------------------------


@needs_bubblewrap
def test_the_network_can_be_turned_off_per_workspace(server: LiveServer) -> None:
    connect = f"run: (exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null && echo connected || echo refused"
    assert tool_output(server.url, connect) == "connected"  # the host's network, loopback included
    RuntimeConfig(server.settings.paths.config_file).set_sandbox_network(False)
    assert tool_output(server.url, connect) == "refused"
    RuntimeConfig(server.settings.paths.config_file).set_sandbox_network(True)
    assert tool_output(server.url, connect) == "connected"


def test_a_workspace_inherits_the_main_home_s_network_setting(tmp_path: Path) -> None:
    main = RuntimeConfig(tmp_path / "main" / "config.json")
    workspace = RuntimeConfig(tmp_path / "ws" / "config.json", parent=main)
    (tmp_path / "main").mkdir()
    (tmp_path / "ws").mkdir()
    assert workspace.get_sandbox_network() is True
    main.set_sandbox_network(False)
    assert workspace.get_sandbox_network() is False
    workspace.set_sandbox_network(True)
    assert workspace.get_sandbox_network() is True and main.get_sandbox_network() is False
    (tmp_path / "ws" / "config.json").write_text('{"sandbox": {"network": "no"}}', encoding="utf-8")
    assert workspace.get_sandbox_network() is False  # not a boolean: ignored, the parent's applies


# -- killing -------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_bubblewrap
async def test_a_timeout_kills_even_what_left_the_process_group(settings: Settings) -> None:
    tool = make_terminal_tool(settings.paths.root, timeout=2)
    marker = f"1000.{secrets.randbelow(10**9)}"
    command = f"setsid sleep {marker} & sleep {marker} & echo started; wait"
    task = asyncio.ensure_future(tool.ainvoke({"command": command}))
    seen = False
    while not task.done():
        seen = seen or len(host_processes_with(f"sleep\0{marker}")) == 2
        await asyncio.sleep(0.02)
    output = await task
    assert "started" in output and "[timed out after 2 s; the command was killed]" in output
    assert seen, "the two sleeps were never seen running"
    deadline = asyncio.get_running_loop().time() + 15
    while host_processes_with(marker) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert not host_processes_with(marker), "a process survived the timeout"


# -- MCP servers ---------------------------------------------------------------------------------


@needs_bubblewrap
@pytest.mark.slow
async def test_mcp_servers_run_in_the_sandbox(settings: Settings) -> None:
    import os

    home = settings.paths.root
    (home / "sessions" / "private.json").write_text("{}", encoding="utf-8")
    (home / "mcp.json").write_text(
        json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(MCP_SERVER)]}}}),
        encoding="utf-8",
    )
    loaded = await load_mcp_tools(home)
    read_text = next(tool for tool in loaded.tools if tool.name == "calc_read_text")
    soul = await read_text.ainvoke({"path": "workspace/SOUL.md"})
    assert str(soul) and "unreadable" not in str(soul)
    for path in (
        f"/proc/{os.getpid()}/environ",
        "sessions/private.json",
        "mcp.json",
        str(home / "config.json"),
    ):
        assert "unreadable: FileNotFoundError" in str(await read_text.ainvoke({"path": path})), path


# -- status and fallbacks ------------------------------------------------------------------------


@needs_bubblewrap
def test_health_reports_the_sandbox(server: LiveServer) -> None:
    body = httpx.get(f"{server.url}/health", timeout=30).json()
    assert body["sandbox"] == "bubblewrap"
    assert body["checks"]["sandbox"]["status"] == "healthy"
    assert body["checks"]["sandbox"]["details"] == {"sandbox": "bubblewrap", "mode": "auto"}


def test_sandbox_off_keeps_today_s_behaviour(live_server: object, settings: Settings) -> None:
    server: LiveServer = live_server(settings.model_copy(update={"sandbox": "off"}))  # type: ignore[operator]
    settings.paths.config_file.write_text('{"rag_mode": false}\n', encoding="utf-8")
    body = httpx.get(f"{server.url}/health", timeout=30).json()
    assert body["sandbox"] == "none (turned off by CLAWLET_SANDBOX=off)"
    assert body["checks"]["sandbox"]["status"] == "not_configured" and body["status"] == "healthy"
    assert tool_output(server.url, "run: cat config.json") == '{"rag_mode": false}'


@pytest.mark.usefixtures("without_bubblewrap")
def test_without_bubblewrap_tools_run_unsandboxed_and_health_says_why(server: LiveServer) -> None:
    server.settings.paths.config_file.write_text('{"rag_mode": false}\n', encoding="utf-8")
    body = httpx.get(f"{server.url}/health", timeout=30).json()
    assert body["sandbox"] == "none (bubblewrap is not installed (no bwrap on PATH))"
    assert body["checks"]["sandbox"]["status"] == "unavailable" and body["status"] == "healthy"
    assert tool_output(server.url, "run: cat config.json") == '{"rag_mode": false}'


@pytest.mark.usefixtures("without_bubblewrap")
async def test_a_required_sandbox_that_is_missing_refuses_to_run_tools(settings: Settings) -> None:
    sandbox = ToolSandbox(settings.paths.root, "bubblewrap")
    assert sandbox.status().describe().startswith("none (bubblewrap is not installed")
    tool = make_terminal_tool(settings.paths.root, sandbox=sandbox)
    with pytest.raises(SandboxUnavailable, match="CLAWLET_SANDBOX=bubblewrap requires it"):
        await tool.ainvoke({"command": "echo should-not-run > workspace/ran.txt"})
    assert not (settings.paths.workspace / "ran.txt").exists()


@pytest.mark.usefixtures("without_bubblewrap")
@pytest.mark.slow
def test_serve_without_bubblewrap_says_so_once_at_start(
    serve: list[ServeProcess], clawlet_home: Path
) -> None:
    proc = ServeProcess(clawlet_home)
    serve.append(proc)
    output = proc.output()
    assert output.splitlines()[0].endswith("· sandbox none (bubblewrap is not installed (no bwrap on PATH))")
    assert output.count("warning: no tool sandbox") == 1
    body = httpx.get(f"{proc.url}/health", timeout=30).json()
    assert body["sandbox"].startswith("none (") and body["checks"]["sandbox"]["status"] == "unavailable"

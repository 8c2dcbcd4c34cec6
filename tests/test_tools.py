"""The agent's tools, run for real: subprocesses, a loopback HTTP server, real files."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from langchain_core.tools import BaseTool

from clawlet.config import Settings
from clawlet.memory.stores import KnowledgeBase
from clawlet.tools.base import ToolError
from clawlet.tools.fetch_url import make_fetch_tool
from clawlet.tools.knowledge import NO_RESULTS, make_knowledge_tool
from clawlet.tools.python_repl import make_python_tool
from clawlet.tools.read_file import make_read_file_tool
from clawlet.tools.registry import TOOL_NAMES, build_tools
from clawlet.tools.terminal import blocked_reason, make_terminal_tool
from tests.conftest import host_processes_with, parent_pid


def pid_gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def wait_for(predicate: object, timeout: float = 5.0) -> bool:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


# --- terminal ---------------------------------------------------------------------------------


async def test_terminal_runs_in_the_clawlet_home(settings: Settings) -> None:
    tool = make_terminal_tool(settings.paths.root)
    assert await tool.ainvoke({"command": "pwd"}) == str(settings.paths.root)
    assert await tool.ainvoke({"command": "ls workspace"}) == "AGENTS.md\nIDENTITY.md\nSOUL.md\nUSER.md"
    assert await tool.ainvoke({"command": "echo out; echo err >&2"}) == "out\nerr"
    assert await tool.ainvoke({"command": "exit 3"}) == "[exit code 3]"
    assert await tool.ainvoke({"command": "true"}) == "(no output)"
    assert await tool.ainvoke({"command": "echo 你好"}) == "你好"


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /",
        "rm -rf / ",
        "rm -fr /",
        "rm -r -f /",
        "rm -rf ~",
        "sudo rm -rf /*",
        "mkfs.ext4 /dev/sda",
        "mkfs /dev/sdb1",
        "shutdown -h now",
        "reboot",
        ":(){ :|:& };:",
        "echo ok && :(){ :|: & }; :",
        "dd if=/dev/zero of=/dev/sda",
    ],
)
async def test_terminal_blacklist_refuses(settings: Settings, command: str) -> None:
    marker = settings.paths.root / "still-here"
    marker.write_text("x")
    tool = make_terminal_tool(settings.paths.root)
    assert blocked_reason(command) is not None
    with pytest.raises(ToolError, match="refused by the safety blacklist"):
        await tool.ainvoke({"command": command})
    assert marker.exists()


def test_blacklist_word_boundaries() -> None:
    assert blocked_reason("rm -rf build/") is None
    assert blocked_reason("ls /") is None
    assert blocked_reason("cat mkfsnotes.txt") is None
    assert blocked_reason("echo shutdown_notes.txt") is None
    assert blocked_reason("rm -f ./x") is None


async def run_watching(
    tool: BaseTool, arguments: dict[str, str], marker: str
) -> tuple[str, dict[int, int | None]]:
    """Run the tool; also the host PIDs seen meanwhile whose command line holds ``marker`` (the
    tool's processes, found from outside whether or not it runs in a sandbox), with their parents."""
    task = asyncio.ensure_future(tool.ainvoke(arguments))
    seen: dict[int, int | None] = {}
    while not task.done():
        for pid in host_processes_with(marker):
            seen.setdefault(pid, parent_pid(pid))
        await asyncio.sleep(0.02)
    return await task, seen


@pytest.mark.slow
async def test_terminal_timeout_kills_the_command_and_its_children(settings: Settings) -> None:
    tool = make_terminal_tool(settings.paths.root, timeout=2)
    marker = f"1000.{secrets.randbelow(10**9)}"  # a unique sleep duration to find the processes by
    output, seen = await run_watching(tool, {"command": f"sleep {marker} & echo partial; wait"}, marker)
    assert "[timed out after 2 s; the command was killed]" in output
    assert "partial" in output
    assert seen, "the command's processes were never seen running"
    assert wait_for(lambda: not host_processes_with(marker)), "processes survived the timeout"


async def test_terminal_output_is_capped(settings: Settings) -> None:
    tool = make_terminal_tool(settings.paths.root)
    output = await tool.ainvoke({"command": "head -c 12000 /dev/zero | tr '\\0' x"})
    assert output.startswith("x" * 5000)
    assert output[5000:] == "\n... [output truncated: 7000 more characters]"


@pytest.mark.slow
async def test_terminal_endless_output_is_capped_and_the_timeout_still_reported(settings: Settings) -> None:
    tool = make_terminal_tool(settings.paths.root, timeout=1)
    output = await tool.ainvoke({"command": "yes"})
    assert output.startswith("y\ny\n")
    assert "\n... [output truncated: " in output
    assert output.endswith("\n[timed out after 1 s; the command was killed]")
    assert len(output) < 5200
    failing = await make_terminal_tool(settings.paths.root).ainvoke({"command": "yes | head -n 4000; exit 4"})
    assert failing.endswith("more characters]\n[exit code 4]")


async def test_terminal_environment_is_scrubbed(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-openai-123")
    monkeypatch.setenv("SOME_TOKEN", "tok-fake-456")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-fake-789")
    monkeypatch.setenv("CLAWLET_API_TOKEN", "clawlet-fake-000")
    tool = make_terminal_tool(settings.paths.root)
    output = await tool.ainvoke({"command": "env"})
    for secret in ("sk-fake-openai-123", "tok-fake-456", "aws-fake-789", "clawlet-fake-000"):
        assert secret not in output
    variables = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    assert variables["HOME"] == str(settings.paths.root)
    assert "PATH" in variables
    assert "OPENAI_API_KEY" not in variables and "SOME_TOKEN" not in variables
    assert await tool.ainvoke({"command": "cd ~ && pwd"}) == str(settings.paths.root)


# --- python_repl ------------------------------------------------------------------------------


async def test_python_runs_in_a_separate_process(settings: Settings) -> None:
    tool = make_python_tool(settings.paths.root)
    child = int(await tool.ainvoke({"code": "import os\nos.getpid()"}))
    assert child != os.getpid()
    assert await tool.ainvoke({"code": "import os\nos.getcwd()"}) == repr(str(settings.paths.root))
    # State never leaks between calls: each call is a fresh interpreter.
    await tool.ainvoke({"code": "x = 5"})
    assert "NameError" in await tool.ainvoke({"code": "x"})


async def test_python_prints_the_final_expression(settings: Settings) -> None:
    tool = make_python_tool(settings.paths.root)
    assert await tool.ainvoke({"code": "1 + 1"}) == "2"
    assert await tool.ainvoke({"code": "print('a')\n'b'"}) == "a\n'b'"
    assert await tool.ainvoke({"code": "None"}) == "(no output)"
    assert await tool.ainvoke({"code": "x = 3"}) == "(no output)"
    assert await tool.ainvoke({"code": "print('中文')"}) == "中文"


async def test_python_reports_exceptions(settings: Settings) -> None:
    tool = make_python_tool(settings.paths.root)
    output = await tool.ainvoke({"code": "1 / 0"})
    assert "ZeroDivisionError: division by zero" in output
    assert output.endswith("[exit code 1]")
    syntax = await tool.ainvoke({"code": "def broken(:"})
    assert "SyntaxError" in syntax and "[exit code 1]" in syntax


@pytest.mark.slow
async def test_python_timeout_kills_the_process(settings: Settings) -> None:
    tool = make_python_tool(settings.paths.root, timeout=2)
    marker = f"1000.{secrets.randbelow(10**9)}"
    code = (
        f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\n"
        "print('begun', flush=True)\ntime.sleep(30)"
    )
    output, seen = await run_watching(tool, {"code": code}, marker)
    assert "[timed out after 2 s; the process was killed]" in output
    assert "begun" in output
    assert seen, "the child process was never seen running"
    parents = {parent for parent in seen.values() if parent is not None}
    assert parents
    assert wait_for(lambda: not host_processes_with(marker)), "the child survived the timeout"
    assert all(wait_for(lambda pid=pid: pid_gone(pid)) for pid in parents), "python survived the timeout"


async def test_python_environment_is_scrubbed(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-openai-123")
    tool = make_python_tool(settings.paths.root)
    output = await tool.ainvoke({"code": "import os\ndict(os.environ)"})
    assert "sk-fake-openai-123" not in output
    assert await tool.ainvoke({"code": "import os\nos.environ['HOME']"}) == repr(str(settings.paths.root))


async def test_python_output_is_capped(settings: Settings) -> None:
    tool = make_python_tool(settings.paths.root)
    output = await tool.ainvoke({"code": "print('y' * 9000)"})
    assert output == "y" * 5000 + "\n... [output truncated: 4000 more characters]"


# --- fetch_url --------------------------------------------------------------------------------


SLOW_RELEASE = threading.Event()
"""``/slow`` answers only once this is set (or after a minute): the client's timeout ends first."""


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, str, bytes]]] = {
        "/data.json": (200, "application/json", b'{"city":"\xe5\x8c\x97\xe4\xba\xac","temp":21,"ok":true}'),
        "/page.html": (
            200,
            "text/html; charset=utf-8",
            b"<html><head><title>T</title></head><body><h1>Hello Page</h1>"
            b"<p>Some <b>bold</b> text and a <a href='/x'>link</a>.</p><img src='a.png'></body></html>",
        ),
        "/plain.txt": (200, "text/plain", b"just text"),
        "/big.txt": (200, "text/plain", b"z" * 20_000),
        "/broken.json": (200, "application/json", b"{not json"),
        "/empty": (200, "text/plain", b""),
    }

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/plain.txt")
            self.end_headers()
            return
        status, content_type, body = self.routes.get(self.path, (404, "text/plain", b"no such page"))
        if self.path == "/slow":
            SLOW_RELEASE.wait(60)
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (``/slow``)
            return

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def http_base() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


async def test_fetch_pretty_prints_json(http_base: str) -> None:
    output = await make_fetch_tool().ainvoke({"url": f"{http_base}/data.json"})
    assert output == json.dumps({"city": "北京", "temp": 21, "ok": True}, ensure_ascii=False, indent=2)
    assert await make_fetch_tool().ainvoke({"url": f"{http_base}/broken.json"}) == "{not json"


async def test_fetch_converts_html_to_markdown(http_base: str) -> None:
    output = await make_fetch_tool().ainvoke({"url": f"  {http_base}/page.html  "})
    assert "# Hello Page" in output
    assert "**bold**" in output
    assert "[link](/x)" in output
    assert "<p>" not in output and "a.png" not in output


async def test_fetch_flags_http_errors_and_follows_redirects(http_base: str) -> None:
    missing = await make_fetch_tool().ainvoke({"url": f"{http_base}/missing"})
    assert missing == "[HTTP 404]\nno such page"
    assert await make_fetch_tool().ainvoke({"url": f"{http_base}/redirect"}) == "just text"
    assert await make_fetch_tool().ainvoke({"url": f"{http_base}/empty"}) == "(empty response)"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "javascript:alert(1)", "127.0.0.1"]
)
async def test_fetch_refuses_other_schemes(url: str) -> None:
    with pytest.raises(ToolError, match="only http:// and https://"):
        await make_fetch_tool().ainvoke({"url": url})


async def test_fetch_caps_output_and_times_out(http_base: str) -> None:
    output = await make_fetch_tool().ainvoke({"url": f"{http_base}/big.txt"})
    assert output == "z" * 5000 + "\n... [output truncated: 15000 more characters]"
    SLOW_RELEASE.clear()
    try:  # the server does not answer until released: only the tool's timeout ends the wait
        with pytest.raises(ToolError, match=r"timed out after 0\.5 s"):
            await make_fetch_tool(timeout=0.5).ainvoke({"url": f"{http_base}/slow"})
    finally:
        SLOW_RELEASE.set()


async def test_fetch_reports_unreachable_hosts() -> None:
    from tests.conftest import free_port

    with pytest.raises(ToolError, match="could not fetch"):
        await make_fetch_tool(timeout=2).ainvoke({"url": f"http://127.0.0.1:{free_port()}/"})


# --- read_file --------------------------------------------------------------------------------


def test_read_file_reads_and_lists(settings: Settings) -> None:
    tool = make_read_file_tool(settings.paths.root)
    soul = (settings.paths.workspace / "SOUL.md").read_text(encoding="utf-8")
    assert tool.invoke({"path": "workspace/SOUL.md"}) == soul
    assert tool.invoke({"path": str(settings.paths.workspace / "SOUL.md")}) == soul
    assert tool.invoke({"path": "skills"}) == "get_weather/"
    assert tool.invoke({"path": "workspace/"}) == "AGENTS.md\nIDENTITY.md\nSOUL.md\nUSER.md"
    (settings.paths.root / "emptydir").mkdir()
    assert tool.invoke({"path": "emptydir"}) == "(empty directory)"
    assert "workspace/" in tool.invoke({"path": "."}).splitlines()


def test_read_file_refuses_paths_outside_the_home(settings: Settings) -> None:
    root = settings.paths.root
    outside = root.parent / "outside.txt"
    outside.write_text("secret outside", encoding="utf-8")
    (root / "escape.txt").symlink_to(outside)
    (root / "escape_dir").symlink_to(root.parent)
    tool = make_read_file_tool(root)
    for bad in (
        "../outside.txt",
        "../outside",
        "workspace/../../outside.txt",
        str(outside),
        "/etc/passwd",
        "escape.txt",
        "escape_dir/outside.txt",
        "~/../outside.txt",
        "workspace/\x00x",
    ):
        with pytest.raises(ToolError) as info:
            tool.invoke({"path": bad})
        assert "secret outside" not in str(info.value)
    with pytest.raises(ToolError, match="file not found"):
        tool.invoke({"path": "workspace/none.md"})


def test_read_file_caps_and_refuses_binary(settings: Settings) -> None:
    root = settings.paths.root
    (root / "big.md").write_text("字" * 25_000, encoding="utf-8")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    tool = make_read_file_tool(root)
    assert (
        tool.invoke({"path": "big.md"}) == "字" * 10_000 + "\n... [output truncated: 15000 more characters]"
    )
    with pytest.raises(ToolError, match="binary"):
        tool.invoke({"path": "blob.bin"})


# --- search_knowledge_base and the registry ---------------------------------------------------


def test_knowledge_search_says_clearly_when_nothing_matches(settings: Settings) -> None:
    knowledge = KnowledgeBase(settings.paths, None)
    tool = make_knowledge_tool(knowledge)
    assert tool.invoke({"query": "quixotic zebra xylophone"}) == NO_RESULTS
    (settings.paths.knowledge / "tea.md").write_text("# 茶\n\n西湖龙井是绿茶，产自杭州。\n", encoding="utf-8")
    found = tool.invoke({"query": "龙井产自哪里"})
    assert found.startswith("[1] knowledge/tea.md (score ")
    assert "西湖龙井是绿茶" in found


def test_registry_builds_every_tool(settings: Settings) -> None:
    tools = build_tools(settings, KnowledgeBase(settings.paths, None))
    assert tuple(tool.name for tool in tools) == TOOL_NAMES
    assert all(tool.description for tool in tools)

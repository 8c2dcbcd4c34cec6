"""The ``clawlet`` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawlet import __version__
from clawlet.cli import main
from clawlet.config import is_loopback
from tests.support.transcripts import calls_shown


def clawlet(*args: str, home: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CLAWLET_HOME": str(home), "PYTHONUNBUFFERED": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "clawlet", *args],
        env=environment,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )


EXPECTED_FILES = (
    "workspace/SOUL.md",
    "workspace/IDENTITY.md",
    "workspace/USER.md",
    "workspace/AGENTS.md",
    "memory/MEMORY.md",
    "skills/get_weather/SKILL.md",
    "SKILLS_SNAPSHOT.md",
    "knowledge/README.md",
)


@pytest.mark.slow
def test_init_creates_the_home_and_never_overwrites(clawlet_home: Path) -> None:
    first = clawlet("init", home=clawlet_home)
    assert first.returncode == 0, first.stderr
    assert f"clawlet home: {clawlet_home.resolve()}" in first.stdout
    for relative in EXPECTED_FILES:
        assert (clawlet_home / relative).is_file(), relative
    for directory in ("knowledge", "sessions", "sessions/archive", "storage"):
        assert (clawlet_home / directory).is_dir(), directory
    assert "created workspace/SOUL.md" in first.stdout
    assert "<name>get_weather</name>" in (clawlet_home / "SKILLS_SNAPSHOT.md").read_text(encoding="utf-8")

    soul = clawlet_home / "workspace" / "SOUL.md"
    soul.write_text("# My own soul\n", encoding="utf-8")
    memory = clawlet_home / "memory" / "MEMORY.md"
    memory.write_text("- 我的记忆\n", encoding="utf-8")
    (clawlet_home / "workspace" / "USER.md").unlink()

    second = clawlet("init", home=clawlet_home)
    assert second.returncode == 0, second.stderr
    assert soul.read_text(encoding="utf-8") == "# My own soul\n"
    assert memory.read_text(encoding="utf-8") == "- 我的记忆\n"
    assert "created workspace/USER.md" in second.stdout  # only the missing file is recreated
    assert "created workspace/SOUL.md" not in second.stdout

    third = clawlet("init", home=clawlet_home)
    assert "nothing overwritten" in third.stdout


def test_init_with_the_home_flag(
    tmp_path: Path, clawlet_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "elsewhere"
    assert main(["--home", str(other), "init"]) == 0
    assert (other / "workspace" / "SOUL.md").is_file()
    assert str(other.resolve()) in capsys.readouterr().out
    assert not clawlet_home.exists()


@pytest.mark.slow
def test_serve_refuses_a_public_host_without_a_token(clawlet_home: Path) -> None:
    result = clawlet("serve", "--host", "0.0.0.0", "--port", "1", home=clawlet_home, timeout=30)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "refusing to listen on 0.0.0.0 without a token" in result.stderr
    assert "CLAWLET_API_TOKEN" in result.stderr
    assert not (clawlet_home / "workspace").exists()  # refused before touching anything


def test_serve_host_check_in_process(clawlet_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for host in ("192.168.1.10", "::", "example.com"):
        assert main(["serve", "--host", host, "--port", "1"]) == 2
        assert f"refusing to listen on {host}" in capsys.readouterr().err
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"):
        assert is_loopback(host), host
    assert not is_loopback("0.0.0.0")


def test_serve_reports_incomplete_provider_settings(
    clawlet_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLAWLET_PROVIDER", "openai")
    assert main(["serve", "--port", "1"]) == 2
    assert "CLAWLET_LLM_MODEL" in capsys.readouterr().err


@pytest.mark.slow
def test_chat_prints_the_tool_call_and_saves_the_session(clawlet_home: Path) -> None:
    result = clawlet("chat", "--session", "cli1", "-m", "run: echo hi", "-m", "你好", home=clawlet_home)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "model demo (offline demo model, no LLM) · session cli1" in out
    assert "> run: echo hi" in out
    assert "⚙ terminal: echo hi" in out
    assert "  → hi\n" in out
    assert "[title: echo hi]" in out
    assert "> 你好" in out
    data = json.loads((clawlet_home / "sessions" / "cli1.json").read_text(encoding="utf-8"))
    assert data["title"] == "echo hi"
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "assistant", "user", "assistant"]
    assert calls_shown(data["messages"][1]["tool_calls"]) == [
        {"tool": "terminal", "input": "echo hi", "output": "hi"}
    ]

    again = clawlet("chat", "--session", "cli1", "-m", "python: 2 ** 10", home=clawlet_home)
    assert again.returncode == 0, again.stderr
    assert "⚙ python_repl: 2 ** 10" in again.stdout and "→ 1024" in again.stdout
    assert "[title:" not in again.stdout  # only the first turn is titled
    data = json.loads((clawlet_home / "sessions" / "cli1.json").read_text(encoding="utf-8"))
    assert len(data["messages"]) == 8


def test_chat_without_a_session_creates_a_new_one(
    clawlet_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chat", "-m", "hello"]) == 0
    (path,) = (clawlet_home / "sessions").glob("*.json")
    out = capsys.readouterr().out
    assert f"session {path.stem}" in out
    assert "You said: “hello”" in out


@pytest.mark.slow
def test_interactive_chat_reads_stdin_until_exit(clawlet_home: Path) -> None:
    environment = {**os.environ, "CLAWLET_HOME": str(clawlet_home)}
    result = subprocess.run(
        [sys.executable, "-m", "clawlet", "chat", "--session", "tty"],
        input="run: echo interactive\n\n/exit\n",
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "→ interactive" in result.stdout
    data = json.loads((clawlet_home / "sessions" / "tty.json").read_text(encoding="utf-8"))
    assert data["messages"][0]["content"] == "run: echo interactive"


@pytest.mark.slow
def test_version_and_usage(clawlet_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = clawlet("--version", home=clawlet_home)
    assert result.returncode == 0
    assert result.stdout.strip() == f"clawlet {__version__}"
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: clawlet" in capsys.readouterr().err


def test_exec_plane_names_the_settings_it_lacks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("VM_TOKEN", "VM_TICKET", "CONTROL_PLANE_WS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("USER_ID", "u1")
    assert main(["exec-plane"]) == 2
    assert "missing: VM_TOKEN, CONTROL_PLANE_WS" in capsys.readouterr().err

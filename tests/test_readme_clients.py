"""README's *Clients* snippets run as written against a real ``clawlet serve`` (demo model).

Each snippet is the fenced block after an ``<!-- client-snippet: NAME -->`` marker in README.md; only
its address changes (``127.0.0.1:8002`` becomes the test server's port, the OpenClaw gateway's
``ws://127.0.0.1:18789`` its ``/gateway``). Python snippets run with this interpreter, JavaScript
ones with node in tests/clients (the real npm ``openai``, ``ai``, ``@ai-sdk/openai``), the OpenClaw
one with bash and the real ``openclaw`` CLI. A snippet that is removed or breaks fails its test.
Open WebUI cannot run here: its settings snippet is checked and the requests it sends are made.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from clawlet.config import Settings
from clawlet.home import init_home
from tests.conftest import LiveServer
from tests.support.node_clients import run_node_script
from tests.support.openclaw_gateway import real_openclaw
from tests.test_openwebui_tasks import CHAT_ID, OWUI_HEADERS, TITLE_TEMPLATE, task_body, task_prompt

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

README = Path(__file__).resolve().parents[1] / "README.md"
PLACEHOLDER = "127.0.0.1:8002"
GATEWAY_PLACEHOLDER = "ws://127.0.0.1:18789"
SNIPPET = re.compile(r"<!-- client-snippet: ([\w-]+)( untested)? -->\n```(\w+)\n(.*?)\n```\n", re.S)
CLIENTS = {"openai-python", "openai-node", "ai-sdk", "langchain", "litellm", "open-webui", "openclaw"}
REAL_OPENCLAW = real_openclaw()  # at import: the autouse ``clawlet_home`` fixture removes CLAWLET_*


@dataclass(frozen=True)
class Snippet:
    """One README client snippet: its fence language, code, and whether README calls it untested."""

    language: str
    code: str
    untested: bool

    def for_server(self, server: LiveServer) -> str:
        """The code with the README's address replaced by ``server``'s."""
        assert PLACEHOLDER in self.code or GATEWAY_PLACEHOLDER in self.code, self.code
        code = self.code.replace(GATEWAY_PLACEHOLDER, f"ws://127.0.0.1:{server.port}/gateway")
        return code.replace(PLACEHOLDER, f"127.0.0.1:{server.port}")


def snippets() -> dict[str, Snippet]:
    """README's client snippets by name (each name once)."""
    found: dict[str, Snippet] = {}
    for match in SNIPPET.finditer(README.read_text(encoding="utf-8")):
        name, untested, language, code = match.groups()
        assert name not in found, f"two README snippets named {name}"
        found[name] = Snippet(language, code, untested is not None)
    return found


def snippet(name: str) -> Snippet:
    found = snippets()
    if name not in found:
        pytest.fail(f"README.md has no `<!-- client-snippet: {name} -->` block")
    return found[name]


def run_python(code: str, env: dict[str, str] | None = None) -> str:
    """Run a Python snippet with this interpreter (clawlet's venv), ``env`` added to the
    environment; what it printed."""
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-2000:]
    return completed.stdout


def transcript(settings: Settings, session_id: str) -> list[tuple[str, str]]:
    """(role, content) of a stored session's messages."""
    stored = json.loads((settings.paths.sessions / f"{session_id}.json").read_text(encoding="utf-8"))
    return [(m["role"], str(m["content"])) for m in stored["messages"]]


def test_readme_has_a_snippet_for_every_client() -> None:
    found = snippets()
    assert set(found) == CLIENTS
    assert [name for name, s in found.items() if s.untested] == []  # each one runs below
    assert "(#the-openai-compatible-api-v1)" in README.read_text(encoding="utf-8")  # the field table


def test_openai_python_snippet(server: LiveServer) -> None:
    out = run_python(snippet("openai-python").for_server(server))
    streamed, parsed = out.splitlines()[:2]
    assert "[demo]" in streamed and "hello" in streamed, out
    assert parsed.startswith("name=") and "country=" in parsed, out  # the pydantic object
    roles = [role for role, _ in transcript(server.settings, "readme-python")]
    assert roles == ["user", "assistant", "user", "assistant"]  # one session for both calls


def test_openai_node_snippet(server: LiveServer) -> None:
    out = run_node_script(snippet("openai-node").for_server(server), timeout=300)
    assert "`get_weather` returned" in out and "Sunny, 21°C" in out, out


def test_ai_sdk_snippet(server: LiveServer) -> None:
    out = run_node_script(snippet("ai-sdk").for_server(server), timeout=300).splitlines()
    assert "[demo]" in out[0] and "hello" in out[0], out  # the Responses API
    assert "[demo]" in out[1] and "and again" in out[1], out  # streamed, continuing it
    sessions = [transcript(server.settings, p.stem) for p in server.settings.paths.sessions.glob("*.json")]
    assert [("user", "hello"), ("user", "and again")] in [
        [(role, text) for role, text in messages if role == "user"] for messages in sessions
    ]  # previousResponseId kept the Responses turns in one clawlet session
    assert any("`get_weather` returned" in line for line in out), out
    assert "Sunny in Paris" in "\n".join(out), out  # the tool ran in Node and its result came back


def test_langchain_snippet(server: LiveServer) -> None:
    out = run_python(snippet("langchain").for_server(server)).splitlines()
    assert "[demo]" in out[0] and "hello" in out[0], out
    assert out[1].startswith("name=") and "country=" in out[1], out
    assert "'name': 'get_weather'" in out[2] and "'args': {'city': 'Paris'}" in out[2], out
    assert transcript(server.settings, "readme-langchain")[0] == ("user", "hello")


def test_litellm_snippet(server: LiveServer) -> None:
    # offline: LiteLLM would fetch its model price list from the internet at import
    out = run_python(snippet("litellm").for_server(server), env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert out.count("[demo]") == 2, out


def test_open_webui_settings_and_requests(live_server: Callable[..., LiveServer]) -> None:
    """What Open WebUI does with the README's settings: list the models with the key, then a chat
    (streamed, the forwarded user headers), its title task, and the next message: one session."""
    code = snippet("open-webui").code
    env = dict(line.split("=", 1) for line in code.splitlines() if line.strip())
    assert env["ENABLE_FORWARD_USER_INFO_HEADERS"] == "true"
    settings = Settings(api_token=env["OPENAI_API_KEY"])
    init_home(settings.paths)
    server = live_server(settings)
    base = Snippet("sh", env["OPENAI_API_BASE_URL"], False).for_server(server)
    auth = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
    with httpx.Client(base_url=base, headers={**auth, **OWUI_HEADERS}, timeout=120) as client:
        assert httpx.get(f"{base}/models", timeout=60).status_code == 401  # the key is needed
        assert [m["id"] for m in client.get("/models").json()["data"]] == ["clawlet"]
        first = [{"role": "user", "content": "hello from open webui"}]
        chat = {"model": "clawlet", "stream": True, "stream_options": {"include_usage": True}}
        answer = client.post("/chat/completions", json={**chat, "messages": first})
        assert answer.status_code == 200 and answer.headers["x-session-id"] == CHAT_ID
        text = "".join(
            json.loads(line[5:])["choices"][0]["delta"].get("content") or ""
            for line in answer.text.splitlines()
            if line.startswith("data: {") and json.loads(line[5:])["choices"]
        )
        assert "hello from open webui" in text, answer.text
        history = [("user", first[0]["content"]), ("assistant", text)]
        title = client.post("/chat/completions", json=task_body(task_prompt(TITLE_TEMPLATE, history)))
        assert json.loads(title.json()["choices"][0]["message"]["content"])["title"], title.text
        second = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "and again"}]
        again = client.post("/chat/completions", json={**chat, "messages": second})
        assert again.status_code == 200 and again.headers["x-session-id"] == CHAT_ID
    users = [content for role, content in transcript(settings, CHAT_ID) if role == "user"]
    assert users == ["hello from open webui", "and again"]  # no task prompt in the chat's session
    assert sorted(p.stem for p in settings.paths.sessions.glob("*.json")) == [CHAT_ID]


@REAL_OPENCLAW.skip
def test_openclaw_cli_snippet(tmp_path: Path, live_server: Callable[..., LiveServer]) -> None:
    """The shell snippet with the real ``openclaw`` CLI on PATH, in a fresh HOME."""
    install = REAL_OPENCLAW.require()
    code = snippet("openclaw").code
    token = re.search(r'"token": "([^"]+)"', code)
    assert token, code
    settings = Settings(home=tmp_path / "clawlet-home", gateway_token=token.group(1))
    init_home(settings.paths)
    server = live_server(settings)
    home = tmp_path / "user"
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "openclaw"
    wrapper.write_text(f'#!/bin/sh\nexec "{install.node}" "{install.entry}" "$@"\n', encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = install.base_env(home)
    for name in ("OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH"):  # the snippet's ~/.openclaw is used
        env.pop(name)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", Snippet("sh", code, False).for_server(server)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-2000:]
    assert "hello from openclaw" in completed.stdout, completed.stdout[-2000:]  # the demo model's echo
    assert ("user", "hello from openclaw") in transcript(settings, "main")


def test_snippet_markers_are_found_as_written() -> None:
    """The marker pattern itself: a block after a marker is one snippet, an unmarked one is not."""
    text = "<!-- client-snippet: x -->\n```sh\necho 127.0.0.1:8002\n```\n\n```sh\nnot me\n```\n"
    assert [m.group(1, 3, 4) for m in SNIPPET.finditer(text)] == [("x", "sh", "echo 127.0.0.1:8002")]

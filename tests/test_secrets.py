"""Secrets out of the tools' reach: a real ``clawlet serve`` keeps no key in ``/proc/<pid>/environ``
(they are moved into memory by a re-exec, see ``clawlet.secret_env``), Settings still gets them, and
a secret that shows up in a tool's output is masked before it is streamed, stored or sent on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from clawlet import secret_env
from clawlet.config import Settings
from clawlet.engine.masking import REDACTED, SecretMasker
from clawlet.testing.scripted_openai import (
    JSONDict,
    ScriptedOpenAIServer,
    ToolCall,
    Turn,
    text_turn,
    tool_turn,
)
from tests.conftest import LiveServer, free_port, parse_sse

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-0penAiK3y-distinct",
    "DEEPSEEK_API_KEY": "sk-deepseek-D33pS33k-distinct",
    "ANTHROPIC_API_KEY": "sk-ant-Anthr0p1c-distinct",
    "API_KEY": "api-key-Al1as-distinct",
    "CLAWLET_API_TOKEN": "clawlet-token-T0k3n-distinct",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-Aw5Aw5Aw5-distinct",
}


def initial_environ(pid: int) -> str:
    """The environment ``pid`` was started with, as the kernel shows it to every process of the user."""
    return Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")


def leaked(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def environment_without_secrets() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not secret_env.is_secret_name(name)}


# -- which variables are secrets -------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        *SECRETS,
        "CLAWLET_LLM_API_KEY",
        "CLAWLET_API_KEYS",
        "API_KEYS",
        "OPENCLAW_GATEWAY_TOKEN",
        "CLAWLET_GATEWAY_TOKEN",
        "CLAWLET_CP_JWT_SECRET",
        "DATABASE_URL",
        "CLAWLET_CP_DATABASE_URL",
        "CLAWLET_REDIS_URL",
        "VM_TOKEN",
        "VM_TICKET",
        "GITHUB_TOKEN",
        "PGPASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SENTRY_DSN",
        "my_service_api_key",
    ],
)
def test_secret_names(name: str) -> None:
    assert secret_env.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["PATH", "HOME", "CLAWLET_HOME", "CLAWLET_SECRETS_FD", "DEEPSEEK_BASE_URL", "TOKENIZERS_PARALLELISM"],
)
def test_ordinary_names(name: str) -> None:
    assert not secret_env.is_secret_name(name)


# -- the re-exec -----------------------------------------------------------------------------

REEXEC_PROGRAM = """
import json, os, sys
with open(sys.argv[1], "a", encoding="utf-8") as starts:
    starts.write(f"{os.getpid()}\\n")
from clawlet import secret_env
fd = os.environ.get(secret_env.SECRETS_FD_VAR)
secret_env.receive_secrets()
secret_env.move_secrets_to_memory()
print(json.dumps({
    "pid": os.getpid(),
    "initial": open("/proc/self/environ", "rb").read().decode(),
    "held": dict(secret_env.held_secrets()),
    "environ": dict(os.environ),
    "fd_still_open": fd is not None and os.path.exists(f"/proc/self/fd/{fd}"),
}))
"""


@pytest.fixture(params=["-c", "script"])
def reexec_command(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Path], list[str]]:
    """``python -c PROGRAM`` or ``python program.py`` (as the ``clawlet`` console script runs)."""
    if request.param == "-c":
        return lambda starts: [sys.executable, "-c", REEXEC_PROGRAM, str(starts)]
    script = tmp_path / "program.py"
    script.write_text(REEXEC_PROGRAM, encoding="utf-8")
    return lambda starts: [sys.executable, str(script), str(starts)]


def test_the_process_restarts_once_with_the_secrets_in_memory_only(
    tmp_path: Path, reexec_command: Callable[[Path], list[str]]
) -> None:
    starts = tmp_path / "starts.txt"
    env = {**environment_without_secrets(), **SECRETS, "PLAIN_SETTING": "kept"}
    result = subprocess.run(
        reexec_command(starts), env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert starts.read_text(encoding="utf-8").split() == [str(report["pid"])] * 2  # once, same pid
    assert leaked(report["initial"]) == []
    assert report["held"] == SECRETS
    assert not set(SECRETS) & set(report["environ"])  # not put back for children to inherit
    assert secret_env.SECRETS_FD_VAR not in report["environ"]
    assert report["environ"]["PLAIN_SETTING"] == "kept"
    assert not report["fd_still_open"]
    assert result.stderr == ""


def test_no_restart_without_secrets(tmp_path: Path, reexec_command: Callable[[Path], list[str]]) -> None:
    starts = tmp_path / "starts.txt"
    result = subprocess.run(
        reexec_command(starts),
        env=environment_without_secrets(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(starts.read_text(encoding="utf-8").split()) == 1
    assert json.loads(result.stdout)["held"] == {}


@pytest.fixture
def fresh_secret_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as if it had not received or moved any secret (restored afterwards)."""
    monkeypatch.setattr(secret_env, "_held", {})
    monkeypatch.setattr(secret_env, "_received", False)


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.usefixtures("fresh_secret_state")
def test_a_failed_exec_carries_on_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"]}
    before = open_descriptors()
    secret_env.move_secrets_to_memory(
        command_line=["python", "-m", "clawlet", "serve"], executable="/nonexistent/python", environ=env
    )  # the real os.execve: it fails, and this process goes on
    assert "cannot restart without the secrets in the environment" in capsys.readouterr().err
    assert env == {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"]}
    assert open_descriptors() == before  # the pipe is closed again
    assert secret_env.held_secrets() == {}


@pytest.mark.usefixtures("fresh_secret_state")
def test_a_restarted_image_never_restarts_again(capsys: pytest.CaptureFixture[str]) -> None:
    """Even when the pipe cannot be read (here: a descriptor that is not open), the image that was
    started by the re-exec does not exec again: no loop."""
    env = {secret_env.SECRETS_FD_VAR: "987654", "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"]}
    secret_env.receive_secrets(env)
    assert "cannot read the secrets" in capsys.readouterr().err
    execs: list[object] = []
    secret_env.move_secrets_to_memory(environ=env, execve=lambda *args: execs.append(args))
    assert execs == []
    assert secret_env.SECRETS_FD_VAR not in env


# -- Settings read the held secrets ----------------------------------------------------------


def test_settings_read_the_held_secrets_between_the_environment_and_dotenv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        secret_env,
        "_held",
        {
            "DEEPSEEK_API_KEY": "held-deepseek-key",
            "CLAWLET_API_TOKEN": "held-api-token",
            "API_KEYS": "aaaaaaaa1,b",
        },
    )
    (tmp_path / ".env").write_text("DEEPSEEK_API_KEY=dotenv-deepseek\nOPENAI_API_KEY=dotenv-openai\n")
    settings = Settings()
    assert settings.deepseek_api_key == "held-deepseek-key"  # above .env
    assert settings.openai_api_key == "dotenv-openai"
    assert settings.accepted_tokens == ["held-api-token", "aaaaaaaa1", "b"]
    assert settings.resolved_provider == "deepseek"
    assert {"held-deepseek-key", "held-api-token", "dotenv-openai", "aaaaaaaa1"} <= settings.secret_values
    monkeypatch.setenv("DEEPSEEK_API_KEY", "env-deepseek")
    assert Settings().deepseek_api_key == "env-deepseek"  # the environment still wins


# -- masking ---------------------------------------------------------------------------------


def test_the_masker_replaces_whole_secrets_and_leaves_short_values() -> None:
    masker = SecretMasker(["sk-abcdefgh", "sk-abcdefgh-longer", "short"])
    assert masker.mask("a sk-abcdefgh-longer b sk-abcdefgh c short") == f"a {REDACTED} b {REDACTED} c short"
    blocks = [
        {"type": "text", "text": "x sk-abcdefgh"},
        "sk-abcdefgh",
        {"type": "image", "url": "sk-abcdefgh"},
    ]
    assert masker.mask_content(blocks) == [
        {"type": "text", "text": f"x {REDACTED}"},
        REDACTED,
        {"type": "image", "url": "sk-abcdefgh"},
    ]
    assert SecretMasker([]).mask("sk-abcdefgh") == "sk-abcdefgh"


def scripted_agent(body: JSONDict) -> Turn:
    """The model: ``run: CMD`` → a terminal call; ``read: PATH`` → a read_file call; ``call: TOOL
    {JSON}`` → any tool; after a tool
    result → a short answer; a title request (no tools offered) → a title."""
    if not body.get("tools"):
        return text_turn("Secrets")
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text_turn("The tool ran.")
    text = str(last["content"])
    if text.startswith("call: "):
        name, _, arguments = text.removeprefix("call: ").partition(" ")
        return tool_turn(ToolCall(name, json.loads(arguments)))
    if text.startswith("read: "):
        return tool_turn(ToolCall("read_file", {"path": text.removeprefix("read: ")}))
    return tool_turn(ToolCall("terminal", {"command": text.removeprefix("run: ")}))


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_agent) as server:
        yield server


def chat(url: str, session_id: str, message: str, token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.post(
        f"{url}/api/chat",
        json={"message": message, "session_id": session_id, "stream": True},
        headers=headers,
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.text


def tool_outputs(sse: str) -> list[str]:
    return [str(data["output"]) for name, data in parse_sse(sse) if name == "tool_end"]


def sent_to_model(llm: ScriptedOpenAIServer) -> str:
    return json.dumps(llm.requests)


def tool_results_sent_to_model(llm: ScriptedOpenAIServer) -> list[str]:
    return [
        str(message["content"])
        for request in llm.requests
        for message in request.get("messages", [])
        if message.get("role") == "tool"
    ]


def test_a_secret_in_a_tool_error_is_masked(
    live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer
) -> None:
    """The model asks for a file named after the key (say, one it saw listed): the error naming
    the path is masked wherever the tool's result goes; the model's own call is not tool output."""
    key = SECRETS["OPENAI_API_KEY"]
    settings = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", openai_api_key=key)
    server = live_server(settings)
    [output] = tool_outputs(chat(server.url, "err", f"read: no-such-{key}.txt"))
    assert output.startswith("Error from read_file") and f"no-such-{REDACTED}.txt" in output
    assert [result for result in tool_results_sent_to_model(llm) if key in result] == []
    stored = json.loads((settings.paths.sessions / "err.json").read_text(encoding="utf-8"))
    [call] = [call for message in stored["messages"] for call in message.get("tool_calls", [])]
    assert call["output"] == output


@pytest.mark.slow
def test_a_secret_in_an_mcp_tool_result_is_masked(
    live_server: Callable[..., LiveServer], llm: ScriptedOpenAIServer
) -> None:
    key = "SK-UPPER-CASE-0123456789"  # the model sends it in lower case; shout() returns the key + "!"
    settings = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", deepseek_api_key=key)
    server_script = Path(__file__).parent / "support" / "mcp_server.py"
    (settings.paths.root / "mcp.json").write_text(
        json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(server_script)]}}}),
        encoding="utf-8",
    )
    server = live_server(settings)
    sse = chat(server.url, "mcp", f'call: calc_shout {{"text": "{key.lower()}"}}')
    assert [output.strip() for output in tool_outputs(sse)] == [f"{REDACTED}!"]
    assert key not in sse
    assert [result for result in tool_results_sent_to_model(llm) if key in result] == []


# -- the real server -------------------------------------------------------------------------


class SecretServe:
    """``python -m clawlet serve`` with :data:`SECRETS` in its environment and a scripted model."""

    def __init__(self, home: Path, llm: ScriptedOpenAIServer) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home.parent / f"serve-{self.port}.log"
        env = {
            **os.environ,
            **SECRETS,
            "CLAWLET_HOME": str(home),
            "PYTHONUNBUFFERED": "1",
            "CLAWLET_PROVIDER": "openai",
            "CLAWLET_LLM_BASE_URL": llm.base_url,
            "CLAWLET_LLM_MODEL": "scripted-model",
        }
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "clawlet", "serve", "--port", str(self.port)],
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"clawlet serve did not start:\n{self.output()}")
            time.sleep(0.1)

    def answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/status", headers=self.auth(), timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {SECRETS['CLAWLET_API_TOKEN']}"}

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture
def secret_serve(clawlet_home: Path, llm: ScriptedOpenAIServer) -> Iterator[SecretServe]:
    serve = SecretServe(clawlet_home, llm)
    yield serve
    serve.close()


@pytest.mark.slow
def test_the_server_keeps_no_secret_in_its_environment_and_masks_them_in_tool_output(
    secret_serve: SecretServe, llm: ScriptedOpenAIServer, clawlet_home: Path
) -> None:
    pid = secret_serve.process.pid  # the listening process: the re-exec keeps the pid
    assert b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert leaked(initial_environ(pid)) == []
    assert secret_env.SECRETS_FD_VAR in initial_environ(pid)  # it was restarted with the pipe

    # Settings got the secrets through the pipe: the token guards the API, the key reaches the model
    assert httpx.get(f"{secret_serve.url}/api/status", timeout=10).status_code == 401
    status = httpx.get(f"{secret_serve.url}/api/status", headers=secret_serve.auth(), timeout=10)
    assert status.json()["model"]["provider"] == "openai"
    token = SECRETS["CLAWLET_API_TOKEN"]
    first = chat(secret_serve.url, "environ", f"run: cat /proc/$PPID/environ /proc/{pid}/environ", token)
    assert set(llm.authorizations) == {f"Bearer {SECRETS['OPENAI_API_KEY']}"}
    assert len(tool_outputs(first)) == 1
    assert leaked(first) == []

    # a tool printing the configured keys and other secrets: masked in the stream, the transcript
    # and what the model is sent
    (clawlet_home / "workspace" / "k.txt").write_text(
        "\n".join(f"{name}={value}" for name, value in SECRETS.items()), encoding="utf-8"
    )
    second = chat(secret_serve.url, "file", "run: cat workspace/k.txt", token)
    [output] = tool_outputs(second)
    assert output.splitlines() == [f"{name}={REDACTED}" for name in SECRETS]
    assert leaked(second) == []
    for transcript in (clawlet_home / "sessions").glob("*.json"):
        assert leaked(transcript.read_text(encoding="utf-8")) == [], transcript.name
    assert leaked(sent_to_model(llm)) == []
    assert leaked(secret_serve.output()) == []

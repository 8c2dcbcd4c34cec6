"""Structured JSON logs: request ids on every line, auth failures recorded, secrets redacted."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from clawlet.logs import JsonFormatter, LogRing, redact, request_id_var
from tests.conftest import free_port


def test_redaction_masks_tokens_and_keys() -> None:
    text = redact('Authorization: Bearer abc.def-123 key sk-proj-ABCDEFGHIJKLMNOP token=xyz "api_key": "k-1"')
    assert "abc.def-123" not in text and "ABCDEFGHIJKLMNOP" not in text
    assert "xyz" not in text and "k-1" not in text
    assert "Bearer ***" in text


def test_formatter_writes_json_with_request_id_and_extras() -> None:
    record = logging.LogRecord("clawlet.test", logging.WARNING, __file__, 1, "hello %s", ("世界",), None)
    record.status = 401
    record.path = "/api/x?token=abc"
    token = request_id_var.set("req-42")
    try:
        line = JsonFormatter().format(record)
    finally:
        request_id_var.reset(token)
    payload = json.loads(line)
    assert payload["message"] == "hello 世界" and payload["level"] == "warning"
    assert payload["request_id"] == "req-42" and payload["status"] == 401
    assert "abc" not in payload["path"]


@pytest.mark.slow
def test_server_logs_json_lines_with_request_ids_and_auth_failures(tmp_path: Path) -> None:
    port = free_port()
    log_file = tmp_path / "server.log"
    env = {**os.environ, "CLAWLET_HOME": str(tmp_path / "home"), "CLAWLET_API_TOKEN": "very-secret-token"}
    with log_file.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "clawlet", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120  # generous: the suite must pass on a loaded machine
            while True:
                try:
                    httpx.get(f"{base}/api/status", timeout=10)
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, "clawlet serve did not start"
                    time.sleep(0.05)
            denied = httpx.get(
                f"{base}/api/status",
                headers={"Authorization": "Bearer wrong-guess-123", "X-Request-ID": "rid-denied"},
            )
            assert denied.status_code == 401 and denied.headers["x-request-id"] == "rid-denied"
            allowed = httpx.get(f"{base}/api/sessions", headers={"Authorization": "Bearer very-secret-token"})
            assert allowed.status_code == 200 and allowed.headers["x-request-id"]
        finally:
            process.terminate()
            process.wait(timeout=60)
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    assert lines, log_file.read_text()
    failures = [entry for entry in lines if entry.get("event") == "auth_failure"]
    denied_entries = [entry for entry in failures if entry.get("request_id") == "rid-denied"]
    assert denied_entries and denied_entries[0]["level"] == "warning"
    assert all(entry.get("request_id") for entry in failures)
    access = [
        entry
        for entry in lines
        if entry["logger"] == "clawlet.access" and entry.get("path") == "/api/sessions"
    ]
    assert access and access[0]["status"] == 200 and access[0]["duration_ms"] >= 0 and access[0]["request_id"]
    raw = log_file.read_text()
    assert "very-secret-token" not in raw and "wrong-guess-123" not in raw


def test_the_log_ring_pages_like_a_growing_file() -> None:
    """What the gateway's ``logs.tail`` serves: JSON lines, secrets redacted, byte cursors."""
    ring = LogRing(capacity=3)
    logger = logging.getLogger("clawlet.test-ring")
    logger.addHandler(ring)
    logger.setLevel(logging.INFO)
    try:
        for number in range(5):
            logger.info("line %d token=abc%d", number, number)
        logger.debug("below the ring's level")
    finally:
        logger.removeHandler(ring)
    newest = ring.page(None, limit=10, max_bytes=10_000)
    parsed = [json.loads(line) for line in newest.lines]
    assert [entry["message"] for entry in parsed] == [f"line {n} token=***" for n in (2, 3, 4)]
    assert parsed[0]["subsystem"] == "clawlet.test-ring" and parsed[0]["level"] == "info"
    kept = sum(len(line.encode("utf-8")) + 1 for line in newest.lines)
    from_start = ring.page(0, limit=10, max_bytes=10_000)  # two lines were dropped meanwhile
    assert from_start.lines == newest.lines and from_start.skipped_bytes > 0
    assert newest.cursor == newest.size == from_start.skipped_bytes + kept
    assert ring.page(newest.cursor, limit=10, max_bytes=10_000).lines == []
    assert ring.page(newest.cursor + 1, limit=10, max_bytes=10_000).reset is True
    capped = ring.page(None, limit=10, max_bytes=len(newest.lines[-1]) + 1)
    assert capped.lines == newest.lines[-1:] and capped.truncated is True


# -- the child processes' logging: CLAWLET_LOG_FORMAT and CLAWLET_LOG_LEVEL, read through LogSettings


def _child_env(tmp_path: Path, log_format: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CLAWLET_LOG_")}
    env["CLAWLET_HOME"] = str(tmp_path / "home")
    if log_format is not None:
        env["CLAWLET_LOG_FORMAT"] = log_format
    return env


def _pipe_child_log(module: str, env: dict[str, str]) -> str:
    """What an engine worker or a session process writes to stderr when its first line is not ``init``."""
    done = subprocess.run(
        [sys.executable, "-m", module],
        input=b'{"type": "hello"}\n',
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr.decode()


def _template_log(env: dict[str, str]) -> str:
    """What the session template writes to stderr from its start until the exec plane goes away."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours:
        process = subprocess.Popen(
            [sys.executable, "-m", "clawlet.execplane.session_template", str(theirs.fileno())],
            env=env,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        theirs.close()
        ours.settimeout(120)
        assert json.loads(ours.recv(65536))["type"] == "ready"
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    return stderr.decode()


CHILDREN = {
    "engine worker": (
        lambda env: _pipe_child_log("clawlet.runtime.engine_worker", env),
        "ERROR",
        "the first line on the pipe was not init; exiting",
    ),
    "session process": (
        lambda env: _pipe_child_log("clawlet.execplane.session_child", env),
        "ERROR",
        "the first line on the pipe was not init; exiting",
    ),
    "session template": (_template_log, "INFO", "session template "),
}
#: ``configure_logging``'s text format: time, level, logger, message.
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) \S+: (?P<message>.*)")


@pytest.mark.slow  # starts each child program
@pytest.mark.parametrize("child", sorted(CHILDREN))
def test_child_processes_log_in_the_configured_format(tmp_path: Path, child: str) -> None:
    """A child started with ``CLAWLET_LOG_FORMAT=text`` writes text lines; without it, JSON."""
    run, level, message = CHILDREN[child]
    text = run(_child_env(tmp_path, "text"))
    lines = [TEXT_LINE.fullmatch(line) for line in text.splitlines()]
    assert lines and all(lines), text
    assert any(m and m["level"] == level and m["message"].startswith(message) for m in lines), text
    default = run(_child_env(tmp_path, None))
    entries = [json.loads(line) for line in default.splitlines()]
    assert any(
        entry["level"] == level.lower() and entry["message"].startswith(message) for entry in entries
    ), default

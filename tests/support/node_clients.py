"""Run Node scripts with the real client libraries in tests/clients (``openai``, ``ai``, ``@ai-sdk/openai``).

``scripts/test`` installs them (``npm ci`` in tests/clients); a test that needs them skips with a
message when they are missing, and fails instead when ``CI`` is set, so CI never silently skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CLIENTS_DIR = Path(__file__).resolve().parents[1] / "clients"


def require_node_clients() -> None:
    """Skip (or fail under CI) unless node and tests/clients/node_modules are present."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node")
    if not (CLIENTS_DIR / "node_modules" / "openai").is_dir():
        missing.append("tests/clients/node_modules (run scripts/test, or npm ci in tests/clients)")
    if missing:
        message = "the real Node client libraries are missing: " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def run_node_script(script: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run an ES-module ``script`` in tests/clients (it imports the libraries by their bare names,
    ``import OpenAI from "openai"``) and return what it printed; a non-zero exit fails the test
    with stderr."""
    require_node_clients()
    completed = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=CLIENTS_DIR,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if completed.returncode != 0:
        pytest.fail(f"node client exited {completed.returncode}:\n{completed.stderr}\n{completed.stdout}")
    return completed.stdout


def run_node_client(script: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run ``script`` (:func:`run_node_script`) and return the JSON it prints on its last line: it
    must ``console.log(JSON.stringify(result))`` last."""
    lines = [line for line in run_node_script(script, env=env, timeout=timeout).splitlines() if line.strip()]
    if not lines:
        pytest.fail("node client printed nothing")
    return json.loads(lines[-1])

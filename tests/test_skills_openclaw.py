"""clawlet's skill verdicts equal the real ``openclaw skills list --json`` (issue 16, point 6).

Every SKILL.md shipped with OpenClaw 2026.9.6 (``skills/``, ``custodian-skills/`` and the skills of
its bundled plugins in ``dist/extensions/*``) is parsed by clawlet and judged under the same PATH,
environment and config file the real CLI gets (run isolated: throw-away ``HOME`` and
``OPENCLAW_STATE_DIR``). Needs the cached OpenClaw (``scripts/test-openclaw install``); skipped with
the reason without it, failed when ``CLAWLET_OPENCLAW_REQUIRED=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clawlet.skills.scanner import Skill, openclaw_install_roots, scan_roots
from tests.support.openclaw_gateway import OpenClawInstall, real_openclaw

REAL = real_openclaw()  # at import: the autouse ``clawlet_home`` fixture removes CLAWLET_* variables
pytestmark = [pytest.mark.slow, REAL.skip]

#: Fake executables on the shared PATH: ``op`` and ``gh`` satisfy ``bins``, ``claude`` and
#: ``spotify_player`` one of ``anyBins`` each.
FAKE_BINS = ("op", "gh", "claude", "spotify_player")
#: One of trello's two variables is set in the environment; the config gives the other.
ENV = {"TRELLO_API_KEY": "k"}

#: Satisfies coding-agent's ``requires.config`` and the secrets of goplaces (its ``primaryEnv`` through
#: ``apiKey``) and trello (``env``); disables two skills; enables the two plugins that are off by default.
CONFIG: dict[str, Any] = {
    "skills": {
        "entries": {
            "coding-agent": {"enabled": True},
            "weather": {"enabled": False},
            "1password": {"enabled": False},
            "goplaces": {"apiKey": "g"},
            "trello": {"env": {"TRELLO_TOKEN": "t"}},
        }
    },
    "plugins": {"entries": {"crabbox": {"enabled": True}, "memory-wiki": {"enabled": True}}},
}


def openclaw_skills(
    install: OpenClawInstall, home: Path, path: str, config: dict[str, Any]
) -> dict[str, Any]:
    """``openclaw skills list --json`` with this PATH, ``ENV`` and config, by skill name."""
    state = home / "state"
    state.mkdir(parents=True)
    (state / "openclaw.json").write_text(json.dumps(config), encoding="utf-8")
    env = {**install.base_env(home), **ENV, "PATH": path}
    result = subprocess.run(
        install.command("skills", "list", "--json"),
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {skill["name"]: skill for skill in json.loads(result.stdout)["skills"]}


def clawlet_skills(package: Path, config: dict[str, Any]) -> dict[str, Skill]:
    result = scan_roots(openclaw_install_roots(package, config), package, config)
    assert result.problems == []
    return {skill.name: skill for skill in result.skills}


def verdict(skill: Skill) -> dict[str, Any]:
    """clawlet's verdict in the fields of ``openclaw skills list --json``."""
    return {
        "name": skill.name,
        "description": skill.description,
        "emoji": skill.emoji,
        "source": skill.source,
        "eligible": skill.available,
        "disabled": skill.disabled,
        "blockedByAllowlist": skill.blocked_by_allowlist,
        "missing": skill.missing_by_kind,
    }


def openclaw_verdict(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        key: entry.get(key)
        for key in (
            "name",
            "description",
            "emoji",
            "source",
            "eligible",
            "disabled",
            "blockedByAllowlist",
            "missing",
        )
    }


@pytest.fixture
def install() -> OpenClawInstall:
    return REAL.require()


@pytest.fixture
def shared_path(install: OpenClawInstall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The PATH (and environment) both sides see: Node, the fake binaries, the system's."""
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in FAKE_BINS:
        (bins / name).write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        (bins / name).chmod(0o755)
    path = os.pathsep.join([str(install.node.parent), str(bins), "/usr/local/bin", "/usr/bin", "/bin"])
    monkeypatch.setenv("PATH", path)
    for name in ("TRELLO_TOKEN", "GOOGLE_PLACES_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    return path


def assert_same_verdicts(ours: dict[str, Skill], theirs: dict[str, Any]) -> None:
    assert sorted(ours) == sorted(theirs)
    differences = {
        name: (verdict(ours[name]), openclaw_verdict(theirs[name]))
        for name in theirs
        if verdict(ours[name]) != openclaw_verdict(theirs[name])
    }
    assert differences == {}


def package_dir(install: OpenClawInstall) -> Path:
    return install.entry.resolve().parent


def test_default_config_agrees_with_openclaw(
    install: OpenClawInstall, shared_path: str, tmp_path: Path
) -> None:
    theirs = openclaw_skills(install, tmp_path / "oc", shared_path, {})
    ours = clawlet_skills(package_dir(install), {})
    assert_same_verdicts(ours, theirs)
    # 51 bundled, 4 custodian and the skills of the two plugins enabled by default (browser, canvas);
    # crabbox and memory-wiki are off by default, so their three skills are left out
    assert len(ours) == 57
    assert {"browser-automation", "canvas"} <= set(ours)
    assert not {"crabbox-apps", "wiki-maintainer", "obsidian-vault-maintainer"} & set(ours)
    assert ours["coding-agent"].missing_by_kind["config"] == ["skills.entries.coding-agent.enabled"]
    assert ours["1password"].available and ours["spotify-player"].available  # fake bins found
    assert ours["trello"].missing_by_kind["env"] == ["TRELLO_TOKEN"]


def test_config_agrees_with_openclaw_for_all_60_skills(
    install: OpenClawInstall, shared_path: str, tmp_path: Path
) -> None:
    package = package_dir(install)
    # every bundled skill but two is in skills.allowBundled (plugin skills are not bundled ones)
    bundled = [
        item.name for item in clawlet_skills(package, {}).values() if item.source.startswith("openclaw-")
    ]
    allowed = sorted(set(bundled) - {"github", "healthcheck", "browser-automation"})
    config = {**CONFIG, "skills": {**CONFIG["skills"], "allowBundled": allowed}}
    theirs = openclaw_skills(install, tmp_path / "oc", shared_path, config)
    ours = clawlet_skills(package, config)
    assert_same_verdicts(ours, theirs)
    assert len(ours) == 60
    assert ours["github"].blocked_by_allowlist and not ours["github"].available  # `gh` is on PATH
    assert not ours["browser-automation"].blocked_by_allowlist and ours["browser-automation"].available
    assert ours["coding-agent"].available  # its config requirement is satisfied, `claude` is on PATH
    assert ours["weather"].disabled and not ours["weather"].available
    assert ours["1password"].disabled and not ours["1password"].available
    assert ours["trello"].available and ours["goplaces"].missing_by_kind == {
        "bins": ["goplaces"],
        "anyBins": [],
        "env": [],
        "config": [],
        "os": [],
    }

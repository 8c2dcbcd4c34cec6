"""The skills config (``<home>/openclaw.json``) and plugin skills in the clawlet home, by OpenClaw's rules.

The verdicts themselves are checked against the real OpenClaw in tests/test_skills_openclaw.py; these
cover the home's side: where the config and plugins live, and each rule on a small skill.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawlet.config import Settings
from clawlet.skills.plugins import Plugin, plugin_enabled
from clawlet.skills.scanner import refresh_snapshot, scan_skills


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def skill(name: str, metadata: str = "", description: str = "d") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{metadata}---\nbody\n"


def write_config(home: Path, config: dict[str, Any] | str) -> None:
    write(home / "openclaw.json", config if isinstance(config, str) else json.dumps(config))


def by_name(home: Path) -> dict[str, Any]:
    result = scan_skills(home)
    assert result.problems == []
    return {item.name: item for item in result.skills}


def test_requires_config_is_checked_against_the_home_config(settings: Settings) -> None:
    home = settings.paths.root
    paths = '["skills.entries.gated.enabled", "browser.enabled"]'
    metadata = f'metadata: {{"openclaw": {{"requires": {{"config": {paths}}}}}}}\n'
    write(home / "skills" / "gated" / "SKILL.md", skill("gated", metadata))
    gated = by_name(home)["gated"]
    assert not gated.available
    # browser.enabled is true by default in OpenClaw, so only the unset entry is missing
    assert gated.missing == ["config:skills.entries.gated.enabled"]
    assert gated.missing_by_kind == {
        "bins": [],
        "anyBins": [],
        "env": [],
        "config": ["skills.entries.gated.enabled"],
        "os": [],
    }
    # JSON5, as OpenClaw's own file may be
    write_config(home, "{skills: {entries: {gated: {enabled: true}}}, browser: {enabled: 0}, // comment\n}")
    gated = by_name(home)["gated"]
    assert gated.missing == ["config:browser.enabled"]
    write_config(home, {"skills": {"entries": {"gated": {"enabled": True}}}})
    assert by_name(home)["gated"].available
    refresh_snapshot(home)
    assert "<name>gated</name>" in settings.paths.skills_snapshot.read_text(encoding="utf-8")


def test_a_disabled_skill_is_left_out_of_the_prompt(settings: Settings) -> None:
    home = settings.paths.root
    write(home / "skills" / "plain" / "SKILL.md", skill("plain"))
    write_config(home, {"skills": {"entries": {"plain": {"enabled": False}}}})
    result = refresh_snapshot(home)
    plain = next(item for item in result.skills if item.name == "plain")
    assert plain.disabled and not plain.available and plain.missing == []
    assert "<name>plain</name>" not in settings.paths.skills_snapshot.read_text(encoding="utf-8")


def test_env_can_come_from_the_skill_entry(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    home = settings.paths.root
    for name in ("CLAWLET_TEST_KEY", "CLAWLET_TEST_OTHER"):
        monkeypatch.delenv(name, raising=False)
    metadata = (
        'metadata: {"openclaw": {"primaryEnv": "CLAWLET_TEST_KEY", '
        '"requires": {"env": ["CLAWLET_TEST_KEY", "CLAWLET_TEST_OTHER"]}}}\n'
    )
    write(home / "skills" / "keyed" / "SKILL.md", skill("keyed", metadata))
    assert by_name(home)["keyed"].missing == ["env:CLAWLET_TEST_KEY", "env:CLAWLET_TEST_OTHER"]
    write_config(
        home, {"skills": {"entries": {"keyed": {"apiKey": "k", "env": {"CLAWLET_TEST_OTHER": "o"}}}}}
    )
    assert by_name(home)["keyed"].available


def test_metadata_as_json5_and_always(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    home = settings.paths.root
    monkeypatch.setenv("PATH", str(home / "no-bins-here"))
    json5_metadata = "{openclaw: {requires: {bins: 'nope-a, nope-b'}, os: ['macos', 'linux'],}, /* c */}"
    write(home / "skills" / "five" / "SKILL.md", skill("five", f'metadata: "{json5_metadata}"\n'))
    write(
        home / "skills" / "always" / "SKILL.md",
        skill(
            "always",
            'metadata: {"clawdbot": {"always": true, "requires": {"bins": ["nope"]}, "os": ["plan9"]}}\n',
        ),
    )
    write(home / "skills" / "colon" / "SKILL.md", skill("colon", description="Use when: the user asks"))
    skills = by_name(home)
    assert skills["five"].missing == ["bin:nope-a", "bin:nope-b"]
    # always skips the requirement checks but never the OS
    assert skills["always"].missing == ["os:plan9"]
    assert skills["colon"].description == "Use when: the user asks"


def plugin(home: Path, plugin_id: str, **manifest: Any) -> None:
    root = home / "plugins" / plugin_id
    write(root / "openclaw.plugin.json", json.dumps({"id": plugin_id, "skills": ["./skills"], **manifest}))
    write(root / "skills" / f"{plugin_id}-skill" / "SKILL.md", skill(f"{plugin_id}-skill"))


def test_plugin_skills_only_when_the_plugin_is_enabled(settings: Settings) -> None:
    home = settings.paths.root
    plugin(home, "alpha")
    plugin(home, "beta")
    skills = by_name(home)
    assert skills["alpha-skill"].location == "plugins/alpha/skills/alpha-skill/SKILL.md"
    assert skills["alpha-skill"].source == "openclaw-extra" and "beta-skill" in skills
    write_config(home, {"plugins": {"entries": {"beta": {"enabled": False}}}})
    assert "beta-skill" not in by_name(home) and "alpha-skill" in by_name(home)
    write_config(home, {"plugins": {"deny": ["alpha"]}})
    assert "alpha-skill" not in by_name(home)
    write_config(home, {"plugins": {"allow": ["beta"]}})
    assert "alpha-skill" not in by_name(home) and "beta-skill" in by_name(home)
    write_config(home, {"plugins": {"enabled": False}})
    assert not {"alpha-skill", "beta-skill"} & set(by_name(home))


@pytest.mark.parametrize(
    ("config", "by_default", "enabled"),
    [
        ({}, False, False),
        ({}, True, True),
        ({"plugins": {"allow": ["p"]}}, False, False),  # a bundled plugin is not enabled by allow alone
        ({"plugins": {"entries": {"P": {"enabled": True}}}}, False, True),
        ({"plugins": {"entries": {"p": {"enabled": True}}, "deny": ["p"]}}, True, False),
        ({"plugins": {"allow": ["other"]}}, True, False),
    ],
)
def test_bundled_plugin_enablement(config: dict[str, Any], by_default: bool, enabled: bool) -> None:
    bundled = Plugin("p", Path("/nowhere"), "bundled", ("./skills",), by_default)
    assert plugin_enabled(bundled, config) is enabled


def test_a_broken_config_is_a_problem(settings: Settings) -> None:
    home = settings.paths.root
    write_config(home, "{not json")
    result = scan_skills(home)
    assert [problem.location for problem in result.problems] == ["openclaw.json"]
    assert [item.name for item in result.skills] == ["get_weather"]

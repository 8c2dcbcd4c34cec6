"""OpenClaw's skill requirement rules: the ``metadata.openclaw`` manifest and the eligibility verdict.

Follows OpenClaw 2026.9.6 (``src/shared/requirements.ts``, ``src/skills/loading/config.ts``): a skill
is eligible when its OS matches and, unless ``always: true``, every ``requires.bins`` is on ``PATH``,
one of ``requires.anyBins`` is, every ``requires.env`` is set (or given by
``skills.entries.<key>.env``, or ``skills.entries.<key>.apiKey`` for the skill's ``primaryEnv``) and
every ``requires.config`` path of the skills config (an ``openclaw.json``-shaped mapping) is truthy.
``skills.entries.<key>.enabled: false`` disables a skill; ``skills.allowBundled`` limits bundled ones.
What is missing is reported per kind, in OpenClaw's terms: ``bins``, ``anyBins``, ``env``, ``config``, ``os``.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawlet.secret_env import ENVIRON_WITH_SECRETS

#: Config paths OpenClaw treats as true when the config leaves them unset.
DEFAULT_CONFIG_VALUES: dict[str, bool] = {"browser.enabled": True, "browser.evaluateEnabled": True}
#: Keys a config path may not walk through (as OpenClaw's ``isBlockedObjectKey``).
_BLOCKED_KEYS = frozenset({"__proto__", "prototype", "constructor"})
#: Skill sources OpenClaw counts as bundled (subject to ``skills.allowBundled``).
BUNDLED_SOURCES = frozenset({"openclaw-bundled", "openclaw-custodian"})


class SkillError(ValueError):
    """A SKILL.md that cannot be used."""


def string_list(value: Any) -> list[str]:
    """A requirement list: a list (entries stringified, trimmed, blanks dropped) or a comma-separated
    string; ``None`` is empty; anything else is a ``SkillError``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    raise SkillError(f"expected a list, got {type(value).__name__}")


@dataclass(frozen=True)
class SkillManifest:
    """The ``metadata.openclaw`` (legacy ``metadata.clawdbot``) block of a SKILL.md."""

    bins: list[str] = field(default_factory=list)
    any_bins: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    os: list[str] = field(default_factory=list)
    always: bool = False
    emoji: str | None = None
    skill_key: str | None = None
    primary_env: str | None = None

    @classmethod
    def parse(cls, meta: Mapping[str, Any]) -> SkillManifest:
        """From the manifest mapping; ``SkillError`` when ``requires`` or a list has the wrong type."""
        requires = meta.get("requires")
        if requires is None:
            requires = {}
        if not isinstance(requires, dict):
            raise SkillError("metadata.openclaw.requires must be a mapping")

        def text(key: str) -> str | None:
            value = meta.get(key)
            return value if isinstance(value, str) and value else None

        return cls(
            bins=string_list(requires.get("bins")),
            any_bins=string_list(requires.get("anyBins")),
            env=string_list(requires.get("env")),
            config=string_list(requires.get("config")),
            os=string_list(meta.get("os")),
            always=meta.get("always") is True,
            emoji=text("emoji"),
            skill_key=text("skillKey"),
            primary_env=text("primaryEnv"),
        )


def config_path_value(config: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (empty segments ignored), or ``None`` when a branch is missing."""
    current: Any = config
    for part in (segment for segment in path.split(".") if segment):
        if not isinstance(current, Mapping) or part in _BLOCKED_KEYS:
            return None
        current = current.get(part)
    return current


def is_truthy(value: Any) -> bool:
    """OpenClaw's truthiness for a config value: ``0``, ``""`` (after trimming), ``false`` and unset
    are false; any object or list is true."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return bool(value.strip())
    return True


def is_config_path_truthy(config: Mapping[str, Any], path: str) -> bool:
    """Whether ``requires.config`` entry ``path`` holds in ``config`` (with OpenClaw's defaults)."""
    value = config_path_value(config, path)
    blocked = any(part in _BLOCKED_KEYS for part in path.split("."))
    if value is None and not blocked and path in DEFAULT_CONFIG_VALUES:
        return DEFAULT_CONFIG_VALUES[path]
    return is_truthy(value)


def skill_entry(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``skills.entries.<key>`` of the config, or an empty mapping."""
    skills = config.get("skills")
    entries = skills.get("entries") if isinstance(skills, Mapping) else None
    entry = entries.get(key) if isinstance(entries, Mapping) else None
    return entry if isinstance(entry, Mapping) else {}


def bundled_allowlist(config: Mapping[str, Any]) -> set[str]:
    """``skills.allowBundled`` (empty: every bundled skill is allowed)."""
    skills = config.get("skills")
    raw = skills.get("allowBundled") if isinstance(skills, Mapping) else None
    return {str(item).strip() for item in raw if str(item).strip()} if isinstance(raw, list) else set()


def _has_secret(value: Any) -> bool:
    """A literal secret or a SecretRef (``{source, id}``), as OpenClaw's ``hasConfiguredSecretInput``."""
    if isinstance(value, str):
        return bool(value.strip())
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("source"), str)
        and isinstance(value.get("id"), str)
    )


@dataclass(frozen=True)
class Verdict:
    """Whether a skill is eligible, and why not: ``missing`` maps each kind of requirement
    (``bins``, ``anyBins``, ``env``, ``config``, ``os``, in OpenClaw's order) to what is lacking
    (``disabled`` and ``blocked_by_allowlist`` come from the config, not the machine)."""

    eligible: bool
    disabled: bool
    blocked_by_allowlist: bool
    missing: dict[str, list[str]]

    def flat(self) -> list[str]:
        """``missing`` as ``bin:<name>``, ``anyBin:<a>|<b>``, ``env:<NAME>``, ``config:<path>``,
        ``os:<a>|<b>`` strings (the form clawlet's skill lists and prompt index use)."""
        out = [f"bin:{name}" for name in self.missing["bins"]]
        if self.missing["anyBins"]:
            out.append("anyBin:" + "|".join(self.missing["anyBins"]))
        out += [f"env:{name}" for name in self.missing["env"]]
        out += [f"config:{path}" for path in self.missing["config"]]
        if self.missing["os"]:
            out.append("os:" + "|".join(self.missing["os"]))
        return out


def _normalize_platform(platform: str) -> str:
    name = {"cygwin": "win32"}.get(platform, platform).strip().lower()
    return "darwin" if name == "macos" else name


def evaluate(
    manifest: SkillManifest,
    name: str,
    *,
    source: str = "workspace",
    config: Mapping[str, Any] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] = ENVIRON_WITH_SECRETS,
    platform: str = sys.platform,
) -> Verdict:
    """The verdict for skill ``name`` (its ``skills.entries`` key is ``skillKey`` or the name)."""
    config = config or {}
    key = manifest.skill_key or name
    entry = skill_entry(config, key)
    entry_env = entry.get("env")

    def env_satisfied(variable: str) -> bool:
        if environ.get(variable, "").strip():
            return True
        configured = entry_env.get(variable) if isinstance(entry_env, Mapping) else None
        if isinstance(configured, str) and configured.strip():
            return True
        return manifest.primary_env == variable and _has_secret(entry.get("apiKey"))

    allow = bundled_allowlist(config)
    blocked = bool(allow) and source in BUNDLED_SOURCES and key not in allow and name not in allow
    disabled = entry.get("enabled") is False
    wanted_os = {_normalize_platform(system) for system in manifest.os}
    requirements = {
        "bins": [binary for binary in manifest.bins if not which(binary)],
        "anyBins": [] if any(which(binary) for binary in manifest.any_bins) else list(manifest.any_bins),
        "env": [variable for variable in manifest.env if not env_satisfied(variable)],
        "config": [path for path in manifest.config if not is_config_path_truthy(config, path)],
    }
    if manifest.always:
        requirements = {kind: [] for kind in requirements}
    missing = {
        **requirements,
        "os": list(manifest.os) if wanted_os and _normalize_platform(platform) not in wanted_os else [],
    }
    satisfied = not any(missing.values())
    return Verdict(satisfied and not disabled and not blocked, disabled, blocked, missing)


def unmet_requirements(
    bins: Sequence[str] = (),
    any_bins: Sequence[str] = (),
    env: Sequence[str] = (),
    systems: Sequence[str] = (),
    *,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] = ENVIRON_WITH_SECRETS,
    platform: str = sys.platform,
) -> list[str]:
    """What this machine lacks for these requirements, flat (see :meth:`Verdict.flat`): the check of
    the skill index of cluster mode, which has no skills config."""
    manifest = SkillManifest(bins=list(bins), any_bins=list(any_bins), env=list(env), os=list(systems))
    return evaluate(manifest, "", which=which, environ=environ, platform=platform).flat()

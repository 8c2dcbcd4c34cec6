"""Scan ``skills/*/SKILL.md``, check requirements, and write ``SKILLS_SNAPSHOT.md``.

Frontmatter follows OpenClaw/ClawHub: ``name``, ``description`` (required), and ``metadata`` whose
``openclaw`` (legacy ``clawdbot``) key may hold ``requires: {bins, anyBins, env}`` and ``os``.
A malformed SKILL.md is reported in the scan result and skipped; it never stops the scan.
SKILL.md files are read through the path guard (``clawlet.paths``): a skill directory or file
linked from outside the home, or a multiply linked SKILL.md, is reported and skipped the same way.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import yaml

from clawlet.paths import UnsafePath, read_text_inside
from clawlet.secret_env import ENVIRON_WITH_SECRETS
from clawlet.storage import atomic_write_text

log = logging.getLogger(__name__)

_PLATFORM_NAMES = {"linux": "linux", "darwin": "darwin", "win32": "win32", "cygwin": "win32"}


@dataclass
class Skill:
    name: str
    description: str
    location: str
    available: bool
    missing: list[str] = field(default_factory=list)
    emoji: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SkillProblem:
    location: str
    error: str


@dataclass
class ScanResult:
    skills: list[Skill]
    problems: list[SkillProblem]


class SkillError(ValueError):
    """A SKILL.md that cannot be used."""


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Return (frontmatter mapping, body); text without frontmatter has an empty mapping."""
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            header = "".join(lines[1:index])
            body = "".join(lines[index + 1 :])
            try:
                data = yaml.safe_load(header) or {}
            except yaml.YAMLError as exc:
                raise SkillError(f"invalid YAML frontmatter: {exc}") from exc
            if not isinstance(data, dict):
                raise SkillError("frontmatter must be a mapping")
            return data, body
    raise SkillError("frontmatter starts with '---' but is never closed")


def _openclaw_metadata(front: dict[str, Any]) -> dict[str, Any]:
    metadata = front.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise SkillError(f"metadata is not valid JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        return {}
    inner = metadata.get("openclaw", metadata.get("clawdbot", {}))
    return inner if isinstance(inner, dict) else {}


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(item) for item in value]
    raise SkillError(f"expected a list, got {type(value).__name__}")


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
    """What this machine lacks, as ``bin:<name>``, ``anyBin:<a>|<b>`` (none found), ``env:<NAME>``
    (unset or empty) and ``os:<a>|<b>`` (this platform not listed). The one requirement check,
    for local skills and for the skill index of cluster mode."""
    missing = [f"bin:{binary}" for binary in bins if not which(binary)]
    if any_bins and not any(which(binary) for binary in any_bins):
        missing.append("anyBin:" + "|".join(any_bins))
    missing += [f"env:{variable}" for variable in env if not environ.get(variable)]
    if systems and _PLATFORM_NAMES.get(platform, platform) not in systems:
        missing.append(f"os:{'|'.join(systems)}")
    return missing


def missing_requirements(meta: dict[str, Any]) -> list[str]:
    """What this machine lacks for a skill: binaries, environment variables, OS."""
    requires = meta.get("requires") or {}
    if not isinstance(requires, dict):
        raise SkillError("metadata.openclaw.requires must be a mapping")
    return unmet_requirements(
        _as_list(requires.get("bins")),
        _as_list(requires.get("anyBins")),
        _as_list(requires.get("env")),
        _as_list(meta.get("os")),
    )


def skill_summary(text: str, default_name: str) -> dict[str, Any]:
    """``{name, description, requires: {bins, anyBins, env, os}}`` of a ``SKILL.md`` (what a
    skill index entry needs); ``SkillError`` if its frontmatter is broken."""
    front, _body = split_frontmatter(text)
    meta = _openclaw_metadata(front)
    raw_requires = meta.get("requires")
    requires: dict[str, Any] = raw_requires if isinstance(raw_requires, dict) else {}
    description = front.get("description")
    return {
        "name": str(front.get("name") or default_name),
        "description": description.strip() if isinstance(description, str) else "",
        "requires": {
            "bins": _as_list(requires.get("bins")),
            "anyBins": _as_list(requires.get("anyBins")),
            "env": _as_list(requires.get("env")),
            "os": _as_list(meta.get("os")),
        },
    }


def parse_skill(path: Path, root: Path) -> Skill:
    try:
        text = read_text_inside(root, path)
    except UnsafePath as exc:  # a skill directory or SKILL.md linked from outside the home
        raise SkillError(f"refused: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"cannot read: {exc}") from exc
    front, _body = split_frontmatter(text)
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("missing 'description' in frontmatter")
    name = front.get("name") or path.parent.name
    meta = _openclaw_metadata(front)
    missing = missing_requirements(meta)
    emoji = meta.get("emoji")
    return Skill(
        name=str(name),
        description=description.strip(),
        location=path.relative_to(root).as_posix(),
        available=not missing,
        missing=missing,
        emoji=str(emoji) if emoji else None,
    )


def scan_skills(root: Path) -> ScanResult:
    """Scan ``root/skills/*/SKILL.md`` (``root`` is the clawlet home)."""
    skills: list[Skill] = []
    problems: list[SkillProblem] = []
    skills_dir = root / "skills"
    if not skills_dir.is_dir():
        return ScanResult(skills, problems)
    for path in sorted(skills_dir.glob("*/SKILL.md")):
        location = path.relative_to(root).as_posix()
        try:
            skills.append(parse_skill(path, root))
        except SkillError as exc:
            log.warning("skipping skill %s: %s", location, exc)
            problems.append(SkillProblem(location, str(exc)))
    return ScanResult(skills, problems)


def render_snapshot(skills: list[Skill]) -> str:
    """The ``<available_skills>`` index that goes into the system prompt."""
    lines = ["<available_skills>"]
    for skill in skills:
        if not skill.available:
            continue
        lines += [
            "  <skill>",
            f"    <name>{escape(skill.name)}</name>",
            f"    <description>{escape(skill.description)}</description>",
            f"    <location>{escape(skill.location)}</location>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines) + "\n"


def refresh_snapshot(root: Path) -> ScanResult:
    """Rescan and rewrite ``SKILLS_SNAPSHOT.md`` if (and only if) its content changed."""
    result = scan_skills(root)
    snapshot = render_snapshot(result.skills)
    path = root / "SKILLS_SNAPSHOT.md"
    try:
        current: str | None = read_text_inside(root, path, errors="replace")
    except (FileNotFoundError, UnsafePath):
        current = None
    if current != snapshot:
        try:
            atomic_write_text(path, snapshot, root=root)
        except UnsafePath as exc:
            log.warning("not writing %s: %s", path, exc)
    return result

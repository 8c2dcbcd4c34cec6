"""Scan ``skills/*/SKILL.md``, check requirements, and write ``SKILLS_SNAPSHOT.md``.

Frontmatter follows OpenClaw/ClawHub: ``name``, ``description`` (required), and ``metadata`` whose
``openclaw`` (legacy ``clawdbot``) key holds the manifest judged by :mod:`clawlet.skills.requirements`
under the skills config ``<home>/openclaw.json`` (OpenClaw's shape). The skills of the enabled plugins
in ``<home>/plugins`` (:mod:`clawlet.skills.plugins`) count too; :func:`openclaw_install_roots` gives the
skills an OpenClaw package ships, judged the same way.
A malformed SKILL.md is reported in the scan result and skipped; it never stops the scan.
SKILL.md files are read through the path guard (``clawlet.paths``): a skill directory or file
linked from outside the home, or a multiply linked SKILL.md, is reported and skipped the same way.
A SKILL.md is read and parsed again only when it changed (:class:`clawlet.filememo.FileMemo`); its
requirements (binaries on the PATH, environment variables, the skills config) are judged on every
scan, so a change to any of them applies to the next model call.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import json5
import yaml

from clawlet.filememo import FileMemo
from clawlet.paths import UnsafePath, read_text_inside
from clawlet.skills.plugins import PluginOrigin, discover_plugins, plugin_enabled, plugin_skill_dirs
from clawlet.skills.prompt import SkillListing, render_available_skills
from clawlet.skills.requirements import (
    SkillError,
    SkillManifest,
    evaluate,
    unmet_requirements,
)
from clawlet.storage import atomic_write_text

__all__ = ["SkillError", "unmet_requirements"]

log = logging.getLogger(__name__)

CONFIG_NAME = "openclaw.json"
"""The skills config in the clawlet home: OpenClaw's ``openclaw.json`` shape, JSON5."""


@dataclass
class Skill:
    """One skill and its verdict: ``available`` is OpenClaw's ``eligible``; ``missing`` lists what is
    lacking flat (``bin:x``, ``config:a.b``, …) and ``missing_by_kind`` in OpenClaw's terms."""

    name: str
    description: str
    location: str
    available: bool
    missing: list[str] = field(default_factory=list)
    emoji: str | None = None
    source: str = "workspace"
    disabled: bool = False
    blocked_by_allowlist: bool = False
    missing_by_kind: dict[str, list[str]] = field(default_factory=dict)

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


@dataclass(frozen=True)
class SkillRoot:
    """A directory of ``<name>/SKILL.md`` skills and the OpenClaw source they count as."""

    directory: Path
    source: str


#: Free-text fields whose unquoted value may contain ``: `` (OpenClaw quotes them and parses again).
_FREEFORM_FIELD = re.compile(r"^(description|read_when|summary):[ \t]*(.*)$")


def _quote_freeform_line(header: str, line_number: int) -> str | None:
    """``header`` with the free-text field on ``line_number`` quoted as one JSON string, or ``None``."""
    lines = header.split("\n")
    match = _FREEFORM_FIELD.match(lines[line_number]) if line_number < len(lines) else None
    value = match.group(2).strip() if match else ""
    if match is None or not value or re.fullmatch(r"[|>][1-9+-]*", value):
        return None
    if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
        value = value[1:-1]
    lines[line_number] = f"{match.group(1)}: {json.dumps(value, ensure_ascii=False)}"
    return "\n".join(lines)


def _load_yaml_header(header: str) -> Any:
    """The YAML frontmatter; like OpenClaw, an unquoted ``description: a: b`` is read as text."""
    for _attempt in range(4):
        try:
            return yaml.safe_load(header) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            recovered = _quote_freeform_line(header, mark.line) if mark is not None else None
            if recovered is None or recovered == header:
                raise SkillError(f"invalid YAML frontmatter: {exc}") from exc
            header = recovered
    raise SkillError("invalid YAML frontmatter")


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Return (frontmatter mapping, body); text without frontmatter has an empty mapping."""
    text = text.removeprefix("\ufeff")
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            header = "".join(lines[1:index])
            body = "".join(lines[index + 1 :])
            data = _load_yaml_header(header)
            if not isinstance(data, dict):
                raise SkillError("frontmatter must be a mapping")
            return data, body
    raise SkillError("frontmatter starts with '---' but is never closed")


def _openclaw_metadata(front: dict[str, Any]) -> dict[str, Any]:
    """``metadata.openclaw`` (else ``metadata.clawdbot``); ``metadata`` may be a mapping or a
    JSON/JSON5 string, as OpenClaw accepts."""
    metadata = front.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            try:
                metadata = json5.loads(metadata)
            except ValueError as exc:
                raise SkillError(f"metadata is not valid JSON or JSON5: {exc}") from exc
    if not isinstance(metadata, dict):
        return {}
    for key in ("openclaw", "clawdbot"):
        if isinstance(metadata.get(key), dict):
            inner: dict[str, Any] = metadata[key]
            return inner
    return {}


def manifest_of(front: dict[str, Any]) -> SkillManifest:
    """The OpenClaw manifest of a parsed frontmatter (an empty one when there is none)."""
    return SkillManifest.parse(_openclaw_metadata(front))


def skill_summary(text: str, default_name: str) -> dict[str, Any]:
    """``{name, description, requires: {bins, anyBins, env, os}}`` of a ``SKILL.md`` (what a
    skill index entry needs); ``SkillError`` if its frontmatter is broken."""
    front, _body = split_frontmatter(text)
    manifest = manifest_of(front)
    description = front.get("description")
    return {
        "name": str(front.get("name") or default_name),
        "description": description.strip() if isinstance(description, str) else "",
        "requires": {
            "bins": manifest.bins,
            "anyBins": manifest.any_bins,
            "env": manifest.env,
            "os": manifest.os,
        },
    }


SKILL_FILES: FileMemo[dict[str, Any] | SkillError] = FileMemo()
"""Each SKILL.md's frontmatter (or why it has none usable) as last read."""
SNAPSHOT_FILES: FileMemo[str | None] = FileMemo()
"""Each home's ``SKILLS_SNAPSHOT.md`` as last read (``None``: missing or refused)."""
CONFIG_FILES: FileMemo[tuple[dict[str, Any], list[SkillProblem]]] = FileMemo()
"""Each skills config (``openclaw.json``) as last read, with the problem reading it if any."""


def _read_frontmatter(path: Path, root: Path) -> dict[str, Any] | SkillError:
    try:
        text = read_text_inside(root, path)
    except UnsafePath as exc:  # a skill directory or SKILL.md linked from outside the home
        return SkillError(f"refused: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        return SkillError(f"cannot read: {exc}")
    try:
        return split_frontmatter(text)[0]
    except SkillError as exc:
        return exc


def parse_skill(
    path: Path, root: Path, config: Mapping[str, Any] | None = None, source: str = "workspace"
) -> Skill:
    """The skill in ``path`` (read through the path guard under ``root``; ``location`` is relative to
    it) with its verdict under the skills ``config``."""
    front = SKILL_FILES.get(path, lambda found: _read_frontmatter(found, root), variant=root)
    if isinstance(front, SkillError):
        raise SkillError(str(front))
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("missing 'description' in frontmatter")
    name = str(front.get("name") or "").strip() or path.parent.name
    manifest = manifest_of(front)
    verdict = evaluate(manifest, name, source=source, config=config)
    emoji = manifest.emoji or front.get("emoji")
    return Skill(
        name=name,
        description=description.strip(),
        location=path.relative_to(root).as_posix(),
        available=verdict.eligible,
        missing=verdict.flat(),
        emoji=str(emoji) if emoji else None,
        source=source,
        disabled=verdict.disabled,
        blocked_by_allowlist=verdict.blocked_by_allowlist,
        missing_by_kind=verdict.missing,
    )


def _read_skills_config(path: Path, root: Path) -> tuple[dict[str, Any], list[SkillProblem]]:
    try:
        data = json5.loads(read_text_inside(root, path))
    except FileNotFoundError:
        return {}, []
    except (OSError, UnicodeDecodeError, UnsafePath, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}, [SkillProblem(CONFIG_NAME, f"cannot read: {exc}")]
    if not isinstance(data, dict):
        return {}, [SkillProblem(CONFIG_NAME, "must hold a JSON object")]
    return data, []


def load_skills_config(root: Path) -> tuple[dict[str, Any], list[SkillProblem]]:
    """``<root>/openclaw.json`` (JSON5; none is an empty config), or an empty config and the problem
    (read again only when the file changed; the config is shared: do not change it)."""
    config, problems = CONFIG_FILES.get(
        root / CONFIG_NAME, lambda path: _read_skills_config(path, root), variant=root
    )
    return config, list(problems)


def scan_roots(roots: Sequence[SkillRoot], base: Path, config: Mapping[str, Any]) -> ScanResult:
    """Every ``<root>/*/SKILL.md`` (roots inside ``base``); a later root's skill replaces an earlier
    one of the same name, as OpenClaw's precedence (plugins, bundled, then the workspace)."""
    by_name: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for root in roots:
        if not root.directory.is_dir():
            continue
        for path in sorted(root.directory.glob("*/SKILL.md")):
            location = path.relative_to(base).as_posix()
            try:
                skill = parse_skill(path, base, config, root.source)
            except SkillError as exc:
                log.warning("skipping skill %s: %s", location, exc)
                problems.append(SkillProblem(location, str(exc)))
                continue
            by_name.pop(skill.name, None)
            by_name[skill.name] = skill
    return ScanResult(sorted(by_name.values(), key=lambda skill: skill.location), problems)


def enabled_plugin_roots(
    plugins_dir: Path, origin: PluginOrigin, base: Path, config: Mapping[str, Any]
) -> list[SkillRoot]:
    """The skill directories of the enabled plugins in ``plugins_dir`` (source ``openclaw-extra``)."""
    return [
        SkillRoot(directory, "openclaw-extra")
        for plugin in discover_plugins(plugins_dir, origin, base)
        if plugin_enabled(plugin, config)
        for directory in plugin_skill_dirs(plugin)
    ]


def openclaw_install_roots(package_dir: Path, config: Mapping[str, Any]) -> list[SkillRoot]:
    """The skills an OpenClaw package (``node_modules/openclaw``) ships: its enabled bundled plugins'
    (``dist/extensions/*``), ``skills/`` and ``custodian-skills/``."""
    return [
        *enabled_plugin_roots(package_dir / "dist" / "extensions", "bundled", package_dir, config),
        SkillRoot(package_dir / "skills", "openclaw-bundled"),
        SkillRoot(package_dir / "custodian-skills", "openclaw-custodian"),
    ]


def scan_skills(root: Path) -> ScanResult:
    """Scan the clawlet home ``root``: the skills of the enabled plugins in ``root/plugins/*``, then
    ``root/skills/*/SKILL.md``, under the skills config ``root/openclaw.json``."""
    config, problems = load_skills_config(root)
    roots = [
        *enabled_plugin_roots(root / "plugins", "global", root, config),
        SkillRoot(root / "skills", "workspace"),
    ]
    result = scan_roots(roots, root, config)
    return ScanResult(result.skills, problems + result.problems)


def render_snapshot(skills: list[Skill]) -> str:
    """The ``<available_skills>`` index of the available ``skills`` that goes into the system prompt."""
    return render_available_skills(
        SkillListing(skill.name, skill.description, skill.location) for skill in skills if skill.available
    )


def refresh_snapshot(root: Path) -> ScanResult:
    """Rescan and rewrite ``SKILLS_SNAPSHOT.md`` if (and only if) its content changed."""
    result = scan_skills(root)
    snapshot = render_snapshot(result.skills)
    path = root / "SKILLS_SNAPSHOT.md"

    def read(found: Path) -> str | None:
        try:
            return read_text_inside(root, found, errors="replace")
        except (FileNotFoundError, UnsafePath):
            return None

    if SNAPSHOT_FILES.get(path, read, variant=root) != snapshot:
        try:
            atomic_write_text(path, snapshot, root=root)
        except UnsafePath as exc:
            log.warning("not writing %s: %s", path, exc)
    return result

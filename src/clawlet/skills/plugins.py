"""Plugin skills: the ``skills`` directories an enabled OpenClaw plugin contributes.

A plugin is a directory holding ``openclaw.plugin.json`` (``id``, ``skills: ["./skills", …]``,
``enabledByDefault``, ``enabledByDefaultOnPlatforms``). Whether it is enabled follows OpenClaw
2026.9.6's activation policy (``src/plugins/config-activation-shared.ts``) over the ``plugins`` key of
the skills config: ``plugins.enabled: false`` turns every plugin off, ``plugins.deny`` and
``plugins.entries.<id>.enabled: false`` turn one off, a non-empty ``plugins.allow`` leaves out the
others, ``plugins.entries.<id>.enabled: true`` turns one on, and otherwise a ``bundled`` plugin
(one shipped with OpenClaw) is on only when enabled by default while any other is on.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from clawlet.paths import UnsafePath, read_text_inside

log = logging.getLogger(__name__)

PluginOrigin = Literal["bundled", "global", "workspace"]
MANIFEST_NAME = "openclaw.plugin.json"


@dataclass(frozen=True)
class Plugin:
    """One plugin directory and what its manifest says about skills and enablement."""

    id: str
    root: Path
    origin: PluginOrigin
    skill_dirs: tuple[str, ...]
    enabled_by_default: bool
    enabled_by_default_on: tuple[str, ...] = ()


def read_plugin(root: Path, origin: PluginOrigin, base: Path) -> Plugin | None:
    """The plugin in ``root`` (read through the path guard under ``base``), or ``None`` (logged)
    when its manifest is missing or unreadable."""
    try:
        raw = json.loads(read_text_inside(base, root / MANIFEST_NAME))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, UnsafePath, json.JSONDecodeError) as exc:
        log.warning("ignoring plugin %s: %s", root, exc)
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"].strip():
        log.warning("ignoring plugin %s: its manifest has no id", root)
        return None
    skills = raw.get("skills")
    platforms = raw.get("enabledByDefaultOnPlatforms")
    return Plugin(
        id=raw["id"].strip(),
        root=root,
        origin=origin,
        skill_dirs=tuple(item for item in skills if isinstance(item, str))
        if isinstance(skills, list)
        else (),
        enabled_by_default=raw.get("enabledByDefault") is True,
        enabled_by_default_on=tuple(str(item) for item in platforms) if isinstance(platforms, list) else (),
    )


def _ids(value: Any) -> list[str]:
    return (
        [str(item).strip().lower() for item in value if str(item).strip()] if isinstance(value, list) else []
    )


def plugin_enabled(plugin: Plugin, config: Mapping[str, Any], platform: str = sys.platform) -> bool:
    """Whether ``plugin`` is active under the ``plugins`` key of ``config``."""
    raw = config.get("plugins")
    plugins: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if plugins.get("enabled") is False:
        return False
    policy_id = plugin.id.lower()
    raw_entries = plugins.get("entries")
    entries = (
        {str(key).strip().lower(): value for key, value in raw_entries.items()}
        if isinstance(raw_entries, Mapping)
        else {}
    )
    entry = entries.get(policy_id)
    entry_enabled = entry.get("enabled") if isinstance(entry, Mapping) else None
    if policy_id in _ids(plugins.get("deny")) or entry_enabled is False:
        return False
    allow = _ids(plugins.get("allow"))
    allowed = policy_id in allow
    if plugin.origin == "workspace" and not allowed and entry_enabled is not True:
        return False
    slots = plugins.get("slots")
    if isinstance(slots, Mapping) and plugin.id in (slots.get("memory"), slots.get("contextEngine")):
        return True
    if allow and not allowed:
        return False
    if entry_enabled is True or (plugin.origin != "bundled" and allowed):
        return True
    if plugin.origin == "bundled":
        return plugin.enabled_by_default or platform in plugin.enabled_by_default_on
    return True


def plugin_skill_dirs(plugin: Plugin) -> list[Path]:
    """The plugin's existing skill directories that stay inside it."""
    root = plugin.root.resolve()
    dirs = []
    for relative in plugin.skill_dirs:
        candidate = (plugin.root / relative.strip()).resolve()
        if relative.strip() and candidate.is_relative_to(root) and candidate.is_dir():
            dirs.append(candidate)
        else:
            log.warning("plugin %s: skill path %r is missing or outside the plugin", plugin.id, relative)
    return dirs


def discover_plugins(directory: Path, origin: PluginOrigin, base: Path) -> list[Plugin]:
    """Every plugin in the sub-directories of ``directory`` (sorted by directory name)."""
    if not directory.is_dir():
        return []
    found = (read_plugin(child, origin, base) for child in sorted(directory.iterdir()) if child.is_dir())
    return [plugin for plugin in found if plugin is not None]

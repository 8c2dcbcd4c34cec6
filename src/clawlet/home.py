"""Create the clawlet home with its default files; existing files are never overwritten, and none is
written through a link out of the home (``clawlet.paths``)."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from clawlet.config import HomePaths
from clawlet.paths import is_safe_entry
from clawlet.skills.scanner import refresh_snapshot
from clawlet.storage import atomic_write_bytes, remove_stale_temp_files

TEMPLATE_PACKAGE = "clawlet.templates"


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for child in node.iterdir():
        relative = f"{prefix}{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                found += _walk(child, relative + "/")
        elif not child.name.endswith((".py", ".pyc")):
            found.append((relative, child))
    return found


def init_home(paths: HomePaths) -> list[Path]:
    """Create missing directories and default files; return the files created."""
    created: list[Path] = []
    for directory in (
        paths.root,
        paths.sessions,
        paths.sessions / "archive",
        paths.storage,
        paths.knowledge,
        paths.skills,
        paths.workspace,
        paths.memory_file.parent,
    ):
        directory.mkdir(parents=True, exist_ok=True)
    for relative, template in _walk(resources.files(TEMPLATE_PACKAGE)):
        target = paths.root / relative
        if not target.exists() and is_safe_entry(paths.root, target):
            atomic_write_bytes(target, template.read_bytes(), root=paths.root)
            created.append(target)
    # what atomic writes a killed process left anywhere in the home (sessions, checkpoints,
    # approvals, workspace files, memory, skills, uploads, named workspaces, ...)
    remove_stale_temp_files(paths.root, recursive=True)
    refresh_snapshot(paths.root)
    return created

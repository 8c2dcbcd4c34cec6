"""The one path guard: resolve a user-given path and refuse anything outside a root."""

from __future__ import annotations

from pathlib import Path


class PathOutsideRoot(ValueError):
    """The path would escape its root (``..``, an absolute path elsewhere, or a symlink out)."""


def resolve_inside(root: Path, user_path: str) -> Path:
    """Resolve ``user_path`` (relative to ``root``, or absolute) and require it inside ``root``."""
    if "\x00" in user_path:
        raise PathOutsideRoot("path contains a NUL byte")
    root = root.resolve()
    candidate = Path(user_path.strip()).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise PathOutsideRoot(f"path {user_path!r} is outside the allowed directory")
    return resolved

"""The editable files of a clawlet home: ``workspace/``, ``memory/``, ``skills/``, ``knowledge/``
and ``SKILLS_SNAPSHOT.md``. Every other path, and every traversal trick, is refused; reads and
writes go through the path guard (``clawlet.paths``), so a symlink out of the home or a file with
more than one hard link is refused too.

Saving is atomic. Listeners registered with :meth:`EditableFiles.on_save` run after a save (the
skills snapshot is refreshed when a ``SKILL.md`` changes; indexes hook in the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from clawlet.paths import UnsafePath, read_bytes_inside, resolve_inside
from clawlet.storage import atomic_write_text, file_lock

ALLOWED_DIRECTORIES = ("workspace", "memory", "skills", "knowledge")
ALLOWED_ROOT_FILES = ("SKILLS_SNAPSHOT.md",)
MAX_FILE_BYTES = 5 * 1024 * 1024

SaveListener = Callable[[str], None]


class FileAccessError(ValueError):
    """The path is not one of the editable files (outside the allow list, traversal, encoded)."""


class EditableFileNotFound(FileNotFoundError):
    """The path is allowed but no such file exists."""


class EditableFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._listeners: list[SaveListener] = []

    def on_save(self, listener: SaveListener) -> None:
        self._listeners.append(listener)

    def resolve(self, user_path: str) -> tuple[str, Path]:
        """(normalised relative path, absolute path) of an editable file, or FileAccessError."""
        raw = user_path.strip()
        if not raw or "%" in raw or "\\" in raw or "\x00" in raw:
            raise FileAccessError("path must be a plain relative path like memory/MEMORY.md")
        pure = PurePosixPath(raw)
        if pure.is_absolute() or ".." in pure.parts:
            raise FileAccessError(f"path {user_path!r} may not be absolute or contain '..'")
        try:
            target = resolve_inside(self.root, raw)
        except UnsafePath as exc:
            raise FileAccessError(str(exc)) from exc
        relative = target.relative_to(self.root.resolve()).as_posix()
        top = relative.split("/", 1)[0]
        allowed = relative in ALLOWED_ROOT_FILES or (top in ALLOWED_DIRECTORIES and "/" in relative)
        if not allowed:
            choices = ", ".join(f"{name}/" for name in ALLOWED_DIRECTORIES)
            raise FileAccessError(f"only files under {choices} or SKILLS_SNAPSHOT.md can be opened")
        return relative, target

    def read(self, user_path: str) -> tuple[str, str]:
        relative, target = self.resolve(user_path)
        try:
            data = read_bytes_inside(self.root, target)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise EditableFileNotFound(relative) from exc
        except UnsafePath as exc:
            raise FileAccessError(str(exc)) from exc
        return relative, data.decode("utf-8", errors="replace")

    def write(self, user_path: str, content: str) -> str:
        relative, target = self.resolve(user_path)
        if target.is_dir():
            raise FileAccessError(f"{relative} is a directory")
        if len(content.encode("utf-8")) > MAX_FILE_BYTES:
            raise FileAccessError(f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        with file_lock(target):
            try:
                atomic_write_text(target, content, root=self.root)
            except (UnsafePath, NotADirectoryError, FileExistsError) as exc:
                raise FileAccessError(str(exc)) from exc
        for listener in self._listeners:
            listener(relative)
        return relative

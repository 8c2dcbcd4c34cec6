"""The one path guard: every read and write of a user file under a clawlet home goes through here.

A path is refused (:class:`UnsafePath`) when it would leave its root — ``..``, an absolute path
elsewhere, a symlink (of the file or of any directory on the way) that points out — when a name is
longer than the file system allows, when ``~user`` names no user, and, for writes and for reads of
files that are served or put into a prompt, when the file has more than one hard link (a hard link
planted in the home can name any file of the same file system, and nothing tells where its other
names are). Symlinks that stay inside the root are followed as usual.

* :func:`resolve_inside` checks a path and returns it resolved;
* :func:`read_bytes_inside` / :func:`read_text_inside` read a checked file (no symlink followed
  after the check, no FIFO opened, the opened file's location checked again);
* :func:`open_directory_inside` opens a checked directory for ``*at`` writes
  (``clawlet.storage.atomic_write_bytes`` with ``root=``);
* :func:`is_safe_entry` lets a directory scan skip (with a warning) what the guard refuses.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096


class UnsafePath(ValueError):
    """The path is refused (outside the root, too long, multiply linked, not a plain file...)."""


class PathOutsideRoot(UnsafePath):
    """The path would escape its root (``..``, an absolute path elsewhere, or a symlink out)."""


class PathTooLong(UnsafePath):
    """A name in the path is longer than 255 bytes, or the whole path longer than 4096."""


class MultiplyLinked(UnsafePath):
    """The file has more than one hard link, so it may be a file outside the root as well."""


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def _inside_root(root: Path, resolved: Path) -> bool:
    """Whether the real path ``resolved`` is inside ``root``. A real path has no symlink and no
    ``..`` on the way, so if it lies under ``root`` as written, ``root`` is a real path too (its own
    resolution): the root is resolved (a system call per name on the way) only when it is not."""
    return _inside(root, resolved) or _inside(root.resolve(), resolved)


def _check_lengths(user_path: str) -> None:
    try:
        encoded = os.fsencode(user_path)
    except UnicodeEncodeError as exc:
        raise UnsafePath("path is not valid text") from exc
    if len(encoded) > PATH_MAX_BYTES:
        raise PathTooLong(f"path is longer than {PATH_MAX_BYTES} bytes")
    if any(len(part) > NAME_MAX_BYTES for part in encoded.split(b"/")):
        raise PathTooLong(f"a name in the path is longer than {NAME_MAX_BYTES} bytes")


def resolve_inside(root: Path, user_path: str | os.PathLike[str], *, single_link: bool = False) -> Path:
    """Resolve ``user_path`` (relative to ``root``, or absolute) and require it inside ``root``;
    with ``single_link``, an existing regular file must also have exactly one hard link."""
    raw = os.fspath(user_path)
    if "\x00" in raw:
        raise UnsafePath("path contains a NUL byte")
    _check_lengths(raw)
    try:
        candidate = Path(raw.strip()).expanduser()
    except RuntimeError as exc:  # ~nosuchuser, or no home directory at all
        raise UnsafePath(f"path {raw!r} names an unknown user's home directory") from exc
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, an unreadable directory
        raise UnsafePath(f"path {raw!r} cannot be resolved: {exc}") from exc
    if not _inside_root(root, resolved):
        raise PathOutsideRoot(f"path {raw!r} is outside the allowed directory")
    if single_link:
        refuse_multiply_linked(resolved)
    return resolved


def refuse_multiply_linked(path: Path) -> None:
    """Raise :class:`MultiplyLinked` if ``path`` is a regular file with more than one hard link."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UnsafePath(f"{path.name}: {exc.strerror}") from exc
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise MultiplyLinked(f"{path.name} has {info.st_nlink} hard links; refusing to use it")


def _fd_location(fd: int) -> Path | None:
    """Where an open file or directory really is, when the platform can tell."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    get_path = getattr(fcntl, "F_GETPATH", None)  # macOS
    if get_path is not None:
        try:
            raw = fcntl.fcntl(fd, get_path, b"\0" * 1024)
        except OSError:
            return None
        return Path(os.fsdecode(raw.rstrip(b"\0")))
    return None


def _check_opened(root: Path, fd: int, shown: Path) -> bool:
    """Refuse an opened file whose real location left ``root`` (a directory swapped for a symlink
    between the check and the open); False when the platform cannot tell where it is."""
    location = _fd_location(fd)
    if location is None:
        return False
    if not _inside_root(root, location):
        raise PathOutsideRoot(f"{shown.name} moved outside the allowed directory while being opened")
    return True


def open_directory_inside(root: Path, directory: Path, *, resolved: bool = False) -> int:
    """An ``O_DIRECTORY`` descriptor of ``directory`` (checked inside ``root``), for ``*at`` calls
    that then cannot be redirected by a symlink planted later. The caller closes it. ``resolved``:
    ``directory`` is what :func:`resolve_inside` just returned (or its parent), not resolved again;
    the opened directory's real location is still checked (and where the platform cannot tell
    it, the path is resolved and checked after all)."""
    checked = directory if resolved else resolve_inside(root, directory)
    fd = os.open(checked, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not _check_opened(root, fd, checked) and resolved:
            resolve_inside(root, checked)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes_inside(root: Path, path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular, singly linked file inside ``root``. Raises FileNotFoundError,
    IsADirectoryError or :class:`UnsafePath`."""
    resolved = resolve_inside(root, path, single_link=True)
    fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(str(resolved))
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(f"{resolved.name} is not a regular file")
        if info.st_nlink > 1:
            raise MultiplyLinked(f"{resolved.name} has {info.st_nlink} hard links; refusing to read it")
        _check_opened(root, fd, resolved)
        return handle.read()


def read_text_inside(root: Path, path: str | os.PathLike[str], errors: str = "strict") -> str:
    """:func:`read_bytes_inside` decoded as UTF-8."""
    return read_bytes_inside(root, path).decode("utf-8", errors=errors)


def is_safe_entry(root: Path, path: Path) -> bool:
    """For directory scans: False (with a warning) for an entry the guard refuses — a symlink out
    of ``root``, a file with more than one hard link."""
    try:
        resolve_inside(root, path, single_link=True)
    except UnsafePath as exc:
        log.warning("skipping %s: %s", path, exc)
        return False
    return True

"""Skills in cluster mode (the seed's sections 4.7 and 8): the ``skill_index`` a session starts
with, requirement checks, the ``<available_skills>`` prompt block, and the package cache that all
sessions on the machine share.

**Index.** ``start_session`` carries ``skill_index``: one entry per skill the agent may use,
``{skill_id, name, description, version, files, requires: {bins, anyBins, env, os}}``.
``parse_skill_index`` reads it leniently: the seed's spellings (``id``, ``file_inventory``,
``requires.binaries``, ``requires.env_vars``) are accepted too, a malformed entry is reported as a
problem and left out, and it never fails the whole index. ``check_requirements`` tells what this
machine lacks for an entry (``binary:jq``, ``anyBinary:rg|grep``, ``env:API_KEY``, ``os:darwin``);
``available_skills_block`` renders the entries that have nothing missing as the local engine does.

**Cache.** ``SkillPackageCache`` keeps whole package directories (``SKILL.md``, ``scripts/``,
``REFERENCE.md`` …) under ``<cache_dir>/<skill_id>/``. A directory holding ``SKILL.md`` is a cache
hit; otherwise the package is fetched with the caller's ``fetch(skill_id, version)`` (the control
plane's ``get_skill_package``), validated completely — paths, encodings, sizes, ``SKILL.md``
present — and only then written: into a fresh ``.<skill_id>~<random>.partial`` directory next to
the cache entries (same file system), every file fsynced, then renamed to ``<skill_id>`` in one
step. A crash or a bad package can therefore never leave a half-written ``<skill_id>/`` that a
later load would take for a hit; leftovers carry a ``.`` prefix, are never hits, and the next load
of that skill removes them.

Concurrency: loads of one skill in one process are serialised by an ``asyncio.Lock`` per skill and
the waiters see the first load's result, so the package is fetched once. Sessions run as separate
processes, so the whole load (re-check, fetch, install) also holds an exclusive ``flock`` on
``<cache_dir>/.<skill_id>.lock`` (POSIX): the second process waits, finds the hit, and fetches
nothing. The lock is only polled (``LOCK_NB``), so waiting stays cancellable, and the kernel drops
it when a holder dies. Where ``flock`` does not exist (Windows) the install still cannot corrupt
the cache: a load that finds the skill installed by someone else just before its own rename
discards its copy and uses that one, and every rename swaps a complete directory.

Versions: ``.clawlet-skill.json`` in the skill directory records the loaded version (the
requested one, or for ``latest`` the version the package names, if any). ``latest`` is served by
whatever is cached (the seed: the cache is never invalidated); a specific version that differs
from the recorded one is fetched and replaces the directory (the old one is moved aside first and
deleted after the new one is in place).

Degraded mode: when ``fetch`` raises (control plane unreachable, or it answered with an error),
a cached skill still loads — also when a different version was asked for, with a warning — and an
uncached one raises ``SkillUnavailable``, which the agent can plan around.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from clawlet.logs import swallowed
from clawlet.paths import UnsafePath, resolve_inside
from clawlet.secret_env import ENVIRON_WITH_SECRETS
from clawlet.skills.prompt import SkillListing, render_available_skills
from clawlet.skills.scanner import unmet_requirements
from clawlet.storage import atomic_write_bytes, atomic_write_json

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)

T = TypeVar("T")

SKILL_MD = "SKILL.md"
METADATA_FILE = ".clawlet-skill.json"
"""Written by the cache into each skill directory; a package may not contain it."""
LATEST = "latest"

SKILL_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A skill id is a directory name: no separators, no leading dot, no ``..``, at most 128 chars."""

MAX_PACKAGE_FILES = 1000
MAX_PACKAGE_BYTES = 50 * 1024 * 1024
"""Decoded size of all files of one package together."""
MAX_PATH_CHARS = 1024
MAX_PATH_DEPTH = 32
MAX_COMPONENT_BYTES = 255
MAX_VERSION_CHARS = 128
LOCK_TIMEOUT_SECONDS = 300.0
"""How long a load waits for another process that is loading the same skill."""
_LOCK_POLL_SECONDS = 0.05
_UNLOCKED_LEFTOVER_AGE = 3600.0

_TEXT_ENCODINGS = frozenset({"utf-8", "utf8"})
_DRIVE = re.compile(r"[A-Za-z]:")

# clawlet's own tool names (the seed's text says read_skill_file and bash, tools clawlet lacks)
READ_TOOL = "read_file"
SHELL_TOOL = "terminal"


# -- errors ----------------------------------------------------------------------------------


class SkillIndexError(ValueError):
    """A ``skill_index`` (or one entry of it) that cannot be used."""


class SkillUnavailable(Exception):
    """The skill cannot be used now: not cached and not fetchable, or its package was refused."""

    def __init__(self, skill_id: str, reason: str) -> None:
        super().__init__(f"skill {skill_id!r} is unavailable: {reason}")
        self.skill_id = skill_id
        self.reason = reason


class InvalidSkillId(SkillUnavailable):
    """The skill id could not be a directory name."""


class InvalidSkillPackage(SkillUnavailable):
    """The control plane sent a package that is refused (unsafe path, bad encoding, too big …)."""


def validate_skill_id(skill_id: str) -> str:
    if not isinstance(skill_id, str) or not SKILL_ID_PATTERN.fullmatch(skill_id) or ".." in skill_id:
        raise InvalidSkillId(
            str(skill_id),
            "a skill id must be 1-128 letters, digits, '.', '_' or '-', start with a letter or digit, "
            "and not contain '..'",
        )
    return skill_id


def _validate_version(skill_id: str, version: str) -> str:
    if (
        not isinstance(version, str)
        or not version.strip()
        or len(version) > MAX_VERSION_CHARS
        or any(ord(char) < 0x20 or ord(char) == 0x7F for char in version)
    ):
        raise SkillUnavailable(skill_id, f"invalid version {version!r}")
    return version.strip()


# -- the skill index -------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillRequirements:
    """What a skill needs on the machine (OpenClaw's ``metadata.openclaw.requires`` plus ``os``)."""

    bins: tuple[str, ...] = ()
    any_bins: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    os: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "bins": list(self.bins),
            "anyBins": list(self.any_bins),
            "env": list(self.env),
            "os": list(self.os),
        }


_REQUIREMENT_KEYS: dict[str, tuple[str, ...]] = {
    "bins": ("bins", "binaries"),
    "any_bins": ("anyBins", "any_bins", "anyBinaries"),
    "env": ("env", "env_vars"),
    "os": ("os",),
}


@dataclass(frozen=True)
class SkillIndexEntry:
    """One ``skill_index`` entry of ``start_session``."""

    skill_id: str
    name: str
    description: str = ""
    version: str = LATEST
    files: tuple[str, ...] = ()
    requires: SkillRequirements = field(default_factory=SkillRequirements)

    @classmethod
    def from_dict(cls, data: Any) -> SkillIndexEntry:
        """Parse one entry; ``SkillIndexError`` says what is wrong with a malformed one."""
        if not isinstance(data, Mapping):
            raise SkillIndexError(f"a skill index entry must be an object, got {type(data).__name__}")
        raw_id = data.get("skill_id", data.get("id"))
        if not isinstance(raw_id, str):
            raise SkillIndexError(f"entry has no string 'skill_id' (or 'id'): {raw_id!r}")
        try:
            skill_id = validate_skill_id(raw_id.strip())
        except InvalidSkillId as exc:
            raise SkillIndexError(f"skill {raw_id!r}: {exc.reason}") from exc
        where = f"skill {skill_id!r}"
        name = data.get("name")
        if name is None or (isinstance(name, str) and not name.strip()):
            name = skill_id
        if not isinstance(name, str):
            raise SkillIndexError(f"{where}: 'name' must be a string, got {type(name).__name__}")
        description = data.get("description")
        if description is None:
            description = ""
        if not isinstance(description, str):
            kind = type(description).__name__
            raise SkillIndexError(f"{where}: 'description' must be a string, got {kind}")
        version = data.get("version")
        if version is None or version == "":
            version = LATEST
        if isinstance(version, bool) or not isinstance(version, str | int | float):
            raise SkillIndexError(f"{where}: 'version' must be a string, got {type(version).__name__}")
        try:
            version = _validate_version(skill_id, str(version))
        except SkillUnavailable as exc:
            raise SkillIndexError(f"{where}: {exc.reason}") from exc
        raw_files = data.get("files", data.get("file_inventory"))
        files = _file_list(raw_files, where)
        raw_requires = data.get("requires")
        if raw_requires is None:
            raw_requires = {}
        if not isinstance(raw_requires, Mapping):
            raise SkillIndexError(f"{where}: 'requires' must be an object, got {type(raw_requires).__name__}")
        lists: dict[str, tuple[str, ...]] = {}
        for attribute, keys in _REQUIREMENT_KEYS.items():
            merged: list[str] = []
            for key in keys:
                for item in _string_list(raw_requires.get(key), f"{where}: requires.{key}"):
                    if item not in merged:
                        merged.append(item)
            lists[attribute] = tuple(merged)
        return cls(
            skill_id=skill_id,
            name=name.strip(),
            description=description.strip(),
            version=version,
            files=files,
            requires=SkillRequirements(**lists),
        )

    def to_dict(self) -> dict[str, Any]:
        """The entry in clawlet's spelling."""
        return {
            "skill_id": self.skill_id,
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "files": list(self.files),
            "requires": self.requires.to_dict(),
        }


def _has_control_chars(text: str) -> bool:
    return any(ord(char) < 0x20 or ord(char) == 0x7F for char in text)


def _string_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise SkillIndexError(f"{where} must be a string or a list of strings, got {type(value).__name__}")
    result: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip() or _has_control_chars(item):
            raise SkillIndexError(f"{where} must hold non-empty one-line strings, got {item!r}")
        result.append(item.strip())
    return result


def _file_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise SkillIndexError(f"{where}: 'files' must be a list, got {type(value).__name__}")
    files: list[str] = []
    for item in value:
        path = item.get("path") if isinstance(item, Mapping) else item
        if not isinstance(path, str) or not path.strip() or _has_control_chars(path):
            raise SkillIndexError(f"{where}: 'files' must hold one-line paths, got {item!r}")
        path = path.strip()
        if path not in files:
            files.append(path)
    return tuple(files)


@dataclass
class ParsedSkillIndex:
    entries: list[SkillIndexEntry]
    problems: list[str]
    """One message per entry that was left out (malformed or a duplicate skill id)."""


def parse_skill_index(raw: Any) -> ParsedSkillIndex:
    """Parse ``start_session``'s ``skill_index``; bad entries become problems, never an exception.

    Only a ``skill_index`` that is not a list at all raises ``SkillIndexError``.
    """
    if raw is None:
        return ParsedSkillIndex([], [])
    if not isinstance(raw, list | tuple):
        raise SkillIndexError(f"skill_index must be a list, got {type(raw).__name__}")
    entries: list[SkillIndexEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        try:
            entry = SkillIndexEntry.from_dict(item)
        except SkillIndexError as exc:
            problems.append(f"skill_index[{index}]: {exc}")
            continue
        if entry.skill_id in seen:
            problems.append(f"skill_index[{index}]: duplicate skill id {entry.skill_id!r} (kept the first)")
            continue
        seen.add(entry.skill_id)
        entries.append(entry)
    for problem in problems:
        log.warning("skill index: %s", problem)
    return ParsedSkillIndex(entries, problems)


# -- requirements ----------------------------------------------------------------------------


def check_requirements(
    entry: SkillIndexEntry | Mapping[str, Any],
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] = ENVIRON_WITH_SECRETS,
    platform: str = sys.platform,
) -> tuple[bool, list[str]]:
    """(all met, what is missing) for one entry on this machine.

    Missing items are labelled as for local skills (``bin:``, ``anyBin:``, ``env:``, ``os:``; see
    :func:`clawlet.skills.scanner.unmet_requirements`, the one check both use).
    """
    if not isinstance(entry, SkillIndexEntry):
        entry = SkillIndexEntry.from_dict(entry)
    requires = entry.requires
    missing = unmet_requirements(
        requires.bins,
        requires.any_bins,
        requires.env,
        requires.os,
        which=which,
        environ=environ,
        platform=platform,
    )
    return not missing, missing


# -- the <available_skills> block ------------------------------------------------------------


CLUSTER_SKILLS_HINT = (
    "When a task matches a skill, first read its SKILL.md (the full instructions) with the "
    "{read_tool} tool. Run a skill's scripts (in scripts/ of its directory) with the {shell_tool} tool."
)
"""What follows the block in a session's prompt: the tools a cluster session reads skills with."""


def available_skills_block(
    entries: Iterable[SkillIndexEntry],
    cache_dir: Path,
    *,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] = ENVIRON_WITH_SECRETS,
    platform: str = sys.platform,
    read_tool: str = READ_TOOL,
    shell_tool: str = SHELL_TOOL,
) -> str:
    """The skill index for a session's system prompt; "" when no skill is available.

    Entries whose requirements are not met are left out; the rest render as the local engine's
    (:func:`clawlet.skills.prompt.render_available_skills`, each ``location`` the ``SKILL.md`` in
    ``cache_dir``), followed by :data:`CLUSTER_SKILLS_HINT` naming ``read_tool`` and ``shell_tool``.
    """
    listings: list[SkillListing] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.skill_id in seen or not check_requirements(entry, which, environ, platform)[0]:
            continue
        seen.add(entry.skill_id)
        location = str(Path(cache_dir) / entry.skill_id / SKILL_MD)
        listings.append(SkillListing(entry.name, entry.description, location))
    if not listings:
        return ""
    hint = CLUSTER_SKILLS_HINT.format(read_tool=read_tool, shell_tool=shell_tool)
    return f"{render_available_skills(listings)}\n{hint}\n"


# -- packages --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackageFile:
    path: str
    """Relative, ``/``-separated, validated."""
    data: bytes


@dataclass(frozen=True)
class SkillPackage:
    files: list[PackageFile]
    version: str | None
    """The version the package names, if it names one."""


def _check_package_path(skill_id: str, index: int, path: Any) -> str:
    """Lexical checks: the path can only name a file inside the skill directory."""

    def refuse(reason: str) -> InvalidSkillPackage:
        return InvalidSkillPackage(skill_id, f"files[{index}] path {path!r}: {reason}")

    if not isinstance(path, str) or not path:
        raise refuse("missing or empty")
    if len(path) > MAX_PATH_CHARS:
        raise refuse(f"longer than {MAX_PATH_CHARS} characters")
    if "\x00" in path:
        raise refuse("contains a NUL byte")
    if _has_control_chars(path):
        raise refuse("contains a control character")
    if "\\" in path:
        raise refuse("contains a backslash")
    if path.startswith("/") or _DRIVE.match(path):
        raise refuse("is absolute")
    parts = path.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise refuse(f"is nested deeper than {MAX_PATH_DEPTH} levels")
    if parts[0].startswith("~"):
        raise refuse("starts with '~'")
    for part in parts:
        if part in ("", ".", ".."):
            raise refuse("has an empty, '.' or '..' component")
        if part != part.strip():
            raise refuse("has a component with leading or trailing whitespace")
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise refuse("is not valid Unicode") from exc
        if size > MAX_COMPONENT_BYTES:
            raise refuse(f"has a component longer than {MAX_COMPONENT_BYTES} bytes")
    if path == METADATA_FILE:
        raise refuse("is reserved for the cache's own metadata")
    return path


def parse_package(
    skill_id: str,
    response: Any,
    *,
    max_files: int = MAX_PACKAGE_FILES,
    max_bytes: int = MAX_PACKAGE_BYTES,
) -> SkillPackage:
    """Validate a ``get_skill_package`` answer completely; ``InvalidSkillPackage`` if anything is off.

    Accepted shapes: ``{"package": {"files": [...]}}`` (the seed) and ``{"files": [...]}``; a file
    is ``{"path", "content", "encoding": "utf-8" | "base64"}`` (``encoding`` defaults to UTF-8).
    """
    if not isinstance(response, Mapping):
        raise InvalidSkillPackage(skill_id, f"the package is not an object but {type(response).__name__}")
    package = response.get("package", response)
    if not isinstance(package, Mapping):
        raise InvalidSkillPackage(skill_id, "'package' is not an object")
    raw_files = package.get("files")
    if not isinstance(raw_files, list):
        raise InvalidSkillPackage(skill_id, "the package has no 'files' list")
    if len(raw_files) > max_files:
        raise InvalidSkillPackage(skill_id, f"the package has {len(raw_files)} files (at most {max_files})")

    # 1. every path and encoding, before decoding anything
    checked: list[tuple[str, str, bool]] = []
    seen: dict[str, str] = {}
    for index, item in enumerate(raw_files):
        if not isinstance(item, Mapping):
            raise InvalidSkillPackage(skill_id, f"files[{index}] is not an object")
        kind = item.get("type", "file")
        if kind != "file":
            raise InvalidSkillPackage(skill_id, f"files[{index}] is a {kind!r}, not a regular file")
        path = _check_package_path(skill_id, index, item.get("path"))
        key = path.casefold()
        if key in seen:
            raise InvalidSkillPackage(skill_id, f"duplicate path {path!r} (also {seen[key]!r})")
        seen[key] = path
        encoding = item.get("encoding") or "utf-8"
        if not isinstance(encoding, str) or encoding.lower() not in (*_TEXT_ENCODINGS, "base64"):
            raise InvalidSkillPackage(skill_id, f"{path!r} has unsupported encoding {encoding!r}")
        content = item.get("content")
        if not isinstance(content, str):
            raise InvalidSkillPackage(skill_id, f"{path!r} has no string 'content'")
        checked.append((path, content, encoding.lower() == "base64"))
    for key, path in seen.items():
        parts = key.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in seen:
                raise InvalidSkillPackage(skill_id, f"{seen[parent]!r} is a file and a parent of {path!r}")
    if SKILL_MD not in seen.values():
        raise InvalidSkillPackage(skill_id, f"the package has no top-level {SKILL_MD}")

    # 2. contents, with a running size limit
    files: list[PackageFile] = []
    total = 0
    for path, content, is_base64 in checked:
        estimate = len(content) * 3 // 4 if is_base64 else len(content)
        if total + estimate > max_bytes:
            raise InvalidSkillPackage(skill_id, f"the package is larger than {max_bytes} bytes")
        if is_base64:
            try:
                data = base64.b64decode("".join(content.split()), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidSkillPackage(skill_id, f"{path!r} is not valid base64: {exc}") from exc
        else:
            try:
                data = content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidSkillPackage(skill_id, f"{path!r} is not valid UTF-8 text: {exc}") from exc
        total += len(data)
        if total > max_bytes:
            raise InvalidSkillPackage(skill_id, f"the package is larger than {max_bytes} bytes")
        files.append(PackageFile(path, data))

    version = package.get("version", response.get("version"))
    if isinstance(version, bool) or not isinstance(version, str | int | float) or not str(version).strip():
        version = None
    return SkillPackage(files, None if version is None else str(version).strip())


FetchPackage = Callable[[str, str], Awaitable[Mapping[str, Any]]]
"""``fetch(skill_id, version)``: the control plane's ``get_skill_package`` answer."""


async def _run_to_completion(func: Callable[[], T]) -> T:
    """Run blocking ``func`` in a thread; if the caller is cancelled, wait for it to finish first.

    The install must not outlive the locks that protect it.
    """
    task = asyncio.ensure_future(asyncio.to_thread(func))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with swallowed(log, "a shared skill load failed after its waiter was cancelled"):
            await task
        raise


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            path.unlink()


class SkillPackageCache:
    """Whole skill packages under ``<cache_dir>/<skill_id>/``, shared by every session (see module)."""

    def __init__(
        self,
        cache_dir: Path,
        fetch: FetchPackage,
        *,
        max_files: int = MAX_PACKAGE_FILES,
        max_bytes: int = MAX_PACKAGE_BYTES,
        lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self._fetch = fetch
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.lock_timeout = lock_timeout
        self._locks: dict[str, asyncio.Lock] = {}

    def skill_dir(self, skill_id: str) -> Path:
        return self.cache_dir / validate_skill_id(skill_id)

    def is_cached(self, skill_id: str) -> bool:
        return (self.skill_dir(skill_id) / SKILL_MD).is_file()

    def cached_version(self, skill_id: str) -> str | None:
        """The version recorded for the cached copy; None when not cached or not recorded."""
        if not self.is_cached(skill_id):
            return None
        try:
            data = json.loads((self.skill_dir(skill_id) / METADATA_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        version = data.get("version") if isinstance(data, dict) else None
        return version if isinstance(version, str) else None

    def _is_hit(self, skill_id: str, version: str) -> bool:
        if version == LATEST:
            return self.is_cached(skill_id)
        return self.cached_version(skill_id) == version

    def read_skill_md(self, skill_id: str) -> str:
        """The cached ``SKILL.md``; ``SkillUnavailable`` when the skill is not cached."""
        skill_dir = self.skill_dir(skill_id)
        try:
            return resolve_inside(skill_dir, SKILL_MD).read_text(encoding="utf-8")
        except UnsafePath as exc:
            raise SkillUnavailable(skill_id, f"its {SKILL_MD} points outside the skill directory") from exc
        except FileNotFoundError as exc:
            raise SkillUnavailable(skill_id, "it is not cached; load it first") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise SkillUnavailable(skill_id, f"cannot read its {SKILL_MD}: {exc}") from exc

    async def load(self, skill_id: str, version: str = LATEST) -> Path:
        """The skill's directory, fetching the package first on a miss (see the module docstring)."""
        validate_skill_id(skill_id)
        version = _validate_version(skill_id, version)
        target = self.cache_dir / skill_id
        if self._is_hit(skill_id, version):
            return target
        lock = self._locks.setdefault(skill_id, asyncio.Lock())
        async with lock, self._process_lock(skill_id):
            if self._is_hit(skill_id, version):
                return target
            self._remove_leftovers(skill_id)
            try:
                response = await self._fetch(skill_id, version)
            except Exception as exc:
                if self.is_cached(skill_id):
                    log.warning(
                        "skill cache: cannot fetch %s version %s (%s); using the cached version %s",
                        skill_id,
                        version,
                        exc,
                        self.cached_version(skill_id) or "(unknown)",
                    )
                    return target
                raise SkillUnavailable(
                    skill_id, f"it is not cached and fetching it failed ({type(exc).__name__}: {exc})"
                ) from exc
            package = await asyncio.to_thread(  # decoding up to max_bytes of base64 stays off the loop
                parse_package, skill_id, response, max_files=self.max_files, max_bytes=self.max_bytes
            )
            recorded = version if version != LATEST else (package.version or LATEST)
            try:
                await _run_to_completion(lambda: self._install(skill_id, package, recorded, version))
            except OSError as exc:
                if self._is_hit(skill_id, version):  # another process's rename won
                    return target
                raise SkillUnavailable(skill_id, f"cannot write it to the cache: {exc}") from exc
            log.info("skill cache: loaded %s (%s, %d files)", skill_id, recorded, len(package.files))
        return target

    @asynccontextmanager
    async def _process_lock(self, skill_id: str) -> AsyncIterator[None]:
        """Exclusive ``flock`` on ``.<skill_id>.lock`` across processes (polled, so cancellable)."""
        if sys.platform == "win32":
            yield
            return
        lock_path = self.cache_dir / f".{skill_id}.lock"
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise SkillUnavailable(
                skill_id, f"it is not cached and the cache is not writable: {exc}"
            ) from exc
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SkillUnavailable(
                            skill_id, "another process has been loading it for too long"
                        ) from None
                    await asyncio.sleep(_LOCK_POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _remove_leftovers(self, skill_id: str) -> None:
        """Delete partial/old directories an interrupted load of this skill left behind.

        Called with the process lock held, so no other load of this skill is in progress; without
        ``flock`` only leftovers older than an hour go.
        """
        cutoff = time.time() - _UNLOCKED_LEFTOVER_AGE if sys.platform == "win32" else None
        if not self.cache_dir.is_dir():
            return
        for leftover in self.cache_dir.glob(f".{skill_id}~*"):
            try:
                if cutoff is not None and leftover.lstat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            log.info("skill cache: removing leftover %s", leftover.name)
            _remove_path(leftover)

    def _install(self, skill_id: str, package: SkillPackage, version: str, requested: str) -> None:
        """Write the package into a fresh directory and rename it into place (runs in a thread)."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{skill_id}~", suffix=".partial", dir=self.cache_dir))
        try:
            root = staging.resolve()
            destinations: list[Path] = []
            for item in package.files:  # the path guard for every file before the first write
                destination = resolve_inside(root, item.path)
                if destination != root.joinpath(*item.path.split("/")):
                    raise InvalidSkillPackage(skill_id, f"path {item.path!r} does not stay where it says")
                destinations.append(destination)
            for item, destination in zip(package.files, destinations, strict=True):
                atomic_write_bytes(destination, item.data)
            atomic_write_json(
                staging / METADATA_FILE,
                {
                    "skill_id": skill_id,
                    "version": version,
                    "fetched_at": datetime.now(UTC).isoformat(),
                    "files": [item.path for item in package.files],
                },
            )
            if self._is_hit(skill_id, requested):  # only without flock: another process was faster
                _remove_path(staging)
                return
            self._swap_into_place(skill_id, staging)
        except UnsafePath as exc:
            _remove_path(staging)
            raise InvalidSkillPackage(skill_id, str(exc)) from exc
        except BaseException:
            _remove_path(staging)
            raise

    def _swap_into_place(self, skill_id: str, staging: Path) -> None:
        target = self.cache_dir / skill_id
        old: Path | None = None
        if target.exists() or target.is_symlink():
            old = self.cache_dir / f".{skill_id}~{uuid.uuid4().hex}.old"
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except OSError:
            if old is not None and not target.exists():
                with suppress(OSError):
                    os.rename(old, target)
            raise
        _fsync_directory(self.cache_dir)
        if old is not None:
            _remove_path(old)

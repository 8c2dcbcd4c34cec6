"""Secrets out of the process environment, into memory.

Any process of the same user can read the environment a process was started with from
``/proc/<pid>/environ`` (a tool's ``cat /proc/$PPID/environ``, for one), and removing a variable from
``os.environ`` later does not change that file. So at the start of a long-running command
(``clawlet serve``, ``chat``, ``exec-plane``, ``control-plane serve``) :func:`move_secrets_to_memory`
takes every secret out of the environment: the process re-executes itself once, same pid, same
command line, with the secrets removed from its environment and written to a pipe it inherits (the
descriptor's number in :data:`SECRETS_FD_VAR`, which is not secret). The new image reads the pipe
once with :func:`receive_secrets`, closes it, and keeps the values in memory only
(:func:`held_secrets`): they are never put back into ``os.environ``, so no child inherits them.
:class:`clawlet.config.Settings` reads them as if they were environment variables.

A secret is a variable clawlet knows as one (:data:`KNOWN_SECRET_NAMES`) or one whose name says so
(``…_KEY``, ``…_TOKEN``, ``…SECRET…``, ``…PASSWORD``, ``…_CREDENTIALS``, ``…DATABASE_URL``, ...; see
:func:`is_secret_name`). Values from a ``.env`` file never enter the environment in the first place.
When the re-exec is impossible the process carries on as before, with a warning.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from types import MappingProxyType
from typing import Final

SECRETS_FD_VAR: Final = "CLAWLET_SECRETS_FD"
"""Names the inherited descriptor the secrets arrive on (set only for the re-executed image)."""

KNOWN_SECRET_NAMES: Final = frozenset(
    {
        "OPENAI_API_KEY",
        "DEEPSEEK_API_KEY",
        "ANTHROPIC_API_KEY",
        "CLAWLET_LLM_API_KEY",
        "CLAWLET_API_TOKEN",
        "CLAWLET_API_KEYS",
        "API_KEY",
        "API_KEYS",
        "OPENCLAW_GATEWAY_TOKEN",
        "CLAWLET_GATEWAY_TOKEN",
        "CLAWLET_CP_JWT_SECRET",
        "DATABASE_URL",
        "CLAWLET_DATABASE_URL",
        "CLAWLET_CP_DATABASE_URL",
        "CLAWLET_REDIS_URL",
        "VM_TOKEN",
        "VM_TICKET",
    }
)
"""Every key, token and connection URL clawlet itself reads."""

SECRET_WORDS: Final = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "COOKIE",
        "DSN",
        "PAT",
    }
)
"""A name with one of these among its ``_``-separated words is a secret (``AWS_SECRET_ACCESS_KEY``)."""

SECRET_SUFFIXES: Final = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "DATABASE_URL", "DB_URL")
"""A name ending so is a secret even without a ``_`` before it (``PGPASSWORD``)."""

Execve = Callable[[str, list[str], dict[str, str]], object]

_held: dict[str, str] = {}
_received = False  # this image was started by move_secrets_to_memory (so it never re-executes)


def is_secret_name(name: str) -> bool:
    """Whether the variable ``name`` holds a secret (by clawlet's list or by the look of its name)."""
    upper = name.upper()
    if upper == SECRETS_FD_VAR:
        return False
    if upper in KNOWN_SECRET_NAMES or upper.endswith(SECRET_SUFFIXES):
        return True
    return any(word in SECRET_WORDS for word in upper.split("_"))


def secrets_in(environ: Mapping[str, str]) -> dict[str, str]:
    """The non-empty secret variables of ``environ``."""
    return {name: value for name, value in environ.items() if value and is_secret_name(name)}


def held_secrets() -> Mapping[str, str]:
    """The secrets this process moved out of its environment at start (read-only)."""
    return MappingProxyType(_held)


def hold_secrets(secrets: Mapping[str, str]) -> None:
    """Keep ``secrets`` in memory with the held ones (an exec-plane session process gets its
    parent's this way, to mask them in tool output)."""
    _held.update(secrets)


class EnvironWithSecrets(Mapping[str, str]):
    """``os.environ`` (live) with the held secrets added: for code that looks variables up by name
    (skill requirements, the exec plane's credentials) and must still find the moved ones."""

    def __getitem__(self, name: str) -> str:
        if name in os.environ:
            return os.environ[name]
        return _held[name]

    def __iter__(self) -> Iterator[str]:
        yield from os.environ
        yield from (name for name in _held if name not in os.environ)

    def __len__(self) -> int:
        return len(os.environ) + sum(1 for name in _held if name not in os.environ)


ENVIRON_WITH_SECRETS: Final = EnvironWithSecrets()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def receive_secrets(environ: MutableMapping[str, str] | None = None) -> None:
    """In the re-executed image: read the secrets from the pipe named by :data:`SECRETS_FD_VAR`
    into memory and close it. Does nothing in a process that was not started that way."""
    global _received
    env = os.environ if environ is None else environ
    raw = env.pop(SECRETS_FD_VAR, None)
    if raw is None:
        return
    _received = True
    try:
        fd = int(raw)
        if fd <= 2 or not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise ValueError(f"descriptor {raw} is not an inherited pipe")
        with os.fdopen(fd, "rb") as pipe:
            data = json.loads(pipe.read().decode("utf-8"))
        if not isinstance(data, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in data.items()
        ):
            raise ValueError("the pipe held no name → value object")
    except (ValueError, OSError) as exc:
        _warn(f"cannot read the secrets passed in {SECRETS_FD_VAR}={raw}: {exc}")
        return
    hold_secrets(data)


def _write_all(fd: int, payload: bytes) -> None:
    """Write ``payload`` into the (empty) pipe without blocking: it must fit in the pipe's buffer,
    since the reader only starts after the exec."""
    os.set_blocking(fd, False)
    view = memoryview(payload)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            raise OSError(f"the secrets ({len(payload)} bytes) do not fit in a pipe") from None
        view = view[written:]


def move_secrets_to_memory(
    *,
    command_line: Sequence[str] | None = None,
    executable: str | None = None,
    environ: Mapping[str, str] | None = None,
    execve: Execve = os.execve,
) -> None:
    """Re-execute this process once with the secrets removed from its environment and passed over
    a pipe (see the module docstring); returns only when there is nothing to move, when this image
    already is the re-executed one, or when the exec failed (then with a warning, the environment
    unchanged). ``command_line`` defaults to ``sys.orig_argv`` (so ``python -m clawlet …``, the
    ``clawlet`` script and interpreter options all come back the same), ``executable`` to
    ``sys.executable``."""
    if _received or os.name != "posix":
        return
    env = os.environ if environ is None else environ
    secrets = secrets_in(env)
    if not secrets:
        return
    command = list(sys.orig_argv if command_line is None else command_line)
    program = sys.executable if executable is None else executable
    if not program or not command:
        _warn("cannot restart without the secrets in the environment: the interpreter is unknown")
        return
    scrubbed = {name: value for name, value in env.items() if name not in secrets}
    try:
        read_fd, write_fd = os.pipe()
    except OSError as exc:
        _warn(f"cannot restart without the secrets in the environment: {exc}")
        return
    try:
        try:
            _write_all(write_fd, json.dumps(secrets).encode("utf-8"))
        finally:
            os.close(write_fd)
        os.set_inheritable(read_fd, True)
        scrubbed[SECRETS_FD_VAR] = str(read_fd)
        sys.stdout.flush()
        sys.stderr.flush()
        execve(program, [program, *command[1:]], scrubbed)
    except OSError as exc:
        _warn(
            f"cannot restart without the secrets in the environment ({exc}); they stay readable "
            f"in /proc/{os.getpid()}/environ"
        )
    finally:
        os.close(read_fd)

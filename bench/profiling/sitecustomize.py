"""cProfile for the processes a benchmark starts (``bench/cluster.py --profile DIR``).

With this directory on ``PYTHONPATH`` and ``BENCH_PROFILE_DIR`` set, every clawlet server process
started from then on — ``clawlet serve``, ``clawlet control-plane serve``, ``clawlet exec-plane``
and the session processes (forked from the session template, or spawned) — profiles its main
thread (the asyncio loop) with :mod:`cProfile` and writes ``<role>-<pid>.prof`` to that directory
when it exits normally (``atexit``; a forked session process runs its exit functions too) and on
``SIGUSR1`` (what it has so far, then it goes on: for a process that may be killed on its way out). Other
interpreters (the template itself, tools, the CLI) are left alone. cProfile slows the profiled code
down (roughly 1.5–2x for pure Python): compare shares between functions, not times against an
unprofiled run.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import signal

_DIR = os.environ.get("BENCH_PROFILE_DIR", "")
_ROLES = (
    (b"control-plane", "control-plane"),
    (b"exec-plane", "exec-plane"),
    (b"clawlet.execplane.session_child", "session"),
    (b"serve", "serve"),
)
_state: dict[str, object] = {}


def _role() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except OSError:
        return ""
    if b"clawlet.execplane.session_template" in words:
        return "template"
    for word, role in _ROLES:
        if word in words:
            return role
    return ""


def _start(role: str) -> None:
    profile = cProfile.Profile()
    _state.update(profile=profile, pid=os.getpid(), role=role)
    profile.enable()


def _dump() -> None:
    profile = _state.get("profile")
    if isinstance(profile, cProfile.Profile) and _state.get("pid") == os.getpid():
        profile.disable()
        profile.dump_stats(os.path.join(_DIR, f"{_state['role']}-{os.getpid()}.prof"))


def _dump_now(_signum: int, _frame: object) -> None:
    profile = _state.get("profile")
    if isinstance(profile, cProfile.Profile) and _state.get("pid") == os.getpid():
        _dump()
        profile.enable()


def _forked() -> None:  # a session process forked from the template: profile it alone
    _start("session")


if _DIR:
    _ROLE = _role()
    if _ROLE == "template":
        os.register_at_fork(after_in_child=_forked)
        atexit.register(_dump)
    elif _ROLE:
        _start(_ROLE)
        atexit.register(_dump)
        signal.signal(signal.SIGUSR1, _dump_now)

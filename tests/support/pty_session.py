"""Drive a terminal program (OpenClaw's TUI) in a real pseudo-terminal, as a user at a keyboard.

``PtySession(command, env=…, cwd=…)`` starts the program on a fresh pty (120×40, its own process
group), keeps everything it drew, and offers :meth:`PtySession.send_keys` (keystrokes) and
:meth:`PtySession.wait_for` (until some texts are on screen in order, ANSI escapes stripped, or a
generous deadline passes; optionally only what was drawn after a :meth:`PtySession.mark`).
:meth:`PtySession.close` ends the whole group. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path
from types import TracebackType

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78]")


class PtySession:
    """One program on a pseudo-terminal; use it as a context manager."""

    def __init__(
        self, command: list[str], *, env: dict[str, str], cwd: Path, rows: int = 40, cols: int = 120
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.master = master
        self.raw = b""
        try:
            self.process = subprocess.Popen(
                command, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
            )
        finally:
            os.close(slave)

    @property
    def screen(self) -> str:
        """Everything drawn so far as text (escape sequences removed)."""
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def _read(self, timeout: float) -> bool:
        """Read what is ready within ``timeout``; False once the program closed the terminal."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:
            return False
        self.raw += chunk
        return bool(chunk)

    def mark(self) -> int:
        """A position in what was drawn: :meth:`wait_for` ``since`` it looks only at what follows."""
        return len(self.raw)

    def drawn_since(self, mark: int) -> str:
        return ANSI.sub("", self.raw[mark:].decode("utf-8", "replace"))

    def wait_for(self, *texts: str, timeout: float = 60.0, since: int = 0) -> bool:
        """Whether ``texts`` appeared on screen in this order (after the :meth:`mark` ``since``)
        before the deadline (or before the program ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._drawn_in_order(texts, since):
                return True
            if not self._read(0.2):
                break
        return self._drawn_in_order(texts, since)

    def _drawn_in_order(self, texts: tuple[str, ...], since: int) -> bool:
        drawn, position = self.drawn_since(since), 0
        for text in texts:
            found = drawn.find(text, position)
            if found < 0:
                return False
            position = found + len(text)
        return True

    def send_keys(self, keys: str) -> None:
        os.write(self.master, keys.encode("utf-8"))

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        with contextlib.suppress(OSError):
            os.close(self.master)

    def __enter__(self) -> PtySession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

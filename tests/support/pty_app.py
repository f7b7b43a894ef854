"""sparktui (or any program) on a real pseudo-terminal, read through a terminal emulator (pyte):
what a person over SSH sees, keys sent as the terminal sends them (bursts included)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time
from collections.abc import Callable, Mapping, Sequence

import pyte


class PtyApp:
    """A child process on a pty of `cols`×`rows`; `screen` is what the terminal shows."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cols: int = 80, rows: int = 24) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.started = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its terminal
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            try:
                os.execvpe(argv[0], list(argv), {**env, "TERM": "xterm-256color", "COLUMNS": "", "LINES": ""})
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.exited: int | None = None

    def pump(self, timeout: float = 0.05) -> bool:
        """Read what the program wrote within `timeout`; False once it has closed the terminal."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        if not data:
            return False
        self.stream.feed(data)
        return True

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait_for(self, ready: Callable[[PtyApp], bool], timeout: float = 30.0, what: str = "the screen") -> float:
        """Seconds since start when `ready(self)` first held; AssertionError with the screen if not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = self.pump()
            if ready(self):
                return time.monotonic() - self.started
            if not alive:
                break
        raise AssertionError(f"{what}: not within {timeout} s; the screen:\n{self.text()}")

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        """End the child (ours: started here), Ctrl+Q first."""
        if self.exited is None:
            try:
                self.send(b"\x11")
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    self.pump(0.05)
                    done, status = os.waitpid(self.pid, os.WNOHANG)
                    if done:
                        self.exited = status
                        break
                else:
                    os.kill(self.pid, signal.SIGKILL)
                    self.exited = os.waitpid(self.pid, 0)[1]
            except (OSError, ChildProcessError):
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass

"""The supervisor loop's sleep: poll() until something happens, never a busy wait.

Five things wake it: a write to vLLM's log (inotify, through LogTail), a request on the socket or a
signal (the wake pipe: os.write takes no lock, so a signal handler may call wake()), news from the
guard (the same pipe, counted as "guard": a sample that moved 0.5 GiB, a new action or alert),
vLLM's exit (its pidfd), or the next timer the loop asked for. Why it woke is counted (`status`
shows it).
"""

from __future__ import annotations

import collections
import os
import select

from sparktui.runtime.server.logtail import LogTail


class Wakeup:
    """The wake pipe and the count of why the loop woke; one Sleep per launch of vLLM."""

    def __init__(self) -> None:
        self.fd, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.wakes: collections.Counter[str] = collections.Counter()  # why the loop woke
        self._why: set[str] = set()  # reasons other than "request" given to wake() since the last drain

    def wake(self, why: str = "request") -> None:
        """Wake the loop from its poll() (another thread, or a signal handler: os.write takes no lock;
        a signal handler keeps the default `why`, which touches no set)."""
        if why != "request":
            self._why.add(why)
        try:
            os.write(self._w, b"x")
        except OSError:  # full (it is awake already) or closed (it has finished)
            pass

    def sleeper(self, follower: LogTail, pid: int) -> Sleep:
        """The poll set of one run of vLLM: its log, the wake pipe and its API server's pidfd."""
        return Sleep(self, follower, pid)

    def reasons(self) -> set[str]:
        """The reasons given since the last call (after a drain: a wake() racing it counts next time)."""
        why, self._why = self._why, set()
        return why

    def drain(self) -> None:
        try:
            while os.read(self.fd, 256):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        wake_w, self._w = self._w, -1  # a late wake() now fails harmlessly (EBADF)
        os.close(wake_w)
        os.close(self.fd)


class Sleep:
    def __init__(self, wakeup: Wakeup, follower: LogTail, pid: int) -> None:
        self._wakeup, self._follower = wakeup, follower
        self._poller = select.poll()
        self.log_fd = follower.fileno()  # armed before the first read: no write goes unnoticed
        if self.log_fd is not None:
            self._poller.register(self.log_fd, select.POLLIN)
        self._poller.register(wakeup.fd, select.POLLIN)
        self._root_fd = _pidfd(pid)  # readable the moment vLLM's API server exits
        if self._root_fd is not None:
            self._poller.register(self._root_fd, select.POLLIN)

    def sleep(self, timeout: float) -> None:
        ready = self._poller.poll(timeout * 1000)
        wakes = self._wakeup.wakes
        if not ready:
            wakes["timer"] += 1
        for fd, _ in ready:
            if fd == self._wakeup.fd:
                self._wakeup.drain()
                why = self._wakeup.reasons()
                for reason in why or ("request",):
                    wakes[reason] += 1
            elif fd == self.log_fd:
                wakes["log"] += 1
                self._follower.consume()
            elif fd == self._root_fd:
                wakes["exit"] += 1
                self._poller.unregister(fd)  # stays readable: returncode() sees it from here on

    def close(self) -> None:
        if self._root_fd is not None:
            os.close(self._root_fd)


def _pidfd(pid: int) -> int | None:
    """A pidfd (readable once the process exits), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None

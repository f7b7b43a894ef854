"""Follow the kernel log while a server runs, for the guard's tripwire (core/kernel_log.py).

Where it reads, in order:
- `/dev/kmsg`, where this process may read it (root, or CAP_SYSLOG: DGX OS sets
  kernel.dmesg_restrict=1). It seeks to the end first, so lines from before the launch never count.
- `journalctl -f -o json -n 0` (new entries only) for a member of `adm` or `systemd-journal`,
  matching the kernel's own records and those journald files under the NVRM identifier (a line
  written to /dev/kmsg from user space carries facility "user", which `-k` alone leaves out).
- nowhere: `access()` says so and how to allow it; preflight prints it and the guard watches
  MemAvailable alone.

Cost at rest: one thread blocked in poll() on the log and a wake pipe; it wakes only when the
kernel logs a line (no polling). The test seams `SPARKTUI_KMSG` (a path for /dev/kmsg) and
`SPARKTUI_JOURNALCTL` (the journalctl to run) let a test take either source away.
"""

from __future__ import annotations

import errno
import grp
import os
import re
import select
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sparktui.core.kernel_log import KernelEvent, KernelLine, classify, parse_journal_entry, parse_kmsg_record

KMSG_ENV = "SPARKTUI_KMSG"
# Tests write real NVRM lines to the one /dev/kmsg every guard on the box reads: each marks its lines
# "[sparktui-test ID]", and a guard counts a marked line only when its own SPARKTUI_KERNEL_TEST_ID is
# that ID (the driver never writes the marker, so real lines are matched as they are).
TEST_ID_ENV = "SPARKTUI_KERNEL_TEST_ID"
_TEST_MARK = re.compile(r"\[sparktui-test ([A-Za-z0-9_-]+)\]")
JOURNALCTL_ENV = "SPARKTUI_JOURNALCTL"
JOURNAL_GROUPS = ("adm", "systemd-journal")
HOW_TO_ALLOW = (
    "to let it, run sparktui as root or with CAP_SYSLOG (`sudo setcap cap_syslog+ep` on the Python it runs), "
    "or add your user to the systemd-journal group (`sudo usermod -aG systemd-journal $USER`, then log in again)"
)

Source = Literal["kmsg", "journal"]


@dataclass(frozen=True)
class KernelAccess:
    """Where the tripwire can read the kernel log, or why it cannot."""

    source: Source | None
    detail: str  # the path or command, or why neither works

    def text(self) -> str:
        if self.source is not None:
            return f"kernel tripwire reads {self.detail}"
        return f"the guard cannot see driver errors (NVRM NV_ERR_NO_MEMORY): {self.detail}; {HOW_TO_ALLOW}"


def kmsg_path() -> str:
    return os.environ.get(KMSG_ENV) or "/dev/kmsg"


def journal_argv() -> list[str] | None:
    exe = os.environ.get(JOURNALCTL_ENV) or shutil.which("journalctl")
    if not exe or not os.access(exe, os.X_OK):
        return None
    return [exe, "-f", "-o", "json", "-n", "0", "_TRANSPORT=kernel", "+", "SYSLOG_IDENTIFIER=NVRM"]


def _in_journal_group() -> bool:
    if os.geteuid() == 0:
        return True
    groups = set(os.getgroups()) | {os.getegid()}
    for name in JOURNAL_GROUPS:
        try:
            if grp.getgrnam(name).gr_gid in groups:
                return True
        except KeyError:
            continue
    return False


def _open_kmsg(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.lseek(fd, 0, os.SEEK_END)  # lines from before now never count
    except OSError:
        os.close(fd)
        raise
    return fd


def access() -> KernelAccess:
    """Which source the tripwire would read now (it opens /dev/kmsg to see; nothing is kept)."""
    path = kmsg_path()
    try:
        os.close(_open_kmsg(path))
        return KernelAccess("kmsg", path)
    except OSError as exc:
        kmsg_why = f"{path}: {exc.strerror or exc}"
    argv = journal_argv()
    if argv is not None and _in_journal_group():
        return KernelAccess("journal", " ".join(argv))
    journal_why = "journalctl is not installed" if argv is None else f"not in the {' or '.join(JOURNAL_GROUPS)} group"
    return KernelAccess(None, f"{kmsg_why}; {journal_why}")


class KernelWatch:
    """Follows the kernel log in a daemon thread and calls `on_event` (on that thread) for each NVRM
    line that matters (core/kernel_log.classify). `start()` returns the access used: `source` None
    when nothing could be read (the thread is not started)."""

    def __init__(self, on_event: Callable[[KernelEvent], None]) -> None:
        self.on_event = on_event
        self.lines_read = 0
        self.error: str | None = None  # why it stopped reading, if it did
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._journal: subprocess.Popen[bytes] | None = None
        self.access: KernelAccess | None = None
        self.test_id = os.environ.get(TEST_ID_ENV)

    def start(self) -> KernelAccess:
        found = access()
        if found.source == "kmsg":
            try:
                self._fd = _open_kmsg(found.detail)
            except OSError as exc:
                found = KernelAccess(None, f"{found.detail}: {exc.strerror or exc}")
        elif found.source == "journal":
            argv = journal_argv()
            assert argv is not None
            try:
                self._journal = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
                )
            except OSError as exc:
                found = KernelAccess(None, f"{argv[0]}: {exc.strerror or exc}")
        self.access = found
        if found.source is not None:
            self._thread = threading.Thread(target=self._run, name="sparktui-kernel-log", daemon=True)
            self._thread.start()
        return found

    def close(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(2.0)
        if self._journal is not None and self._journal.poll() is None:
            self._journal.terminate()  # the journalctl this watch started, nothing else
            try:
                self._journal.wait(2.0)
            except subprocess.TimeoutExpired:
                self._journal.kill()
                self._journal.wait()
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = None

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if self._fd is not None:
            source_fd = self._fd
        elif self._journal is not None and self._journal.stdout is not None:
            source_fd = self._journal.stdout.fileno()
            os.set_blocking(source_fd, False)
        else:
            return
        poller.register(source_fd, select.POLLIN)
        pending = b""
        while True:
            for fd, events in poller.poll():  # no timeout: wakes only for a line or close()
                if fd == self._wake_r:
                    return
                if self._fd is not None:
                    if not self._read_kmsg(self._fd):
                        return
                    continue
                pending = self._read_journal(source_fd, pending)
                if events & (select.POLLHUP | select.POLLERR):
                    self.error = "journalctl ended"
                    return

    def _read_kmsg(self, fd: int) -> bool:
        """Every record waiting; False when the log cannot be read any more."""
        while True:
            try:
                raw = os.read(fd, 8192)  # one record per read
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the ring buffer overran us: the next read resumes at the oldest record
                self.error = f"{kmsg_path()}: {exc.strerror}"
                return False
            if not raw:
                return True
            self._line(parse_kmsg_record(raw))

    def _read_journal(self, fd: int, pending: bytes) -> bytes:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return pending
            if not chunk:
                return pending
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self._line(parse_journal_entry(line))

    def _line(self, line: KernelLine | None) -> None:
        if line is None:
            return
        self.lines_read += 1
        mark = _TEST_MARK.search(line.text)
        if mark is not None and mark.group(1) != self.test_id:
            return  # another test's line
        event = classify(line)
        if event is not None:
            try:
                self.on_event(event)
            except Exception as exc:  # the callback's failure must not end the watch
                self.error = f"handler: {exc}"

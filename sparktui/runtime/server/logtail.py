"""Follow a growing log file (vLLM's output) and hand out complete lines in batches.

- A partial last line is held back until its newline arrives (or `flush()` at the end).
- Truncation (size below our position) restarts from the top; rotation (the path now names a
  different file) finishes the old file, then follows the new one from its start.
- Bounded memory: the last `keep` lines in a ring buffer (`recent`), reads in fixed-size chunks,
  and a line that never ends is cut at `max_line_bytes`.
- Waking: `fileno()` is an inotify fd that becomes readable when the file we read changes
  (written, truncated, moved, deleted) or its name is created or moved to in its folder, so a
  follower sleeps in poll() until there is something to read instead of polling the file. The
  watch is on the inode we hold open (through /proc/self/fd), re-armed whenever a rotation makes
  us open another file, and armed before that file is read: nothing written can go unnoticed.
  Without inotify, `fileno()` is None and followers poll on a timer as before.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Iterator

from sparktui.runtime.host import inotify

# The file we hold open: written or truncated, its inode moved or deleted (IN_ATTRIB: unlinked).
_FILE_EVENTS = inotify.IN_MODIFY | inotify.IN_ATTRIB | inotify.IN_MOVE_SELF | inotify.IN_DELETE_SELF
# Its folder: a file appearing under our name (created, or moved there by a rotation), or leaving it.
_DIR_EVENTS = inotify.IN_CREATE | inotify.IN_MOVED_TO | inotify.IN_MOVED_FROM | inotify.IN_DELETE


class LogTail:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keep: int = 5000,
        from_start: bool = True,
        chunk_bytes: int = 1 << 20,
        max_line_bytes: int = 1 << 16,
    ) -> None:
        self.path = os.fspath(path)
        self.recent: deque[str] = deque(maxlen=keep)
        self.from_start = from_start
        self.chunk_bytes = chunk_bytes
        self.max_line_bytes = max_line_bytes
        self.lines_read = 0
        self.bytes_read = 0
        self.restarts = 0  # truncations and rotations seen
        self._fd: int | None = None
        self._ino: int | None = None
        self._pos = 0
        self._partial = b""
        self._notify: inotify.Inotify | None = None
        self._notify_tried = False
        self._file_wd: int | None = None
        self.wakeups = 0  # times the watch woke a wait() (for tests and benchmarks)

    # -- file handling

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        self._fd, self._ino = fd, st.st_ino
        self._pos = st.st_size if at_end else 0
        self._partial = b""
        self._watch_file()  # before the first read of this file: a write after it wakes us
        return True

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_file()
        if self._notify is not None:
            self._notify.close()
            self._notify, self._file_wd = None, None

    # -- waking

    def fileno(self) -> int | None:
        """The inotify fd to poll (POLLIN) for changes; None where inotify is not available or the
        log's folder does not exist (then poll on a timer). Call it before the first poll() so the
        watch is armed before anything is read; after it fires, `consume()` its events."""
        if not self._notify_tried:
            self._notify_tried = True
            try:
                self._notify = inotify.Inotify()
                self._notify.add_watch(os.path.dirname(os.path.abspath(self.path)), _DIR_EVENTS)
            except OSError:
                if self._notify is not None:
                    self._notify.close()
                self._notify = None
            self._watch_file()
        return None if self._notify is None else self._notify.fileno()

    def _watch_file(self) -> None:
        if self._notify is None or self._fd is None:
            return
        try:
            # The inode behind our fd, whatever the path names by now.
            wd = self._notify.add_watch(f"/proc/self/fd/{self._fd}", _FILE_EVENTS)
        except OSError:
            return  # the folder watch still sees rotations; a timer catches the rest
        if self._file_wd is not None and self._file_wd != wd:
            self._notify.rm_watch(self._file_wd)
        self._file_wd = wd

    def consume(self) -> bool:
        """Read the queued inotify events; True if there were any."""
        return bool(self._notify is not None and self._notify.read())

    def wait(self, timeout: float, stop_fd: int | None = None) -> bool:
        """Sleep until the log may have changed, `stop_fd` is readable, or `timeout` seconds; True
        when woken by the log. Without inotify: just sleeps `timeout` (or until `stop_fd`)."""
        poller = select.poll()
        fd = self.fileno()
        if fd is not None:
            poller.register(fd, select.POLLIN)
        if stop_fd is not None:
            poller.register(stop_fd, select.POLLIN)
        if fd is None and stop_fd is None:
            threading.Event().wait(timeout)
            return False
        woken = any(ready == fd for ready, _ in poller.poll(max(0.0, timeout) * 1000)) and fd is not None
        if woken and self.consume():
            self.wakeups += 1
        return woken

    def __enter__(self) -> LogTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _replaced(self) -> bool:
        """The path now names another file (rotated), or none at all."""
        try:
            return os.stat(self.path).st_ino != self._ino
        except FileNotFoundError:
            return False  # removed but not replaced yet: keep reading what we have

    # -- reading

    def _split(self, data: bytes) -> list[str]:
        data = self._partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            lines: list[str] = []
        else:
            self._partial = data[cut + 1 :]
            lines = data[:cut].decode("utf-8", "replace").split("\n")
        while len(self._partial) > self.max_line_bytes:
            # a line that never ends (a runaway progress bar): hand it out in pieces
            piece, self._partial = self._partial[: self.max_line_bytes], self._partial[self.max_line_bytes :]
            lines.append(piece.decode("utf-8", "replace"))
        return lines

    def poll(self, max_bytes: int | None = None) -> list[str]:
        """Complete lines added since the last call.

        Reads at most about `max_bytes` (default: 4 chunks) so one batch stays bounded; call again
        while it returns lines to catch up with a big file.
        """
        if self._fd is None:
            opened = self._open(at_end=not self.from_start)
            self.from_start = True  # a file that appears later (or after a rotation) is read from its start
            if not opened:
                return []
        out: list[str] = []
        budget = max_bytes if max_bytes is not None else 4 * self.chunk_bytes
        while budget > 0 and self._fd is not None:  # (a rotation below opens another fd)
            if os.fstat(self._fd).st_size < self._pos:  # truncated in place
                self._pos, self._partial = 0, b""
                self.restarts += 1
            data = os.pread(self._fd, min(self.chunk_bytes, budget), self._pos)
            if data:
                self._pos += len(data)
                self.bytes_read += len(data)
                budget -= len(data)
                out.extend(self._split(data))
                continue
            if self._replaced():
                out.extend(self._take_partial())
                self._close_file()
                self.restarts += 1
                if not self._open(at_end=False):
                    break
                continue
            break
        if out:
            self.lines_read += len(out)
            self.recent.extend(out)
        return out

    def pending(self) -> bool:
        """More is written than read (poll() stopped at its budget): read again before waiting."""
        return self._fd is not None and os.fstat(self._fd).st_size > self._pos

    def _take_partial(self) -> list[str]:
        if not self._partial:
            return []
        line = self._partial.decode("utf-8", "replace")
        self._partial = b""
        return [line]

    def flush(self) -> list[str]:
        """The held-back partial last line, if any (call when the writer has exited)."""
        lines = self._take_partial()
        if lines:
            self.lines_read += 1
            self.recent.extend(lines)
        return lines

    def drain(self) -> list[str]:
        """Everything left, the partial last line included (the writer has exited)."""
        rest: list[str] = []
        while batch := self.poll():
            rest.extend(batch)
        return rest + self.flush()

    def follow(self, *, interval_s: float = 0.1, stop: threading.Event | None = None) -> Iterator[list[str]]:
        """Yield non-empty batches of lines until `stop` is set (then the rest, partial line included).

        With inotify it sleeps until the file changes, looking at `stop` every `interval_s`;
        without, it polls the file every `interval_s`."""
        stop = stop or threading.Event()
        self.fileno()  # arm the watch before the first read
        while not stop.is_set():
            batch = self.poll()
            if batch:
                yield batch
            else:
                self.wait(interval_s)
        while batch := self.poll():  # the writer is done: catch up, batch by batch
            yield batch
        if rest := self.flush():
            yield rest

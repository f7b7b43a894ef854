"""Linux inotify through libc (ctypes): wake when a file changes instead of polling it.

Only what the log tail needs: an instance whose fd becomes readable on an event, watches added by
path, and the events read without blocking. `Inotify()` raises OSError where the kernel or libc
has no inotify (callers then fall back to a timed poll).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000  # the kernel's queue overflowed: events were lost, look again
IN_IGNORED = 0x00008000  # the watch is gone (its file deleted, or rm_watch)

_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then name[len]
_READ_BYTES = 64 * 1024


@dataclass(frozen=True)
class InotifyEvent:
    wd: int
    mask: int
    cookie: int
    name: str  # the entry's name for a directory watch; "" for the watched file itself


class _Libc:
    """The three libc calls, bound once (glibc and musl both have them)."""

    def __init__(self) -> None:
        # the libc this process already has (dlopen(NULL)): find_library("c") would run ldconfig, a process
        libc = ctypes.CDLL(None, use_errno=True)
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int
        self.rm_watch = libc.inotify_rm_watch
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        self.rm_watch.restype = ctypes.c_int


_libc: _Libc | None = None


def _bound() -> _Libc:
    global _libc
    if _libc is None:
        try:
            _libc = _Libc()
        except (OSError, AttributeError) as exc:
            raise OSError(errno.ENOSYS, f"inotify is not available: {exc}") from None
    return _libc


def _raise_errno(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")


class Inotify:
    """One inotify instance (non-blocking, close-on-exec). Poll `fileno()` for POLLIN."""

    def __init__(self) -> None:
        self._libc = _bound()
        fd = self._libc.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            _raise_errno("inotify_init1")
        self._fd: int | None = fd

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("inotify instance is closed")
        return self._fd

    def add_watch(self, path: str, mask: int) -> int:
        """Watch `path` (resolved now: a rename later does not move the watch) for `mask`;
        the watch descriptor. Watching the same inode again returns the same descriptor."""
        wd = self._libc.add_watch(self.fileno(), os.fsencode(path), mask)
        if wd < 0:
            _raise_errno(f"inotify_add_watch {path}")
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        """Stop a watch; one the kernel already dropped (its file deleted) is not an error."""
        self._libc.rm_watch(self.fileno(), wd)

    def read(self) -> list[InotifyEvent]:
        """The events queued now ([] when none): never blocks."""
        out: list[InotifyEvent] = []
        while True:
            try:
                data = os.read(self.fileno(), _READ_BYTES)
            except BlockingIOError:
                return out
            at = 0
            while at + _HEADER.size <= len(data):
                wd, mask, cookie, length = _HEADER.unpack_from(data, at)
                raw = data[at + _HEADER.size : at + _HEADER.size + length]
                out.append(InotifyEvent(wd, mask, cookie, os.fsdecode(raw.rstrip(b"\0"))))
                at += _HEADER.size + length

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

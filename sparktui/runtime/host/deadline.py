"""A dead man's switch between two processes: a timerfd (Linux, libc through ctypes) that one side
pushes forward and the other polls. It turns readable only when nobody pushed it in time.

The guard's thread pushes it at each heartbeat (server/guard_wiring.py) to the moment the reaper
would call the heartbeat late; the reaper (server/reaper.py) holds the same timer and sleeps on it,
so while the guard samples the reaper is never woken, and when the guard stops (a SIGSTOPped or
starved supervisor) the kernel wakes the reaper at that moment. `Deadline()` raises OSError where
the kernel or libc has no timerfd (the reaper then looks at the heartbeat on a timer).
"""

from __future__ import annotations

import ctypes
import errno
import os

CLOCK_BOOTTIME = 7  # the heartbeat's clock (state.boottime): it counts a suspend, as the beat does
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.timerfd_create.restype = ctypes.c_int
    lib.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    lib.timerfd_settime.restype = ctypes.c_int
    return lib


class Deadline:
    """The pushing side: a one-shot timer on CLOCK_BOOTTIME whose fd is handed to the other process."""

    def __init__(self) -> None:
        try:
            self._lib = _libc()
        except (OSError, AttributeError) as exc:  # no libc, or a libc without timerfd
            raise OSError(errno.ENOSYS, f"no timerfd here: {exc}") from exc
        fd = self._lib.timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd: int | None = fd
        # made once: the guard's thread pushes before each heartbeat, ahead of a trip's signal
        self._spec = _Itimerspec()
        self._value = self._spec.it_value
        self._ref = ctypes.byref(self._spec)
        self._settime = self._lib.timerfd_settime

    def push(self, seconds: float) -> None:
        """Expire `seconds` from now (an earlier expiry not yet read is forgotten: the kernel resets
        the count on every set). A zero would disarm it, so it is at least a microsecond."""
        if self.fd is None:
            return
        whole = int(max(seconds, 1e-6) * 1_000_000)
        self._value.tv_sec, self._value.tv_nsec = whole // 1_000_000, (whole % 1_000_000) * 1000
        if self._settime(self.fd, 0, self._ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def expired(fd: int) -> bool:
    """The polling side: read (and so clear) an expiry; False when there was none since the last set."""
    try:
        return len(os.read(fd, 8)) == 8
    except BlockingIOError:
        return False

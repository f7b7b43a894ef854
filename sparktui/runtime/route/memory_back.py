"""Did the memory of the servers the route stopped come back, before it starts the next one?

A relaunch into memory a stopped tree still holds (/dev/shm files, a survivor) is the next hang on
unified memory. Each server's take is measured when it becomes ready (MemAvailable before its
launch minus MemAvailable then); after the stops, MemAvailable must rise back by the sum of the
takes, within a tolerance for the other programs on the box: max(2 GiB, 3% of the pool), the leak
gate's own figure (issue 22). One function, so the leak gate can take its place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparktui.core.units import format_gib
from sparktui.runtime.memory import read_mem_available

GIB = 1 << 30
WAIT_S = 30.0  # as the leak gate: memory not back after this long is leaked


def tolerance(pool: int) -> int:
    return max(2 * GIB, int(0.03 * pool))


@dataclass(frozen=True)
class MemoryBack:
    ok: bool
    expected: int  # MemAvailable it waited for
    available: int  # MemAvailable at the end
    waited_s: float

    @property
    def missing(self) -> int:
        return max(0, self.expected - self.available)

    def describe(self) -> str:
        if self.ok:
            return f"memory came back in {self.waited_s:.2f} s (MemAvailable {format_gib(self.available)})"
        return (
            f"{format_gib(self.missing)} of the stopped servers' memory did not come back within "
            f"{self.waited_s:.0f} s (MemAvailable {format_gib(self.available)}, expected "
            f"{format_gib(self.expected)}): look for /dev/shm files or processes of the old tree "
            "(`sparktui status`), remove them, or reboot"
        )


def wait_memory_back(
    before_stop: int,
    taken: int,
    pool: int,
    *,
    timeout_s: float = WAIT_S,
    interval_s: float = 0.05,
    read: Callable[[], int] = read_mem_available,
) -> MemoryBack:
    """Wait until MemAvailable ≥ before_stop + taken − tolerance(pool) (blocking; run it in a thread)."""
    expected = before_stop + max(0, taken) - tolerance(pool)
    start = time.monotonic()
    while True:
        available = read()
        waited = time.monotonic() - start
        if available >= expected:
            return MemoryBack(True, expected, available, waited)
        if waited >= timeout_s:
            return MemoryBack(False, expected, available, waited)
        time.sleep(interval_s)

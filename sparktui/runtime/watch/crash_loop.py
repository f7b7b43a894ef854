"""The crash-loop breaker (pure): automatic restarts stop after N failures in one phase within a window."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    pass


@dataclass(frozen=True)
class BreakerFailure:
    at: float  # wall-clock time
    phase: str  # the start-up phase reached (or "ready")
    kind: str  # "crash" | "wedge"
    detail: str

    def line(self) -> str:
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.kind} in {self.phase}: {self.detail}"


@dataclass(frozen=True)
class BreakerVerdict:
    restart: bool
    reason: str | None  # why restarts stopped
    failures: list[BreakerFailure]  # the failures that count (same phase, within the window)


class CrashLoopBreaker:
    """Allows automatic restarts until `max_failures` failures in one phase within `window_s`."""

    def __init__(self, max_failures: int = 3, window_s: float = 600.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.failures: list[BreakerFailure] = []
        self.tripped: BreakerVerdict | None = None

    def record(self, failure: BreakerFailure) -> BreakerVerdict:
        self.failures.append(failure)
        same = [f for f in self.failures if f.phase == failure.phase and failure.at - f.at <= self.window_s]
        if len(same) >= self.max_failures:
            reason = (
                f"crash loop: {len(same)} failures in phase {failure.phase} within "
                f"{self.window_s / 60:g} min; not restarting again"
            )
            self.tripped = BreakerVerdict(False, reason, same)
            return self.tripped
        return BreakerVerdict(True, None, same)

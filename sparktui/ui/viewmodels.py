"""The typed views the panes render, made by `ui.backend` from core and runtime results.

Plain dataclasses: cheap to build in a worker, compared by value (a poll that brings nothing new
changes nothing on screen), and free of Textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded after the first frame (pydantic, the fit engine)
    from sparktui.core.fit import Suggestion
    from sparktui.core.guard_lines import GuardLines

Rows = tuple[tuple[str, str], ...]  # (figure, value) pairs, in display order
LIVE = ("starting", "ready", "stopping", "wedged")  # a wedged server still runs: stop and kill must reach it


@dataclass(frozen=True)
class GuardView:
    """What the memory pane shows about the guard: its lines (core.guard_lines, None when not
    known) and words around them."""

    state: str = "n/a"  # armed | disarmed | tripped | n/a
    lines: GuardLines | None = None
    last_trip: str | None = None
    why_na: str | None = None  # a note under the lines: what it watches now, or why it cannot
    for_next_launch: bool = False  # the profile's guard (no server running), not a live one

    def line_gib(self) -> tuple[float | None, float | None, float | None]:
        """The warn, term and kill lines in GiB (None: off, or not known)."""
        lines = self.lines
        if lines is None:
            return (None, None, None)
        return (lines.warn_below_gib, lines.term_below_gib, lines.kill_below_gib)


@dataclass(frozen=True)
class GpuView:
    util: str = "n/a"
    temp: str = "n/a"
    power: str = "n/a"
    memory: str = "n/a"
    note: str | None = None
    present: bool = True  # an NVIDIA GPU was found


@dataclass
class FitView:
    verdict: str  # fits | tight | wont_start | unsafe | error | n/a
    reasons: list[str] = field(default_factory=list)
    segments: list[tuple[str, str, int]] = field(default_factory=list)  # (style key, label, bytes)
    pool_bytes: int | None = None
    mem_available: int | None = None
    mem_available_live: bool = True  # a reading of this host, not an idle figure for the machine
    suggestions: list[Suggestion] = field(default_factory=list)  # core.fit's: text + changes
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    kv_bytes_per_token: int | None = None
    speed: str | None = None  # core.speed.summary_line: predicted tok/s and TTFT (and a bench's)
    vllm_version: str | None = None  # whose rules the fit used
    vllm_version_assumed: bool = False  # neither given nor detected: the newest rules known
    others_bytes: int = 0  # what the other running servers reserve of the pool (core.pool)
    # per segment the fit's kv_memory_source gives: weights / activations / graphs → measured |
    # calibrated | predicted
    term_sources: dict[str, str] = field(default_factory=dict)

    @property
    def applicable(self) -> list[Suggestion]:
        """The suggestions that change the form, numbered 1… in the panel."""
        return [s for s in self.suggestions if s.changes]

    def predicted(self) -> Rows:
        return predicted_rows(self.kv_cache_bytes, self.kv_cache_tokens, self.max_concurrency)


def predicted_rows(kv_bytes: float | None, kv_tokens: int | None, concurrency: float | None) -> Rows:
    rows: list[tuple[str, str]] = []
    if kv_bytes is not None:
        rows.append(("KV GiB", f"{kv_bytes / 2**30:.2f}"))
    if kv_tokens is not None:
        rows.append(("KV tokens", f"{kv_tokens:,}"))
    if concurrency is not None:
        rows.append(("concurrency", f"{concurrency:.2f}x"))
    return tuple(rows)

"""The typed views the panes render, made by `ui.backend` from core and runtime results.

Plain dataclasses: cheap to build in a worker, compared by value (a poll that brings nothing new
changes nothing on screen), and free of Textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded after the first frame (pydantic, the fit engine)
    from sparktui.core.fit import Suggestion
    from sparktui.core.guard_lines import GuardLines
    from sparktui.runtime.records.protocol import ConditionView

Rows = tuple[tuple[str, str], ...]  # (figure, value) pairs, in display order
LIVE = ("starting", "ready", "stopping", "wedged")  # a wedged server still runs: stop and kill must reach it

# The log parser's phases in the panel's words (the phase strip, the server list's lines).
PHASE_LABELS = {
    "starting": "starting",
    "loading_weights": "loading weights",
    "profiling": "profiling",
    "kv_cache": "KV cache",
    "cuda_graphs": "CUDA graphs",
    "ready": "ready",
}


def phase_label(phase: str) -> str:
    """A phase as the server pane names it ("KV cache", not "kv_cache"); one it does not know, readable."""
    return PHASE_LABELS.get(phase, phase.replace("_", " "))


@dataclass(frozen=True)
class Diagnosis:
    """Why a server failed: the kind, vLLM's (or the guard's) own words, and what to do."""

    kind: str
    message: str
    hint: str


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


@dataclass(frozen=True)
class ServerStatus:
    """A server the supervisor runs or ran (whether or not this app started it), from its record."""

    condition: ConditionView  # the one vocabulary (runtime.protocol): starting … lost
    returncode: int | None = None
    port: int = 8000
    host: str = "127.0.0.1"
    pid: int | None = None
    url: str = ""
    log_path: Path | None = None
    profile: str | None = None
    profile_path: Path | None = None  # the exact profile it was started from
    started_at: float = 0.0
    guard: GuardView = GuardView()
    trip: str | None = None  # the guard's trip report, when it stopped this server
    diagnosis: Diagnosis | None = None  # why it failed, from the supervisor's log parser
    predicted: Rows = ()  # the fit the supervisor checked at launch
    actual: Rows = ()  # what vLLM's log said
    metrics: Rows = ()  # live figures the supervisor read from /metrics
    tree_bytes: int | None = None
    tree_procs: int | None = None

    @property
    def state(self) -> str:
        """starting | ready | stopping | stopped | failed | lost"""
        return self.condition.condition.value

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def text(self) -> str:
        """The condition in a few words: "failed (kv_too_small)", "stopped (killed)", "ready"."""
        c = self.condition
        if self.state == "failed":
            return f"failed ({c.kind or 'exit'})"
        if self.state == "stopped" and c.reason == "killed":
            return "stopped (killed)"
        if self.state == "wedged":
            return f"wedged ({c.reason})" if c.reason else "wedged"
        return self.state

    def detail(self) -> str:
        """pid and URL while it runs; how it ended after (never "exit None")."""
        if self.live:
            return f"pid {self.pid or '?'}  {self.url}".rstrip()
        if self.state == "lost":
            return self.condition.reason or ""
        code = self.returncode
        if code is None:
            return ""
        return f"signal {-code}" if code < 0 else f"exit status {code}"


@dataclass(frozen=True)
class NodeView:
    """One node of a cluster, as the head's supervisor last heard from it."""

    host: str
    rank: int
    status: str  # the node supervisor's status (starting, running, exited…)
    phase: str | None = None
    available_gib: float | None = None  # that node's MemAvailable
    exit_reason: str | None = None


@dataclass(frozen=True)
class ServerEntry:
    """One server in the server pane's list: enough to tell it apart, to count it in the pool and
    to know in which order the guard stops it."""

    port: int
    profile: str
    condition: ConditionView
    alive: bool = True  # its supervisor still runs
    reserved_bytes: int | None = None  # what it takes of the pool (core.pool), as recorded at launch
    reserve_basis: str = ""
    priority: int = 0  # [guard] priority: the lowest is stopped first
    utilization: float | None = None  # its --gpu-memory-utilization, for a record without a reservation
    started_at: float = 0.0
    nodes: tuple[NodeView, ...] = ()  # a cluster's nodes (the head's record), else none

    @property
    def state(self) -> str:
        return self.condition.condition.value

    @property
    def live(self) -> bool:
        return self.alive and self.state in LIVE

    def text(self) -> str:
        """The condition in the one vocabulary, with how far a start got: "starting (profiling)"."""
        c = self.condition
        if self.state == "starting" and c.phase and c.phase not in ("starting", "launching"):
            return f"starting ({phase_label(c.phase)})"
        return c.text()

"""The view models the first screen never shows: a server's state and its line in the list (with
a cluster's nodes and a failure's diagnosis), the server pane's summary, a launch's result and
preflight notes, the log parser's progress, and the routes under the memory gauge. Apart
from `ui.viewmodels` because making a frozen dataclass's class costs about 0.4 ms: these are
made with the server pane's and the routes' modules, after the first full screen (on a narrow
terminal), not at the app's import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.ui.viewmodels import LIVE, GuardView

if TYPE_CHECKING:
    from sparktui.runtime.records.protocol import ConditionView
    from sparktui.ui.viewmodels import Rows


@dataclass(frozen=True)
class Diagnosis:
    """Why a server failed: the kind, vLLM's (or the guard's) own words, and what to do."""

    kind: str
    message: str
    hint: str


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
    guard: GuardView = GuardView()  # noqa: RUF009 (a frozen dataclass: one shared default is safe)
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
        """The condition in a few words, as `sparktui status` says them (ConditionView.text)."""
        return self.condition.text()

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
        """The condition in the one wording, with how far a start got: "starting (profiling)"."""
        return self.condition.text()


@dataclass(frozen=True)
class ServerView:
    """What the server pane's summary shows."""

    state: str = "stopped"
    detail: str = ""
    predicted: Rows = ()  # (figure, predicted value)
    actual: Rows = ()  # (figure, value from the log)
    metrics: Rows = ()
    bad: bool = False  # the state is drawn as an error


PREFLIGHT_MARK = "[sparktui preflight]"  # sparktui's own lines in a server's log view, not vLLM's


@dataclass(frozen=True)
class PreflightNote:
    """One line of a launch's preflight, as `sparktui serve` prints it: a node's summary, or a warning."""

    text: str
    warning: bool = False

    def line(self) -> str:
        """The line at the top of the launch's log view, marked as sparktui's own."""
        return f"{PREFLIGHT_MARK} {'warning: ' if self.warning else ''}{self.text}"


@dataclass(frozen=True)
class Launched:
    """A launch from the panel: the server's first state and what its preflight found."""

    status: ServerStatus
    notes: tuple[PreflightNote, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(n.text for n in self.notes if n.warning)


@dataclass(frozen=True)
class LogProgress:
    """What the panel's own log parser made of the log so far."""

    phase: str
    reached: str
    actual: Rows
    diagnosis: Diagnosis | None


@dataclass(frozen=True)
class RouteModelView:
    name: str
    status: str  # down | starting | up | draining | stopping
    in_flight: int
    queued: int
    port: int
    keep: bool = False


@dataclass(frozen=True)
class RouteSwapView:
    at: float  # wall clock
    model: str  # "" for a TTL stop
    stopped: tuple[str, ...]
    ok: bool
    total_s: float
    stop_s: float
    memory_s: float
    start_s: float
    error: str | None = None
    reason: str = ""

    def line(self) -> str:
        """One swap for a person: when, to what, from what, how long each step took."""
        clock = time.strftime("%H:%M:%S", time.localtime(self.at))
        if not self.model:
            return f"{clock} {', '.join(self.stopped)} stopped: {self.reason}"
        beside = f" ← {', '.join(self.stopped)}" if self.stopped else ""
        if not self.ok:
            return f"{clock} {self.model}{beside} failed: {self.error or '?'}"
        steps = f"start {self.start_s:.1f}"
        if self.stopped:
            steps = f"stop {self.stop_s:.1f} mem {self.memory_s:.1f} " + steps
        return f"{clock} {self.model}{beside} {self.total_s:.1f} s ({steps})"


@dataclass(frozen=True)
class RouteView:
    """One `sparktui route`: its models, which are up, the requests waiting, the swap under way
    (model and step) and the last swaps with their times."""

    listen: str
    models: tuple[RouteModelView, ...]
    queued: int
    swapping: tuple[str, str] | None  # (model, step)
    swaps: tuple[RouteSwapView, ...]  # newest last

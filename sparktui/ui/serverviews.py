"""The view models the first screen never shows: the server pane's summary, a launch's result
and preflight notes, the log parser's progress, and the routes under the memory gauge. Apart
from `ui.viewmodels` because making a frozen dataclass's class costs about 0.4 ms: these are
made with the server pane's and the routes' modules, after the first full screen (on a narrow
terminal), not at the app's import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktui.ui.viewmodels import Diagnosis, Rows, ServerStatus


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

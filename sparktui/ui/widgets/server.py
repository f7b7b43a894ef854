"""The launch pane's widgets: the phase strip, the server summary (state, predicted vs actual KV
cache, live metrics) and the diagnosis card shown when vLLM fails."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from sparktui.core.vllm_events import PHASE_LABELS
from sparktui.ui.serverviews import Diagnosis, ServerView
from sparktui.ui.widgets.base import TextPanel

if TYPE_CHECKING:
    from sparktui.ui.serverviews import LogProgress, ServerStatus

__all__ = ["PHASES", "PHASE_LABELS", "DiagnosisCard", "LogHeader", "PhaseStrip", "ServerInfo", "ServerView"]

# The log parser's phases (sparktui.core.vllm_log.PHASES; a test keeps the two the same).
PHASES = ("starting", "loading_weights", "profiling", "kv_cache", "cuda_graphs", "ready")
FAILED = "failed"

SHORT_LABELS = {
    "starting": "start",
    "loading_weights": "weights",
    "profiling": "profile",
    "kv_cache": "KV",
    "cuda_graphs": "graphs",
    "ready": "ready",
}


class PhaseStrip(TextPanel):
    """starting › loading weights › profiling › KV cache › CUDA graphs › ready | failed"""

    COMPONENT_CLASSES = {"phase--done", "phase--current", "phase--todo", "phase--failed", "phase--sep"}
    DEFAULT_CSS = """
    PhaseStrip { height: auto; }
    PhaseStrip > .phase--done { color: $success; }
    PhaseStrip > .phase--current { color: $primary; text-style: bold reverse; }
    PhaseStrip > .phase--todo { color: $foreground-muted; }
    PhaseStrip > .phase--failed { color: $error; text-style: bold reverse; }
    PhaseStrip > .phase--sep { color: $foreground-muted; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.phase: str | None = None  # None: no server
        self.failed_at: str | None = None

    def set_phase(self, phase: str | None, reached: str | None = None) -> None:
        """`phase` is one of vllm_log.PHASES, "failed" (then `reached` is how far it got) or None."""
        self.phase = phase
        self.failed_at = (reached or "starting") if phase == FAILED else None
        self.changed()

    def follow(self, s: ServerStatus | None, progress: LogProgress | None, launching: bool) -> None:
        """The phase of server `s`: its log's progress while it starts, how far it got when it failed."""
        if launching:
            self.set_phase("starting")
        elif s is None:
            self.set_phase(None)
        elif s.state == "failed":
            reached = (progress.reached if progress else None) or s.condition.phase
            self.set_phase("failed", reached)
        elif s.state == "starting":
            self.set_phase(progress.phase if progress and progress.phase != "failed" else s.condition.phase)
        elif s.state in ("ready", "stopping", "wedged"):
            self.set_phase("ready")
        else:
            self.set_phase(None)

    def render(self) -> Text:
        out = Text()
        style = lambda n: self.component_style(f"phase--{n}")  # noqa: E731
        current = self.failed_at if self.phase == FAILED else self.phase
        index = PHASES.index(current) if current in PHASES else -1
        for i, phase in enumerate(PHASES):
            name = (PHASE_LABELS if self.draw_width >= 80 else SHORT_LABELS).get(phase, phase)
            if i:
                out.append(" › ", style("sep"))
            if self.phase == "ready" or i < index:
                out.append(name, style("done"))
            elif i == index and self.phase != FAILED:
                out.append(f" {name} ", style("current"))
            else:
                out.append(name, style("todo"))
        if self.phase == FAILED:
            out.append(" › ", style("sep"))
            out.append(" failed ", style("failed"))
        return out


class ServerInfo(TextPanel):
    COMPONENT_CLASSES = {"srv--label", "srv--value", "srv--state", "srv--bad", "srv--muted", "srv--head"}
    DEFAULT_CSS = """
    ServerInfo { height: auto; }
    ServerInfo > .srv--label { color: $foreground-muted; }
    ServerInfo > .srv--value { color: $foreground; text-style: bold; }
    ServerInfo > .srv--state { color: $primary; text-style: bold; }
    ServerInfo > .srv--bad { color: $error; text-style: bold; }
    ServerInfo > .srv--muted { color: $foreground-muted; }
    ServerInfo > .srv--head { color: $accent; text-style: bold; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view = ServerView()

    def show(self, view: ServerView) -> None:
        self.view = view
        self.changed()

    def render(self) -> Text:
        v = self.view
        s = lambda n: self.component_style(f"srv--{n}")  # noqa: E731
        out = Text()
        out.append("Server ", s("label"))
        out.append(v.state, s("bad" if v.bad else "state"))
        if v.detail:
            out.append(f"  {v.detail}", s("muted"))
        if v.predicted or v.actual:
            out.append("\n")
            out.append(f"{'':<12}{'predicted':>10}{'vLLM said':>10}", s("head"))
            names = [n for n, _ in v.predicted] + [n for n, _ in v.actual if n not in dict(v.predicted)]
            pred, act = dict(v.predicted), dict(v.actual)
            for name in names:
                out.append(f"\n{name:<12}", s("label"))
                out.append(f"{pred.get(name, '—'):>10}", s("value"))
                out.append(f"{act.get(name, '…'):>10}", s("value"))
        for i, (name, value) in enumerate(v.metrics):
            # three figures a line: KV/run/wait, the token rates, TTFT
            out.append("\n" if i % 3 == 0 else "  ")
            out.append(f"{name} ", s("label"))
            out.append(value, s("value"))
        return out


class DiagnosisCard(TextPanel):
    """Why vLLM failed, from the log parser: the kind, vLLM's own words, and what to do."""

    COMPONENT_CLASSES = {"diag--title", "diag--hint"}
    DEFAULT_CSS = """
    DiagnosisCard { height: auto; border: round $error; padding: 0 1; display: none; }
    DiagnosisCard.-shown { display: block; }
    DiagnosisCard > .diag--title { color: $error; text-style: bold; }
    DiagnosisCard > .diag--hint { color: $success; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.diagnosis: Diagnosis | None = None

    def show(self, diagnosis: Diagnosis | None) -> None:
        self.diagnosis = diagnosis
        self.set_class(diagnosis is not None, "-shown")
        self.changed()

    def follow(self, s: ServerStatus | None, progress: LogProgress | None, launching: bool) -> None:
        """Why server `s` failed: the supervisor's word once it has ended, else the log parser's."""
        diagnosis = None
        if s is not None and (s.trip or not s.live):
            diagnosis = s.diagnosis
        if diagnosis is None and progress is not None and not launching:
            diagnosis = progress.diagnosis
        self.show(diagnosis)

    def render(self) -> Text:
        out = Text()
        if not self.diagnosis:
            return out
        d = self.diagnosis
        out.append(f"Failed: {d.kind}\n", self.component_style("diag--title"))
        out.append(d.message)
        if d.hint:
            out.append("\nFix: ", self.component_style("diag--hint"))
            out.append(d.hint)
        return out


class LogHeader(TextPanel):
    """One line over the log: whether it follows, and whether sparktui's own polling is shown."""

    COMPONENT_CLASSES = {"loghead--on", "loghead--off", "loghead--muted"}
    DEFAULT_CSS = """
    LogHeader { height: 1; }
    LogHeader > .loghead--on { color: $success; text-style: bold; }
    LogHeader > .loghead--off { color: $warning; text-style: bold reverse; }
    LogHeader > .loghead--muted { color: $foreground-muted; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.following = True
        self.polling_hidden = 0
        self.show_polling = False
        self.wrapped = True
        self.keys = ("f", "p", "w")

    def show(
        self, following: bool, show_polling: bool, polling_hidden: int, keys: tuple[str, str, str], wrapped: bool = True
    ) -> None:
        self.following, self.show_polling, self.polling_hidden, self.keys = (
            following,
            show_polling,
            polling_hidden,
            keys,
        )
        self.wrapped = wrapped
        self.changed()

    def render(self) -> Text:
        full = self._line(short=False)
        width = self.draw_width
        if not width or full.cell_len <= width:
            return full
        # the pane is 42 columns inside at 120: the short words keep each key in view, and the
        # tiniest form (paused, polls hidden, no wrap: 41 cells) fits it whole
        short = self._line(short=True)
        return short if short.cell_len <= width else self._tiny()

    def _tiny(self) -> Text:
        muted = self.component_style("loghead--muted")
        out = Text(no_wrap=True, overflow="ellipsis")
        if self.following:
            out.append("● following", self.component_style("loghead--on"))
        else:
            out.append(" ‖ PAUSED ", self.component_style("loghead--off"))
            out.append(f" {self.keys[0]}", muted)
        if self.show_polling:
            out.append(f" polls ({self.keys[1]})", muted)
        elif self.polling_hidden:
            n = self.polling_hidden
            count = f"{n // 1000}k" if n >= 10_000 else f"{n:,}"
            out.append(f" {count} hidden ({self.keys[1]})", muted)
        if not self.wrapped:
            out.append(f" no wrap ({self.keys[2]})", muted)
        return out

    def _line(self, short: bool) -> Text:
        muted = self.component_style("loghead--muted")
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append("Log ", muted)
        if self.following:
            out.append("● following", self.component_style("loghead--on"))
        else:
            out.append(" ‖ PAUSED ", self.component_style("loghead--off"))
            out.append(f" {self.keys[0]}/End" + ("" if short else " follows"), muted)
        if self.show_polling:
            out.append(f"  polls shown ({self.keys[1]})" if short else f"  polling shown ({self.keys[1]} hides)", muted)
        elif self.polling_hidden:
            hidden = f"{self.polling_hidden:,}"
            out.append(
                f"  {hidden} polls hidden ({self.keys[1]})"
                if short
                else f"  {hidden} polling lines hidden ({self.keys[1]} shows)",
                muted,
            )
        if not self.wrapped:
            out.append(f"  no wrap ({self.keys[2]})" if short else f"  long lines run on ({self.keys[2]} wraps)", muted)
        return out

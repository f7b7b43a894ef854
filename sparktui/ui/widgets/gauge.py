"""The unified-memory gauge: one bar for the whole pool (used / page cache / available) with
the guard's warn, term and kill lines on it, a sparkline of MemAvailable, and the figures."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.text import Span, Text

from sparktui.core.units import GiB
from sparktui.ui.viewmodels import GpuView, GuardView
from sparktui.ui.widgets.base import TextPanel

if TYPE_CHECKING:
    from typing import Self

    from textual.geometry import Region

    from sparktui.ui.serverviews import NodeView, ServerEntry

__all__ = ["GpuView", "GuardView", "MemoryGauge", "sparkline"]

SPARK_CHARS = "▁▂▃▄▅▆▇█"


def _gib(n: float | None, digits: int = 1) -> str:
    return "n/a" if n is None else f"{n / GiB:.{digits}f}"


def node_text(node: NodeView, width: int) -> str:
    """One node of a cluster under its head's reservation, within `width` (Textual would wrap a
    longer line): its phase (or how it ended) and its MemAvailable always; the host is cut first."""
    state = f"exit {node.exit_reason}" if node.exit_reason else (node.phase or node.status).replace("_", " ")
    gib = node.available_gib
    wide, short = ("avail n/a", "n/a") if gib is None else (f"avail {gib:.1f} GiB", f"{gib:.1f}G")
    for indent, tail in ((4, f" r{node.rank} {state}  {wide}"), (2, f" r{node.rank} {state} {short}")):
        room = width - indent - len(tail)
        if room >= min(len(node.host), 3):
            host = node.host if len(node.host) <= room else node.host[: room - 1] + "…"
            return " " * indent + host + tail
    line = f"  r{node.rank} {state} {short}"
    return line if len(line) <= width else line[: max(1, width - 1)] + "…"


LABEL = 14  # the label column: "PSI some/full " and the like


def packed(parts: list[str], room: int, sep: str) -> list[str]:
    """`parts` joined by `sep` in lines of at most `room` cells, broken only between parts (a part
    longer than `room` has a line of its own)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= room:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def sparkline(values: list[float], width: int, min_span: float = 8.0) -> str:
    """Values (GiB) as block heights. The scale spans at least `min_span` GiB, so a few MiB of
    jitter on an idle machine draws a flat line instead of noise blown up to full height."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = max(high - low, min_span)
    return "".join(SPARK_CHARS[int((v - low) / span * (len(SPARK_CHARS) - 1))] for v in values)


def _cells(s: Any, width: int) -> tuple[int, int]:
    """The bar's cells of `width`: (used, page cache); the rest are available."""
    total = s.mem_total or 1
    used = max(0, s.mem_total - s.mem_available)
    cache = min(max(0, s.page_cache), s.mem_available)
    cells_used = round(used / total * width)
    return cells_used, min(width - cells_used, round(cache / total * width))


def _swap_used(s: Any) -> int:
    return int(s.swap_total - s.swap_free) if s.swap_total else 0


def _psi(s: Any) -> str:
    return "n/a" if s.psi_some_avg10 is None else f"{s.psi_some_avg10:.2f} / {s.psi_full_avg10 or 0:.2f}"


def _spark_width(width: int) -> int:
    return max(1, width - 21)  # after "MemAvailable history "


class MemoryGauge(TextPanel):
    LINE_BY_LINE = True  # a sample changes a figure or two: only their lines are drawn again
    COMPONENT_CLASSES = {
        "gauge--used",
        "gauge--cache",
        "gauge--free",
        "gauge--warn",
        "gauge--term",
        "gauge--kill",
        "gauge--label",
        "gauge--value",
        "gauge--spark",
        "gauge--armed",
        "gauge--disarmed",
        "gauge--tripped",
        "gauge--muted",
    }

    DEFAULT_CSS = """
    MemoryGauge { height: auto; }
    MemoryGauge > .gauge--used { color: $primary; }
    MemoryGauge > .gauge--cache { color: $secondary; }
    MemoryGauge > .gauge--free { color: $foreground-muted; }
    MemoryGauge > .gauge--warn { color: $warning; text-style: bold; }
    MemoryGauge > .gauge--term { color: $error; text-style: bold; }
    MemoryGauge > .gauge--kill { color: $error; text-style: bold reverse; }
    MemoryGauge > .gauge--label { color: $foreground-muted; }
    MemoryGauge > .gauge--value { color: $foreground; text-style: bold; }
    MemoryGauge > .gauge--spark { color: $accent; }
    MemoryGauge > .gauge--armed { color: $success; text-style: bold; }
    MemoryGauge > .gauge--disarmed { color: $warning; text-style: bold; }
    MemoryGauge > .gauge--tripped { color: $error; text-style: bold reverse; }
    MemoryGauge > .gauge--muted { color: $foreground-muted; }
    """

    def __init__(self, history: int = 240, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sample: Any = None  # a runtime.memory.MemorySample (widgets take it as given)
        self.sample_error: str | None = None
        self.gpu = GpuView()
        self.guard = GuardView()
        self.tree_bytes: int | None = None
        self.tree_procs: int | None = None
        self.history: deque[float] = deque(maxlen=history)
        self._drawn: tuple[int, Text] | None = None
        self._shown: tuple[object, ...] | None = None  # _sample_shown() as last drawn
        self.servers: tuple[ServerEntry, ...] = ()  # the live ones, with what each reserves
        self.pool_bytes: int | None = None  # what all servers together may reserve (core.pool)

    def update_sample(self, sample, error: str | None = None, gpu: GpuView | None = None) -> None:
        """A memory reading (and the GPU's, read with it): one redraw for both."""
        self.sample = sample if sample is not None else self.sample
        self.sample_error = error
        if sample is not None:
            self.history.append(sample.mem_available / GiB)
        if gpu is not None:
            self.gpu = gpu
        shown = self._sample_shown(max(10, self.draw_width))
        if shown == self._shown:
            return  # not a figure, a cell of the bar nor a step of the history drawn otherwise
        self.changed()
        self._shown = shown

    def _sample_shown(self, width: int) -> tuple[object, ...]:
        """All that a draw at `width` shows of the sample, its history, its error and the GPU: an
        idle machine's samples mostly change none of it, and comparing this is a fraction of a
        draw (update_sample's; the other updates draw and compare the text)."""
        s = self.sample
        if s is None:
            return (width, None, self.sample_error, self.gpu)
        return (
            width,
            s.mem_total,
            _cells(s, width),
            _gib(s.mem_total - s.mem_available),
            _gib(s.mem_available),
            _gib(s.mem_free),
            _gib(s.page_cache),
            _gib(_swap_used(s)),
            _gib(s.swap_total),
            _psi(s),
            sparkline(list(self.history), _spark_width(width)),
            self.sample_error,
            self.gpu,
        )

    def update_gpu(self, gpu: GpuView) -> None:
        self.gpu = gpu
        self.changed()

    def update_guard(self, guard: GuardView) -> None:
        self.guard = guard
        self.changed()

    def update_tree(self, tree_bytes: int | None, procs: int | None) -> None:
        self.tree_bytes, self.tree_procs = tree_bytes, procs
        self.changed()

    def update_servers(self, servers: tuple[ServerEntry, ...], pool_bytes: int | None) -> None:
        self.servers, self.pool_bytes = servers, pool_bytes
        self.changed()

    def changed(self) -> None:
        self._drawn = None  # what render() drew is stale
        self._shown = None  # drawn from more than the sample: the next sample is drawn and compared
        super().changed()

    def _style(self, name: str):
        return self.component_style(f"gauge--{name}")

    def _bar(self, width: int) -> tuple[Text, Text]:
        s = self.sample
        total = s.mem_total or 1
        cells_used, cells_cache = _cells(s, width)
        cells_free = width - cells_used - cells_cache
        bar = Text()
        bar.append("█" * cells_used, self._style("used"))
        bar.append("▓" * cells_cache, self._style("cache"))
        bar.append("░" * cells_free, self._style("free"))
        marks = [" "] * width
        styles: list[str | None] = [None] * width
        g = self.guard
        # The guard acts when MemAvailable falls below a line: that is when "used" reaches total - line.
        for letter, value, name in zip("WTK", g.line_gib(), ("warn", "term", "kill"), strict=True):
            if value is None:
                continue
            col = min(width - 1, max(0, round((total - value * GiB) / total * width)))
            while col > 0 and marks[col] != " ":
                col -= 1
            marks[col], styles[col] = letter, name
        markers = Text("".join(marks), spans=[Span(i, i + 1, self._style(n)) for i, n in enumerate(styles) if n])
        return bar, markers

    def render(self) -> Text:
        # changed() draws the text to compare it with the last; the repaint that follows asks again.
        width = max(10, self.draw_width)
        if self._drawn is not None and self._drawn[0] == width:
            return self._drawn[1]
        text = self._draw(width)
        self._drawn = (width, text)
        return text

    def on_resize(self) -> None:
        self._drawn = None
        super().on_resize()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        if repaint and not regions:
            self._drawn = None  # a whole repaint draws from the figures as they are now
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._drawn = None  # drawn with the old theme's (or no) component styles
        super().notify_style_update()

    def _draw(self, width: int) -> Text:
        label, value, muted = self._style("label"), self._style("value"), self._style("muted")
        out = Text(no_wrap=True, overflow="ellipsis")
        s = self.sample
        if s is None:
            out.append("Unified memory: ", label)
            out.append(self.sample_error or "waiting for the first sample…", muted)
            out.append("\n")
        else:
            out.append("Unified memory ", label)
            out.append(f"{_gib(s.mem_total - s.mem_available)}", value)
            out.append(f" of {_gib(s.mem_total)} GiB used\n", label)
            bar, markers = self._bar(width)
            out.append_text(bar)
            out.append("\n")
            out.append_text(markers)
            out.append("\n")
            out.append("█", self._style("used"))
            out.append(" used ", label)
            out.append("▓", self._style("cache"))
            out.append(" cache ", label)
            out.append("░", self._style("free"))
            out.append(" available\n", label)
            out.append("MemAvailable history ", label)
            out.append(sparkline(list(self.history), _spark_width(width)), self._style("spark"))
            out.append("\n")
            for name, text in (
                ("MemAvailable", f"{_gib(s.mem_available)} GiB"),
                ("MemFree", f"{_gib(s.mem_free)} GiB"),
                ("Page cache", f"{_gib(s.page_cache)} GiB"),
                ("Swap used", f"{_gib(_swap_used(s))} / {_gib(s.swap_total)} GiB"),
                ("PSI some/full", _psi(s)),
            ):
                out.append(f"{name:<14}", label)
                out.append(f"{text}\n", value)
        gpu = self.gpu
        room = width - LABEL
        # In a narrow pane (32 columns at 120×40) the GPU's figures take a second line by design,
        # broken between figures, never inside one.
        for name, lines, style in (
            ("GPU", packed([gpu.util, gpu.temp, gpu.power], room, " · "), value),
            ("GPU memory", packed([gpu.memory], room, ""), value),
            ("", packed(gpu.note.split(" "), room, " ") if gpu.note else [], muted),
        ):
            for i, line in enumerate(lines):
                if name != "GPU" or i:  # the figures above end with their newline
                    out.append("\n")
                out.append(f"{name if i == 0 else '':<{LABEL}}", label)
                out.append(line, style)
        out.append(f"\n{'vLLM tree':<14}", label)
        if self.tree_bytes is None:
            out.append("no server", muted)
        else:
            out.append(f"{_gib(self.tree_bytes)} GiB", value)
            if self.tree_procs is not None:
                out.append(f" in {self.tree_procs} processes", label)
        if self.servers:
            # What the servers reserve of the pool: MemAvailable counts only what they allocated.
            if self.pool_bytes:
                out.append(f"\n{'Server pool':<14}", label)
                out.append(f"{_gib(self.pool_bytes)} GiB", value)
            out.append(f"\n{'Reserved':<14}", label)
            out.append(f"{_gib(sum(e.reserved_bytes or 0 for e in self.servers))} GiB", value)
            for e in self.servers:
                size = f"{_gib(e.reserved_bytes)} GiB" if e.reserved_bytes is not None else "? GiB"
                head = f"  :{e.port} {size} p{e.priority} "
                room = max(4, width - len(head))  # Textual wraps a long line: the name is cut instead
                name = e.profile if len(e.profile) <= room else e.profile[: room - 1] + "…"
                out.append(f"\n  :{e.port} ", label)
                out.append(size, value)
                out.append(f" p{e.priority} {name}", muted)
                for node in e.nodes:  # a cluster's head: each node's phase and MemAvailable there
                    if node.status == "head" and s is not None:  # this machine: the head's own condition
                        node = replace(node, phase=e.text(), available_gib=s.mem_available / GiB)
                    out.append("\n" + node_text(node, width), muted)
        out.append(f"\n{'Guard':<14}", label)
        g = self.guard
        state_style = {"armed": "armed", "disarmed": "disarmed", "tripped": "tripped"}.get(g.state, "muted")
        out.append(g.state.upper() if state_style != "muted" else g.state, self._style(state_style))
        if g.for_next_launch and g.state != "tripped":
            out.append(" for the next launch", muted)
        if any(v is not None for v in g.line_gib()):
            out.append(f"\n{'Lines (GiB)':<14}", label)
            for letter, v, name in zip("WTK", g.line_gib(), ("warn", "term", "kill"), strict=True):
                out.append(f"{letter}<", self._style(name))
                out.append(("default" if v is None else f"{v:g}") + " ", value)
        if g.why_na:
            out.append(f"\n  {g.why_na}", muted)
        if g.last_trip:
            out.append("\nLast trip: ", self._style("term"))
            out.append(g.last_trip, value)
        return out

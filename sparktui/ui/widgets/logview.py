"""A bounded, severity-coloured log view that stays responsive under floods.

Lines arrive in batches (`push`); they are buffered and drawn at most `FLUSH_HZ` times a second.
When more than `FLUSH_MAX_LINES` arrive between two draws, only the newest are kept and one
marker line says how many were skipped (the full log stays in the file on disk).
"""

from __future__ import annotations

import re
from collections import deque

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

_SEVERITY = re.compile(r"\b(CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_ERRORISH = re.compile(r"^(Traceback|\w*(Error|Exception)\b|RuntimeError|.*\bKilled\b)")
_MAX_LINE_CHARS = 2000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # vLLM colours its prefixes
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(line: str) -> str:
    """A log line as plain text: colour codes and other control characters removed."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:  # progress bars redraw with \r: keep what was drawn last
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
    return _CONTROL.sub("", line.expandtabs(4))


def severity_of(line: str) -> str:
    """error | warning | info | debug | plain, from vLLM's 'LEVEL mm-dd hh:mm:ss' prefix."""
    match = _SEVERITY.search(line, 0, 80)
    if match:
        word = match.group(1)
        if word in ("ERROR", "CRITICAL"):
            return "error"
        if word.startswith("WARN"):
            return "warning"
        return word.lower()
    if _ERRORISH.match(line):
        return "error"
    return "plain"


class LogView(ScrollView, can_focus=True):
    """Log lines, newest at the bottom; `f` toggles follow."""

    FLUSH_HZ = 10
    FLUSH_MAX_LINES = 2000

    BINDINGS = [
        Binding("f", "toggle_follow", "Follow", id="log.follow"),
        Binding("end", "follow_end", "End", show=False, id="log.end"),
    ]

    COMPONENT_CLASSES = {"log--error", "log--warning", "log--info", "log--debug", "log--plain", "log--marker"}

    DEFAULT_CSS = """
    LogView {
        background: $surface;
        color: $foreground;
        overflow: auto auto;
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 1;
    }
    LogView > .log--error { color: $error; text-style: bold; }
    LogView > .log--warning { color: $warning; }
    LogView > .log--info { color: $foreground; }
    LogView > .log--debug { color: $foreground-muted; }
    LogView > .log--plain { color: $foreground; }
    LogView > .log--marker { color: $accent; text-style: italic; }
    """

    follow: reactive[bool] = reactive(True)

    def __init__(self, max_lines: int = 5000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self._lines: deque[tuple[str, str]] = deque(maxlen=max_lines)
        self._pending: list[str] = []
        self._skipped = 0
        self._width = 0
        self._following = False
        self._timer = None
        self.total_lines = 0

    def on_mount(self) -> None:
        # Ticks only while lines are waiting: an idle log costs nothing.
        self._timer = self.set_interval(1 / self.FLUSH_HZ, self._flush, pause=True)

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def lines(self) -> list[str]:
        return [text for _, text in self._lines]

    def push(self, lines: list[str]) -> None:
        """Queue lines for the next draw (cheap: called for every batch from the reader)."""
        self.total_lines += len(lines)
        self._pending.extend(lines)
        if self._timer is not None:
            self._timer.resume()
        overflow = len(self._pending) - min(self.FLUSH_MAX_LINES, self.max_lines // 2)
        if overflow > 0:
            del self._pending[:overflow]
            self._skipped += overflow

    def clear(self) -> None:
        self._lines.clear()
        self._pending.clear()
        self._skipped = 0
        self._width = 0
        self.total_lines = 0
        self.virtual_size = Size(0, 0)
        self.refresh()

    def _flush(self) -> None:
        if not self._pending and not self._skipped:
            self._timer.pause()
            return
        if self._skipped:
            self._lines.append(("marker", f"… {self._skipped:,} lines skipped to keep up (the full log is on disk)"))
            self._skipped = 0
        for text in self._pending:
            text = clean(text[:_MAX_LINE_CHARS])
            self._width = max(self._width, len(text))
            self._lines.append((severity_of(text), text))
        self._pending.clear()
        self.virtual_size = Size(self._width, len(self._lines))
        if self.follow:
            self._following = True  # our own scroll: not the reader scrolling up
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
            self._following = False
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        severity, text = self._lines[index]
        style = base + self.get_component_rich_style(f"log--{severity}", default=Style.null())  # plain until styled
        visible = text[scroll_x : scroll_x + width]
        return Strip([Segment(visible, style)], len(visible)).extend_cell_length(width, base)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False)

    def action_follow_end(self) -> None:
        self.follow = True
        self.scroll_to(y=self.max_scroll_y, animate=False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # Scrolling up by hand pauses following; reaching the end again resumes it.
        if new < old and not self._following:
            self.follow = False

"""A bounded, severity-coloured log view that stays responsive under floods.

sparktui's own polling of the server (`"GET /metrics HTTP/1.1"` and `"GET /health HTTP/1.1"` from
this machine) is hidden by default: at 80×24 it would fill the view. `p` shows it again.

Lines arrive in batches (`push`); they are buffered and drawn at most `FLUSH_HZ` times a second.
When more than `FLUSH_MAX_LINES` arrive between two draws (half the view when it is empty: a log
read from its start), only the newest are kept and one marker line says how many were skipped
(the full log stays in the file on disk).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.reactive import reactive, var
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

from sparktui.core.vllm_lines import clean as vllm_clean
from sparktui.core.vllm_lines import message_start
from sparktui.ui.actions import bindings

_SEVERITY = re.compile(r"\b(CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_ERRORISH = re.compile(r"^(Traceback|\w*(Error|Exception)\b|RuntimeError|.*\bKilled\b)")
_MAX_LINE_CHARS = 2000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # vLLM colours its prefixes
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# uvicorn's access line for sparktui's own polls: from this machine, /metrics or /health.
_POLLING = re.compile(r'(?:127\.0\.0\.1|\[?::1\]?|localhost):\d+ - "GET /(?:metrics|health) HTTP/1\.1"')


_PROCESS_TAGS = {"APIServer": "", "EngineCore": "engine "}


def compact(line: str) -> tuple[str, int]:
    """(what the log view shows, how many leading cells are dimmed): vLLM's process, level, date and
    [file:line] (as core.vllm_lines reads them: "(APIServer pid=20603) INFO 11-29 19:24:14
    [launcher.py:46] ", a Ray worker's two process prefixes, uvicorn's "LEVEL:   ") shortened to the
    time and, for a process other than the API server, its name, so the message starts near the left
    (the level is the line's colour; the file on disk keeps it all)."""
    text = vllm_clean(line)  # as the parser reads it: other tools' prefixes, indentation, a bar glued before it
    proc, time, start = message_start(text)
    if not start:
        return line, 0
    name = (proc or "APIServer").split("_", 1)[0]
    tag = _PROCESS_TAGS.get(name, name.lower().replace("vllmworker-", "worker") + " ")
    head = (f"{time} " if time else "") + tag
    return head + text[start:], len(head)


def wrap_rows(shown: str, dim: int, width: int) -> list[tuple[int, int, int]]:
    """Where `shown` breaks to fit `width` cells: (start, end, indent) per row. A row breaks after
    its last space (a word longer than a row is cut); the rows after the first hang under the
    message, past the dimmed time and process (`dim` cells), when that leaves room."""
    if width <= 0 or len(shown) <= width:
        return [(0, len(shown), 0)]
    hang = dim if 0 < dim <= width // 3 else 2
    rows: list[tuple[int, int, int]] = []
    start, indent = 0, 0
    while start < len(shown):
        room = width - indent
        end = min(len(shown), start + room)
        if end < len(shown):
            space = shown.rfind(" ", max(start, dim) + 1, end)  # in the message, not its dimmed prefix
            if space >= 0:
                end = space + 1
        rows.append((start, end, indent))
        start, indent = end, hang
    return rows


def is_polling(line: str) -> bool:
    return "GET /" in line and _POLLING.search(line) is not None


def clean(line: str) -> str:
    """A log line as plain text: colour codes and other control characters removed."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:  # progress bars redraw with \r: keep what was drawn last
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
    if line.isprintable():  # no tab and no control character: nothing to replace (most lines)
        return line
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
    """Log lines, newest at the bottom; `f` toggles follow, `p` shows or hides polling lines, `w`
    wraps long lines (the default: at 80×24 and in a 50-column pane a vLLM line is longer than
    the view) or lets them run on, to scroll sideways."""

    FLUSH_HZ = 10
    FLUSH_MAX_LINES = 500  # a draw of 2000 took 22 ms under a flood: a key waited behind it

    BINDINGS = bindings("log")

    COMPONENT_CLASSES = {
        "log--error",
        "log--warning",
        "log--info",
        "log--debug",
        "log--plain",
        "log--marker",
        "log--note",
        "log--prefix",
    }

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
    LogView > .log--note { color: $accent; }
    LogView > .log--prefix { color: $foreground-muted; text-style: not bold; }
    """

    follow: reactive[bool] = reactive(True)
    show_polling: reactive[bool] = reactive(False)
    hidden: var[int] = var(0)  # polling lines not shown, set once per draw (no repaint of its own)
    wrap: reactive[bool] = reactive(True)

    def __init__(self, max_lines: int = 5000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self._all: deque[tuple[str, str, bool]] = deque(maxlen=max_lines)  # (severity, text, polling)
        # what is shown: (severity, the line, the line as drawn, its dimmed leading cells)
        self._lines: deque[tuple[str, str, str, int]] = deque(maxlen=max_lines)
        # the rows on screen, one per line or, wrapped, several: (its line, start, end, indent)
        self._rows: deque[tuple[tuple[str, str, str, int], int, int, int]] = deque()
        self._wrap_width = 0  # the width lines are wrapped at (0: not wrapped)
        self.polling_hidden = 0
        self._pending: list[str] = []
        self._skipped = 0
        self._width = 0
        self._timer: Timer | None = None
        self.total_lines = 0

    def on_mount(self) -> None:
        # Ticks only while lines are waiting: an idle log costs nothing.
        self._timer = self.set_interval(1 / self.FLUSH_HZ, self._flush, pause=True)

    @property
    def batch_cap(self) -> int:
        """The most lines one draw takes; older ones waiting are counted as skipped. An empty view
        takes up to half its length (a log read from its start: what came before it)."""
        if not self._lines:
            return self.max_lines // 2
        return min(self.FLUSH_MAX_LINES, self.max_lines // 2)

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def drawn(self) -> bool:
        """Every line pushed so far is in the view (none waits for the next draw)."""
        return not self._pending and not self._skipped

    def lines(self) -> list[str]:
        return [text for _, text, _, _ in self._lines]

    def _show(self, severity: str, text: str) -> None:
        shown, dim = compact(text) if severity != "marker" else (text, 0)
        entry = (severity, text, shown, dim)
        if len(self._lines) == self.max_lines:  # the oldest line goes: its rows with it
            oldest = self._lines[0]
            while self._rows and self._rows[0][0] is oldest:
                self._rows.popleft()
        self._lines.append(entry)
        self._width = max(self._width, len(shown))
        self._add_rows(entry)

    def _add_rows(self, entry: tuple[str, str, str, int]) -> None:
        if not self._wrap_width:
            self._rows.append((entry, 0, len(entry[2]), 0))
            return
        self._rows.extend(
            (entry, start, end, indent) for start, end, indent in wrap_rows(entry[2], entry[3], self._wrap_width)
        )

    def _virtual_size(self) -> Size:
        return Size(self._wrap_width or self._width, len(self._rows))

    def _set_virtual_size(self, size: Size) -> None:
        """The scrollable size, without laying out the screen: the view's own box is `1fr`, so
        more rows change its scrollbars only (they lay out again themselves when one comes or
        goes). Setting `virtual_size` would arrange every widget on the screen, ten times a
        second under a log flood, most of the panel's time while keys waited."""
        if size != self.virtual_size:
            self.set_reactive(LogView.virtual_size, size)
            self._scroll_update(size)

    def _wanted_wrap_width(self) -> int:
        # the view less the vertical scrollbar's column, whether it shows or not (so its coming
        # and going never wraps everything again)
        return max(1, self.size.width - self.styles.scrollbar_size_vertical) if self.wrap and self.size.width else 0

    def _rewrap(self) -> None:
        """The rows again, for a new width or after the wrap toggled; the top line stays in view."""
        top = self._rows[int(self.scroll_y)][0] if not self.follow and self.scroll_y < len(self._rows) else None
        self._wrap_width = self._wanted_wrap_width()
        self._rows.clear()
        first = 0
        for entry in self._lines:
            if entry is top:
                first = len(self._rows)
            self._add_rows(entry)
        self._set_virtual_size(self._virtual_size())
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
        else:
            self.scroll_to(x=0 if self._wrap_width else None, y=first, animate=False, immediate=True, force=True)
        self.refresh()

    def push(self, lines: list[str], skipped: int = 0) -> None:
        """Queue lines for the next draw (cheap: called for every batch from the reader); `skipped`:
        lines before these that the reader already dropped to keep up."""
        self.total_lines += len(lines) + skipped
        self._skipped += skipped
        self._pending.extend(lines)
        if self._timer is not None:
            self._timer.resume()
        overflow = len(self._pending) - self.batch_cap
        if overflow > 0:
            del self._pending[:overflow]
            self._skipped += overflow

    def note(self, lines: Sequence[tuple[str, str]]) -> None:
        """sparktui's own lines (severity, text), after what was pushed so far: they are not the
        log's, so their severity is given (note, warning, error), not read from a prefix."""
        self._flush()
        for severity, text in lines:
            text = clean(text[:_MAX_LINE_CHARS])
            self._all.append((severity, text, False))
            self._show(severity, text)
        self._set_virtual_size(self._virtual_size())
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
        self.refresh()

    def clear(self) -> None:
        """Empty the view for a new log; it follows again (a new log starts at its end)."""
        self._all.clear()
        self._lines.clear()
        self._rows.clear()
        self._pending.clear()
        self._skipped = 0
        self._width = 0
        self.total_lines = 0
        self.polling_hidden = self.hidden = 0
        self._set_virtual_size(Size(0, 0))
        self.scroll_to(y=0, animate=False, immediate=True, force=True)
        self.follow = True
        self.refresh()

    def _flush(self) -> None:
        if not self._pending and not self._skipped:
            if self._timer is not None:  # set on mount, before any line can be pending
                self._timer.pause()
            return
        if self._skipped:
            marker = f"… {self._skipped:,} lines skipped to keep up (the full log is on disk)"
            self._all.append(("marker", marker, False))
            self._show("marker", marker)
            self._skipped = 0
        show_polling = self.show_polling
        for text in self._pending:
            text = clean(text[:_MAX_LINE_CHARS])
            severity, polling = severity_of(text), is_polling(text)
            self._all.append((severity, text, polling))
            if polling and not show_polling:
                self.polling_hidden += 1
                continue
            self._show(severity, text)
        self._pending.clear()
        self.hidden = self.polling_hidden
        self._set_virtual_size(self._virtual_size())
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self._rows):
            return Strip.blank(width, base)
        (severity, _, shown, dim), begin, end, indent = self._rows[index]
        style = base + self.get_component_rich_style(f"log--{severity}", default=Style.null())  # plain until styled
        if self._wrap_width:  # a row of a wrapped line: all of it fits
            segments = [Segment(" " * indent, base)] if indent else []
            if begin < dim:
                prefix = self.get_component_rich_style("log--prefix", default=Style.null())
                segments.append(Segment(shown[begin:dim], base + prefix))
            segments.append(Segment(shown[max(begin, dim) : end], style))
            return Strip(segments).extend_cell_length(width, base)
        segments = []
        if dim > scroll_x:
            prefix = self.get_component_rich_style("log--prefix", default=Style.null())
            segments.append(Segment(shown[scroll_x : min(dim, scroll_x + width)], base + prefix))
        start = max(scroll_x, dim)
        segments.append(Segment(shown[start : max(start, scroll_x + width)], style))
        return Strip(segments).extend_cell_length(width, base)

    def watch_show_polling(self, show: bool) -> None:
        """Rebuild what is shown from what was kept."""
        self._lines.clear()
        self._rows.clear()
        self.polling_hidden = self._width = 0
        for severity, text, polling in self._all:
            if polling and not show:
                self.polling_hidden += 1
            else:
                self._show(severity, text)
        self.hidden = self.polling_hidden
        self._set_virtual_size(self._virtual_size())
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
        self.refresh()

    def action_toggle_polling(self) -> None:
        self.show_polling = not self.show_polling

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap

    def watch_wrap(self) -> None:
        if self.is_mounted:
            self._rewrap()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False)

    def action_follow_end(self) -> None:
        self.follow = True
        self.scroll_to(y=self.max_scroll_y, animate=False)

    # Following pauses only when the reader scrolls up (keys, wheel), never when the view itself
    # moves: a cleared log, a hidden pane shown again or a resize also lower scroll_y.
    def action_scroll_up(self) -> None:
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        self.action_follow_end()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.follow = False
        super()._on_mouse_scroll_up(event)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # The reader scrolled down to the end (wheel, PageDown, Down, the scrollbar): follow
        # again, as toolong does. Only a move down: a cleared or shortened view moves up.
        if not self.follow and new > old and round(new) >= self.max_scroll_y:
            self.follow = True

    def on_resize(self) -> None:
        if self._wanted_wrap_width() != self._wrap_width:
            self._rewrap()
        if self.follow:
            self.call_after_refresh(self._follow_to_end)

    def _follow_to_end(self) -> None:
        # The end as it is after the refresh: lines may have come meanwhile (a y taken at the
        # resize, before them, scrolled a following view back to the top).
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, force=True)

"""A widget drawn from one Text, redrawn only when that text changes (idle CPU matters: the
gauge and the panels are fed every second)."""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, ClassVar, cast

from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget

if TYPE_CHECKING:
    from typing import Self


_UNSTYLED = Style()  # get_component_rich_style's answer before the stylesheet is applied


class TextPanel(Widget):
    # Repaint only the lines whose words or colours changed, not the whole widget (the gauge: one
    # or two of its twenty lines change with a memory sample, and a whole repaint of it cost more
    # than the rest of an idle second together).
    LINE_BY_LINE: ClassVar[bool] = False

    _last_plain: str | None = None
    _last_spans: list[Span] | None = None
    _last_lines: int = -1
    # LINE_BY_LINE: each source line's key and its rows as drawn at _drawn_width; all rows in order
    _line_cache: list[tuple[tuple[str, tuple[Span, ...]], list[Strip]]] | None = None
    _rows: list[Strip] | None = None
    _drawn_width: int = -1
    _seen_lines: dict[tuple[int, tuple[str, tuple[Span, ...]]], list[Strip]] | None = None  # drawn lately
    _asked_width: int | None = None  # the width a layout asks this panel's height for, meanwhile

    @property
    def draw_width(self) -> int:
        """The width to draw at: the one a layout is asking about, else the laid-out one. Reading
        `self.size` mid-layout gives the previous layout's width (the form's scrollbar comes and
        goes: a text drawn 38 wide, wrapped at 37, took a line more) and arranges the whole screen
        again to answer."""
        return self._asked_width if self._asked_width is not None else self.size.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Textual's own keeps the text drawn for the first width asked and wraps it at the next one.
        if not width:
            return 0
        if self._content_height_cache[0] == width:
            return self._content_height_cache[1]
        self._asked_width = width
        try:
            visual = visualize(self, self.render(), markup=self._render_markup)
        finally:
            self._asked_width = None
        height = visual.get_height(self.styles, width)  # type: ignore[arg-type]  # as Widget does; Textual types it RulesMap
        self._content_height_cache = (width, height)
        return height

    _part_styles: dict[str, Style] | None = None  # as styled now: notify_style_update clears it

    def component_style(self, name: str) -> Style:
        """The Rich style of a COMPONENT_CLASSES entry; plain until the stylesheet has been applied
        (Textual may paint a widget before that, or after unmount cleared them). Applying it
        refreshes the widget, so the styled frame follows. Kept until the styles change: Textual's
        own cache of it is emptied by every refresh, and working one out walks every ancestor
        (the gauge asks for 13 with each memory sample that changes a figure)."""
        styles = self._part_styles
        if styles is None:
            styles = self._part_styles = {}
        style = styles.get(name)
        if style is None:
            style = self.get_component_rich_style(name, default=_UNSTYLED)
            if style is _UNSTYLED:
                return Style.null()  # not styled yet: not kept
            styles[name] = style
        return style

    def changed(self) -> None:
        """Call after changing what render() draws: repaint if the words changed, and lay out
        again only if the number of lines did."""
        if not self.is_mounted:
            return
        text = cast(Text, self.render())  # every TextPanel renders a rich Text
        plain = text.plain
        if plain == self._last_plain and text.spans == self._last_spans:
            return  # the same words in the same colours (a strip's phase can change its colours alone)
        self._last_spans = list(text.spans)
        width = self.content_region.width
        # Lines as drawn at this width (wrapping included): a new count needs a new layout. A text
        # that never wraps is counted without wrapping it (the gauge, redrawn every second).
        if width <= 0:
            lines = -1
        elif text.no_wrap:
            lines = plain.count("\n") + 1
        else:
            lines = len(text.wrap(self.app.console, width))
        layout = lines != self._last_lines or lines < 0
        self._last_plain, self._last_lines = plain, lines
        if self.LINE_BY_LINE and not layout and self._rows is not None:
            dirty = self._redraw_rows(text)
            if dirty is not None:
                if dirty:
                    self.refresh(*(Region(0, y, width, 1) for y in dirty))
                return
            layout = True  # a line now takes another number of rows
        self.refresh(layout=layout)

    def on_resize(self) -> None:
        self._last_plain = None  # what is drawn depends on the width
        self._drop_rows()

    def notify_style_update(self) -> None:
        self._drop_rows()  # drawn with the old theme's colours
        self._part_styles = None
        super().notify_style_update()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        if repaint and not regions:
            self._rows = self._line_cache = None  # all of it: no row drawn before is kept
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    # -- LINE_BY_LINE ------------------------------------------------------------------------------

    def _drop_rows(self) -> None:
        self._rows = self._line_cache = self._seen_lines = None

    def _redraw_rows(self, text: Text) -> list[int] | None:
        """Draw again the lines of `text` that changed since the rows were drawn; the rows that
        changed, or None when the rows must all be drawn again (the width changed, or a line
        now takes another number of rows)."""
        old, old_rows = self._line_cache, self._rows
        width = self.size.width
        if old is None or old_rows is None or width != self._drawn_width:
            return None
        cache, rows = self._draw_lines(text, width, old)
        if len(cache) != len(old) or any(len(a[1]) != len(b[1]) for a, b in zip(cache, old, strict=True)):
            return None
        self._line_cache, self._rows = cache, rows
        return [y for y, (a, b) in enumerate(zip(rows, old_rows, strict=True)) if a is not b]

    def _draw_lines(
        self, text: Text, width: int, old: list[tuple[tuple[str, tuple[Span, ...]], list[Strip]]] | None
    ) -> tuple[list[tuple[tuple[str, tuple[Span, ...]], list[Strip]]], list[Strip]]:
        cache: list[tuple[tuple[str, tuple[Span, ...]], list[Strip]]] = []
        rows: list[Strip] = []
        if self._seen_lines is None:
            self._seen_lines = {}
        seen_lines = self._seen_lines
        for i, key in enumerate(_line_keys(text)):
            if old is not None and i < len(old) and old[i][0] == key:
                strips = old[i][1]
            elif (seen := seen_lines.get((i, key))) is not None:
                strips = seen  # figures come back (an idle machine's MemFree goes to and fro)
            else:
                line = Text(key[0], style=text.style, spans=list(key[1]))
                visual = visualize(self, line, markup=False)
                strips = Visual.to_strips(self, visual, width, None, self.visual_style) or [Strip.blank(width)]
                if i:
                    strips = [_on_line(strip, i) for strip in strips]
                if len(seen_lines) >= 64:
                    seen_lines.clear()
                seen_lines[i, key] = strips
            cache.append((key, strips))
            rows.extend(strips)
        return cache, rows

    def render_line(self, y: int) -> Strip:
        if not self.LINE_BY_LINE or self.text_selection is not None:
            self._rows = None  # a selection is drawn across lines: Textual's own whole draw
            return super().render_line(y)
        width = self.size.width
        if self._rows is None or width != self._drawn_width:
            text = cast(Text, self.render())
            self._line_cache, self._rows = self._draw_lines(text, width, None)
            self._drawn_width = width
        self._dirty_regions.clear()
        if y < len(self._rows):
            return self._rows[y]
        return Strip.blank(width, self.visual_style.rich_style)


def _line_keys(text: Text) -> list[tuple[str, tuple[Span, ...]]]:
    """Each line of `text`: its words and its spans (offsets within the line). Text.split does the
    same, ten times slower (it copies a Text per line, and this runs with every memory sample)."""
    plain = text.plain
    lines = plain.split("\n")
    starts: list[int] = []
    at = 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    spans: list[list[Span]] = [[] for _ in lines]
    for start, end, style in text.spans:
        first = bisect_right(starts, start) - 1
        for i in range(max(0, first), len(lines)):
            line_start = starts[i]
            if line_start >= end:
                break
            s, e = max(start, line_start) - line_start, min(end, line_start + len(lines[i])) - line_start
            if e > s:
                spans[i].append(Span(s, e, style))
    return [(line, tuple(line_spans)) for line, line_spans in zip(lines, spans, strict=True)]


def _on_line(strip: Strip, y: int) -> Strip:
    """`strip` drawn alone, with the line number a whole draw gives its cells (the offsets that
    text selection reads)."""
    segments = []
    for segment in strip:
        style = segment.style
        if style is not None and style._meta:
            offset = style.meta.get("offset")
            if offset is not None:
                style = style + Style.from_meta({"offset": (offset[0], y)})
        segments.append(Segment(segment.text, style, segment.control))
    return Strip(segments, strip.cell_length)

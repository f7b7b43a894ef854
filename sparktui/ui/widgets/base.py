"""A widget drawn from one Text, redrawn only when that text changes (idle CPU matters: the
gauge and the panels are fed every second)."""

from __future__ import annotations

from typing import cast

from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Size
from textual.visual import visualize
from textual.widget import Widget


class TextPanel(Widget):
    _last_plain: str | None = None
    _last_spans: list[Span] | None = None
    _last_lines: int = -1
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
        height = visual.get_height(self.styles, width)
        self._content_height_cache = (width, height)
        return height

    def component_style(self, name: str) -> Style:
        """The Rich style of a COMPONENT_CLASSES entry; plain until the stylesheet has been applied
        (Textual may paint a widget before that, or after unmount cleared them). Applying it
        refreshes the widget, so the styled frame follows."""
        return self.get_component_rich_style(name, default=Style.null())

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
        self.refresh(layout=layout)

    def on_resize(self) -> None:
        self._last_plain = None  # what is drawn depends on the width

"""A widget drawn from one Text, redrawn only when that text changes (idle CPU matters: the
gauge and the panels are fed every second)."""

from __future__ import annotations

from typing import cast

from rich.style import Style
from rich.text import Text
from textual.widget import Widget


class TextPanel(Widget):
    _last_plain: str | None = None
    _last_lines: int = -1

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
        if plain == self._last_plain:
            return
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

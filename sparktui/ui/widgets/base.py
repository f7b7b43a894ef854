"""A widget drawn from one Text, redrawn only when that text changes (idle CPU matters: the
gauge and the panels are fed every second)."""

from __future__ import annotations

from typing import cast

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.visual import visualize
from textual.widget import Widget


class TextPanel(Widget):
    _last_plain: str | None = None
    _last_lines: int = -1
    _height_at: tuple[int, int] | None = None  # (width, content height) measured for that width

    def draw(self, width: int) -> Text | None:
        """The text drawn for `width`, for a panel that fits it to its width (a bar fills the
        line); None for one whose text only wraps (Textual measures render() for those)."""
        return None

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The height of the text drawn for the width being measured. Textual measures the text
        render() drew, once per layout, at each width it tries (with a scrollbar and without); a
        bar drawn for one width wraps at a narrower one, and the panel keeps a height its picture
        does not have. And render() learns its width from the screen's map (Widget.size), which
        in the middle of a layout arranges the whole screen once more."""
        text = self.draw(width) if width else None
        if text is None:
            return super().get_content_height(container, viewport, width)
        if self._height_at is None or self._height_at[0] != width:
            visual = visualize(self, text, markup=False)
            self._height_at = (width, visual.get_height(self.styles, width))  # type: ignore[arg-type]  # as Textual passes them
        return self._height_at[1]

    def clear_cached_dimensions(self) -> None:
        super().clear_cached_dimensions()  # every repaint, so a new text is measured again
        self._height_at = None

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

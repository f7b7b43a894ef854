"""A widget drawn from one Text, redrawn only when that text changes (idle CPU matters: the
gauge and the panels are fed every second)."""

from __future__ import annotations

from textual.widget import Widget


class TextPanel(Widget):
    _last_plain: str | None = None
    _last_lines: int = -1

    def changed(self) -> None:
        """Call after changing what render() draws: repaint if the words changed, and lay out
        again only if the number of lines did."""
        if not self.is_mounted:
            return
        try:
            text = self.render()
        except KeyError:  # component styles not applied yet (start-up) or gone (shut-down)
            self._last_plain = None
            self.refresh(layout=True)
            return
        plain = text.plain
        if plain == self._last_plain:
            return
        width = self.content_region.width
        # Lines as drawn at this width (wrapping included): a new count needs a new layout.
        lines = len(text.wrap(self.app.console, width)) if width > 0 else -1
        layout = lines != self._last_lines or lines < 0
        self._last_plain, self._last_lines = plain, lines
        self.refresh(layout=layout)

    def on_resize(self) -> None:
        self._last_plain = None  # what is drawn depends on the width

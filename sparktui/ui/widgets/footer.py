"""The key bar at the bottom: Textual's Footer, less the rebuilds that change nothing.

Textual's Footer builds all its keys again (a widget each, styled and laid out) whenever the
screen's bindings are updated: every focus move, in the form on every Tab, even when the keys it
shows stay the same. At start that was three rebuilds before the first full screen. Each key also
came with Textual's `compact` default and was styled, then restyled as the footer bound it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # not exported by textual.widgets

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.screen import Screen


class PanelFooter(Footer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._keys_shown: tuple[Any, ...] | None = None  # the bindings of the last rebuild

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:  # it rebuilds
            shown = tuple(
                (binding, enabled, tooltip) for _, binding, enabled, tooltip in screen.active_bindings.values()
            )
            if shown == self._keys_shown:
                return
            self._keys_shown = shown
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            # a key the footer binds to its own `compact` is born so (the palette's key is not bound)
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                widget.set_reactive(FooterKey.compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

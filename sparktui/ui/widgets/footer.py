"""The key bar at the bottom: Textual's Footer, less the rebuilds that change nothing.

Textual's Footer builds all its keys again (a widget each, styled and laid out) whenever the
screen's bindings are updated: every focus move, in the form on every Tab, even when the keys it
shows stay the same. At start that was three rebuilds before the first full screen. Each key also
came with Textual's `compact` default and was styled, then restyled as the footer bound it back.

Until the first full screen is drawn (`keys_as_widgets`) the footer draws its keys itself, as one
line of text, the same cells as Textual's keys (the same rules, as component classes): eleven key
widgets styled, laid out and drawn were about a tenth of that screen's CPU. Their widgets (hover,
click, tooltips, scrolling) are mounted once it is up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # not exported by textual.widgets

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.screen import Screen


class PanelFooter(Footer):
    # FooterKey's rules (and Footer's for the command palette's key), for the keys drawn as text
    COMPONENT_CLASSES: ClassVar[set[str]] = {"panel-footer--key", "panel-footer--description", "panel-footer--border"}
    DEFAULT_CSS = """
    PanelFooter {
        & > .panel-footer--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        & > .panel-footer--description { color: $footer-description-foreground; background: $footer-description-background; }
        & > .panel-footer--border { color: $foreground 20%; }
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._keys_shown: tuple[Any, ...] | None = None  # the bindings of the last rebuild
        self._as_text = True  # the keys drawn by render(), no key widgets yet

    def keys_as_widgets(self) -> None:
        """The first full screen is up: mount the key widgets (they draw the same cells)."""
        if self._as_text:
            self._as_text = False
            self._keys_shown = None
            if self._bindings_ready:  # from the footer's own queue: its keys bind to its reactives
                self.call_later(self.bindings_changed, self.screen)

    def render(self) -> Text:
        if not self._as_text or not self._bindings_ready:
            return Text()
        app = self.app
        active = self.screen.active_bindings
        base = self.rich_style
        key_style, description_style, border_style = (
            self.get_component_rich_style(f"panel-footer--{part}") for part in ("key", "description", "border")
        )
        dim = Style(dim=True)
        seen: set[str] = set()
        keys = Text(no_wrap=True, overflow="crop", end="")
        for _, binding, enabled, _tooltip in active.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)  # one key per action (Footer: the first of its bindings)
            extra = Style() if enabled else dim  # a disabled key is dim (FooterKey.-disabled)
            key = Text.assemble(
                (f" {app.get_key_display(binding)} ", key_style + extra),
                (f"{binding.description} ", description_style + extra),
            )
            key.stylize_before(base)
            keys.append_text(key)
        width = self.size.width
        palette = Text(no_wrap=True, end="")
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE and app.COMMAND_PALETTE_BINDING in active:
            _, binding, enabled, _tooltip = active[app.COMMAND_PALETTE_BINDING]
            extra = Style() if enabled else dim
            # docked right: its left border, the key and its description (compact), one cell of padding
            palette = Text.assemble(
                ("▏", base + border_style),
                (app.get_key_display(binding), key_style + extra),
                (f" {binding.description}", description_style + extra),
                (" ", base),
            )
            palette.stylize_before(base)
        keys.truncate(max(0, width - palette.cell_len), pad=True)
        keys.stylize_before(base)
        keys.append_text(palette)
        return keys

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if self._as_text:
            self._bindings_ready = True  # drawn by render() until the first full screen
            self.refresh()
            return
        if screen.app.app_focus and self.is_attached and screen is self.screen:  # it rebuilds
            shown = tuple(
                (binding, enabled, tooltip) for _, binding, enabled, tooltip in screen.active_bindings.values()
            )
            if shown == self._keys_shown:
                return
            self._keys_shown = shown
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        if self._as_text:
            return
        for widget in super().compose():
            # a key the footer binds to its own `compact` is born so (the palette's key is not bound)
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                widget.set_reactive(FooterKey.compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

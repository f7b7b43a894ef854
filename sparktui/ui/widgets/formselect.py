"""The form's Select: one that the app may remove while it is still being mounted, and that the
first screen draws as text.

Textual's Select sets itself up in its Mount handler from its parts (the overlay's options, the
label of the current value). When the app closes while the form's later rows are being mounted (a
quit just after the first screen), those parts are removed before the Select's Mount is handled:
Textual's Select then raised NoMatches ('SelectOverlay', or '#label' on SelectCurrent) and the app
ended on a traceback.

A Select made `as_text` (the rows of the first screen) has no parts until `as_widgets`: it draws
its current value and its arrow itself, the cells its compact parts draw (the same rules, as
component classes). Its parts (the current value's three statics, the option list) were five
widgets styled and laid out for a screen that shows one line of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events
from textual.widgets import Select
from textual.widgets._select import SelectOverlay  # not exported by textual.widgets

if TYPE_CHECKING:
    from textual.app import ComposeResult


class FormSelect(Select[Any]):
    # SelectCurrent's compact rules for the parts drawn as text: its label, without and with a
    # value, and its arrow
    COMPONENT_CLASSES: ClassVar[set[str]] = {"form-select--prompt", "form-select--value", "form-select--arrow"}
    DEFAULT_CSS = """
    FormSelect.-as-text {
        height: 1;
        background: $surface;
        padding: 0 1 0 0;
        pointer: pointer;
        & > .form-select--prompt { color: $foreground 50%; }
        & > .form-select--value { color: $foreground; }
        & > .form-select--arrow { color: $foreground 50%; }
    }
    """

    def __init__(self, *args: Any, as_text: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._as_text = as_text
        self.set_class(as_text, "-as-text", update=False)

    def compose(self) -> ComposeResult:
        if not self._as_text:
            yield from super().compose()

    def as_widgets(self) -> None:
        """Mount the parts (the first screen is up): from the select's own queue, as its parts
        bind to its reactives."""
        if self._as_text:
            self.call_later(self._mount_parts)

    async def _mount_parts(self) -> None:
        """The parts, set up as Textual's Mount handler does."""
        if not self._as_text:
            return
        self._as_text = False
        self.set_class(False, "-as-text")
        await self.recompose()
        if self.query(SelectOverlay) and self.query("SelectCurrent #label"):
            self._setup_options_renderables()
            held = self._value  # given when made, or loaded since (Select keeps it here)
            if self.value == held:
                self._watch_value(held)  # the parts show it (the value it had while drawn as text)
            else:
                self._init_selected_option(held)

    def render(self) -> Text:
        if not self._as_text:
            return Text()
        value = self._value  # given when made, or loaded since
        if value is Select.NULL:
            label, style = self.prompt, self.get_component_rich_style("form-select--prompt")
        else:
            label = next((str(prompt) for prompt, v in self._options if v == value), str(value))
            style = self.get_component_rich_style("form-select--value")
        width = self.content_region.width
        text = Text(label, style=style, no_wrap=True, overflow="crop", end="")
        text.truncate(max(0, width - 2), pad=True)
        text.append(" ▼", self.get_component_rich_style("form-select--arrow"))
        return text

    def watch_value(self) -> None:
        if self._as_text:
            self.refresh()  # the form loaded a value: drawn here until the parts are mounted

    def action_show_overlay(self) -> None:
        if self._as_text:  # a key in the moment before the parts mount: mount them, then open
            self.call_later(self._show_after_parts)
        else:
            super().action_show_overlay()

    async def _show_after_parts(self) -> None:
        await self._mount_parts()
        if self.query(SelectOverlay):
            super().action_show_overlay()

    def _on_mount(self, event: events.Mount) -> None:
        if not self.query(SelectOverlay) or not self.query("SelectCurrent #label"):
            event.prevent_default()  # its parts are gone (being removed), or not yet made: nothing to set up

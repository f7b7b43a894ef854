"""The narrow terminal's pane tabs: a row of labels over a bar that marks the active one, drawn as
Textual's Tabs draws them (the same colours, the bar under the active label, the active label in
the cursor's colours while the tabs have focus), in one widget.

Textual's Tabs is nine widgets (the tabs, their scroll and list containers, the underline), each
styled, laid out and drawn for the 80×24 first screen: about 10 ms of its CPU. The panel's four
tabs never change, scroll or get disabled; what they do is kept: a click on a label or under it,
Left and Right while they have focus, and Tab reaching them first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.renderables.bar import Bar
from textual.widget import Widget

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import RenderableType


class PaneTabs(Widget, can_focus=True):
    ALLOW_SELECT = False  # as Textual's Tab: a click picks a tab, it does not select its text
    # Textual's Tab, Tabs and Underline rules, for the parts this one widget draws
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "pane-tabs--tab",
        "pane-tabs--hover",
        "pane-tabs--active",
        "pane-tabs--bar",
    }
    DEFAULT_CSS = """
    PaneTabs {
        width: 100%;
        height: 2;
        pointer: pointer;
        & > .pane-tabs--tab { color: $foreground 50%; }
        & > .pane-tabs--hover { color: $foreground; }
        & > .pane-tabs--active { color: $foreground; }
        & > .pane-tabs--bar { color: $block-cursor-background; background: $foreground 10%; }
        &:focus {
            & > .pane-tabs--active {
                text-style: $block-cursor-text-style;
                color: $block-cursor-foreground;
                background: $block-cursor-background;
            }
            & > .pane-tabs--bar { background: $foreground 30%; }
        }
        &:ansi {
            & > .pane-tabs--tab, & > .pane-tabs--hover { text-style: dim; }
            & > .pane-tabs--active { text-style: not dim bold; }
            & > .pane-tabs--bar { color: $block-cursor-background; background: $border-blurred; }
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1)", "Previous tab", show=False),
        Binding("right", "move(1)", "Next tab", show=False),
    ]

    active: reactive[str] = reactive("")
    _hovered: reactive[int | None] = reactive(None)

    class Activated(Message):
        """A tab was clicked, or reached with Left or Right: show its pane."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, tabs: Sequence[tuple[str, str]], active: str, *, id: str | None = None) -> None:
        """`tabs`: (name, label) in order; `active`: the name of the one shown."""
        super().__init__(id=id)
        self.tabs = list(tabs)
        self.set_reactive(PaneTabs.active, active)

    def _spans(self) -> list[tuple[int, int]]:
        """Each tab's columns (start, end), its padding of one on each side included."""
        spans, x = [], 0
        for _, label in self.tabs:
            spans.append((x, x + len(label) + 2))
            x += len(label) + 2
        return spans

    def render(self) -> RenderableType:
        row = Text(no_wrap=True, overflow="crop")
        plain, hover, current = (self.get_component_rich_style(f"pane-tabs--{p}") for p in ("tab", "hover", "active"))
        for i, (name, label) in enumerate(self.tabs):
            style = current if name == self.active else hover if i == self._hovered else plain
            row.append(f" {label} ", style)
        bar = self.get_component_rich_style("pane-tabs--bar")
        names = [name for name, _ in self.tabs]
        if self.active in names:
            start, end = self._spans()[names.index(self.active)]
            highlight = (start + 1, end - 1)  # under the label, not its padding (as Tabs draws it)
        else:
            highlight = (0, 0)
        return Group(
            row,
            Bar(highlight, highlight_style=Style.from_color(bar.color), background_style=Style.from_color(bar.bgcolor)),
        )

    def watch_active(self) -> None:
        self.refresh()

    def watch__hovered(self) -> None:
        self.refresh()

    def _tab_at(self, x: int) -> int | None:
        return next((i for i, (start, end) in enumerate(self._spans()) if start <= x < end), None)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._hovered = self._tab_at(event.x) if event.y == 0 else None

    def on_leave(self) -> None:
        self._hovered = None

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.focus()
        index = self._tab_at(event.x)  # on the label or the bar under it
        if index is not None:
            self._activate(self.tabs[index][0])

    def action_move(self, step: int) -> None:
        names = [name for name, _ in self.tabs]
        index = names.index(self.active) if self.active in names else -1 if step > 0 else 0
        self._activate(names[(index + step) % len(names)])

    def _activate(self, name: str) -> None:
        self.active = name
        self.post_message(self.Activated(name))

"""Modal screens: help, confirm, a one-line prompt, and a list to choose from."""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from sparktui.errors import UserError


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no; dismisses with True only on y."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog danger"):
            yield Static(self.question, classes="dialog-title")
            yield Label("y: yes    n / Esc: no", classes="dialog-hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class LineInput(Input):
    """An Input that keeps a multi-line paste whole: backslash-continued lines (`vllm serve … \\`
    as model cards print it) become one line, where Textual's Input keeps only the first."""

    def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()  # not Input's own handler too (it would add the first line again)
        text = re.sub(r"\\?\r?\n\s*", " ", event.text.strip())
        if text:
            if self.selection.is_empty:
                self.insert_text_at_cursor(text)
            else:
                self.replace(text, *self.selection)
        event.stop()


class PromptScreen(ModalScreen[object]):
    """One line of input. `check(text)` returns the result or raises UserError, shown in place."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(
        self, title: str, check: Callable[[str], object], value: str = "", placeholder: str = "", hint: str = ""
    ) -> None:
        super().__init__()
        self.title_text, self.check, self.value, self.placeholder = title, check, value, placeholder
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            if self.hint:
                yield Static(self.hint, classes="dialog-note")
            yield LineInput(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("", id="prompt-error", classes="dialog-error")
            yield Label("Enter: apply    Esc: cancel", classes="dialog-hint")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            result = self.check(event.value)
        except UserError as exc:
            self.query_one("#prompt-error", Static).update(Text(str(exc)))
            return
        self.dismiss(result)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ChoiceScreen(ModalScreen[object]):
    """Pick one of `options` ((label, value) pairs); typing filters them."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="choice.cancel"),
        Binding("down", "move(1)", "Down", show=False, id="choice.down"),
        Binding("up", "move(-1)", "Up", show=False, id="choice.up"),
    ]

    def __init__(self, title: str, options: list[tuple[str, object]], empty: str = "nothing to choose from") -> None:
        super().__init__()
        self.title_text, self.options, self.empty = title, options, empty
        self.shown: list[int] = list(range(len(options)))  # indexes into options, as listed now

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            if self.options:
                yield Input(placeholder="type to filter", id="choice-filter", compact=True)
                yield OptionList(*(Option(label, id=str(i)) for i, (label, _) in enumerate(self.options)), id="choices")
            else:
                yield Static(self.empty, classes="dialog-error")
            yield Label("Enter: choose    Esc: cancel", classes="dialog-hint")

    def on_mount(self) -> None:
        if self.options:
            self.query_one(OptionList).highlighted = 0

    @on(Input.Changed, "#choice-filter")
    def _filter(self, event: Input.Changed) -> None:
        words = event.value.lower().split()
        shown = [i for i, (label, _) in enumerate(self.options) if all(w in label.lower() for w in words)]
        if shown == self.shown:
            return  # the same entries (a space, a letter they all still have): the list and the entry moved to stay
        self.shown = shown
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(self.options[i][0], id=str(i)) for i in self.shown])
        options.highlighted = 0 if self.shown else None

    def action_move(self, step: int) -> None:
        options = self.query_one(OptionList)
        if self.shown:
            current = options.highlighted if options.highlighted is not None else -step
            options.highlighted = max(0, min(len(self.shown) - 1, current + step))

    @on(Input.Submitted, "#choice-filter")
    def _submitted(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None and self.shown:
            self.dismiss(self.options[self.shown[options.highlighted]][1])

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.options[int(event.option.id or 0)][1])

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key, its binding id (for remapping in the user config) and what it does."""

    BINDINGS = [Binding("escape,f1,q", "close", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str]], config_path: str) -> None:
        super().__init__()
        self.rows, self.config_path = rows, config_path

    def compose(self) -> ComposeResult:
        from rich.console import Group
        from rich.table import Table

        # columns, not padded text: a description that wraps stays in its column, so the binding id
        # never runs into it ("grace)server.stop")
        table = Table.grid(padding=(0, 2))
        table.add_column("Key", no_wrap=True)
        table.add_column("Action", ratio=1)
        table.add_column("Binding id", no_wrap=True)
        table.add_row(Text("Key", "bold"), Text("Action", "bold"), Text("Binding id", "bold"))
        for key, description, binding_id in self.rows:
            table.add_row(key, description, binding_id)
        remap = Text(f'\nRemap keys in {self.config_path}:\n[keys]\n"server.launch" = "ctrl+l"\n')
        self.table = Group(table, remap)
        with Vertical(classes="dialog wide"):
            yield Static("Keys    (Esc closes this help)", classes="dialog-title", id="help-title")
            with VerticalScroll():
                yield Static(self.table, id="help-table")

    def action_close(self) -> None:
        self.dismiss(None)

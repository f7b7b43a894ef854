"""The Textual app."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Footer, Header, Static


class SparkApp(App):
    TITLE = "sparktui"

    def __init__(self, profile: str | None = None, theme_name: str | None = None) -> None:
        super().__init__()
        self.profile_arg = profile
        self.theme_arg = theme_name

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("sparktui control panel", id="placeholder")
        yield Footer()

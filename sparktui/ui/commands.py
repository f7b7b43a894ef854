"""The command palette (Ctrl+P): every action of `ui.actions` with its current key, plus load a
profile, switch theme, apply a particular suggestion, follow a particular server, show a pane."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from sparktui.ui.actions import key_label, keys_for, palette_actions
from sparktui.ui.panes import PANES

if TYPE_CHECKING:
    from sparktui.core.profiles import ProfileRef


class SparkCommands(Provider):
    profiles: list[ProfileRef] = []

    async def startup(self) -> None:
        """The profiles, read once per palette opening (off the UI thread)."""
        app: Any = self.app
        try:
            self.profiles = await asyncio.to_thread(app.backend.list_profiles)
        except Exception:  # the palette still works without them; Ctrl+O says what is wrong
            self.profiles = []

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app: Any = self.app
        items: list[tuple[str, Callable[[], object], str]] = []
        for action in palette_actions():
            run = partial(app.call_later, app.run_action, action.palette_action)
            items.append((action.title, run, key_label(keys_for(action, app.keymap))))
        for ref in self.profiles:
            items.append(
                (
                    f"Load profile: {ref.name}",
                    partial(app.query_one("#config-pane").load_profile, ref.path),
                    f"{ref.source}: {ref.description}".strip(),
                )
            )
        for name in app.sparktui_themes():
            items.append((f"Theme: {name}", partial(setattr, app, "theme", name), "switch theme (saved)"))
        fit = app.fit
        for i, suggestion in enumerate(fit.applicable if fit is not None else [], 1):
            items.append(
                (
                    f"Apply suggestion {i}: {suggestion.text}",
                    partial(app.call_later, app.run_action, f"pane('config', 'apply_suggestion({i})')"),
                    "change the form as the fit engine suggests",
                )
            )
        server_pane = app.query_one("#server-pane")
        for entry in app.servers:
            items.append(
                (
                    f"Server :{entry.port} ({entry.profile}): follow it",
                    partial(server_pane.select, entry.port),
                    f"{entry.text()}; the server pane's log, figures, stop and kill act on it",
                )
            )
        for pane in PANES:
            items.append((f"Show the {pane.NAME} pane", partial(app.show_pane, pane.NAME), "Ctrl+N cycles panes"))
        return items

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)

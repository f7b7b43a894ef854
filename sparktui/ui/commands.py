"""The command palette (Ctrl+P): everything the keys do, plus load profile / switch theme /
apply a particular suggestion."""

from __future__ import annotations

import asyncio
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class SparkCommands(Provider):
    async def startup(self) -> None:
        """The profiles, read once per palette opening (off the UI thread)."""
        try:
            self.profiles = await asyncio.to_thread(self.app.backend.list_profiles)
        except Exception:  # the palette still works without them; Ctrl+O says what is wrong
            self.profiles = []

    def _commands(self) -> list[tuple[str, object, str]]:
        app = self.app
        items: list[tuple[str, object, str]] = [
            ("Launch the server", app.action_launch, "start vLLM with this configuration (F5)"),
            ("Stop the server", app.action_stop, "SIGTERM to the process group, then SIGKILL after grace (F6)"),
            ("Restart the server", app.action_restart, "stop, then launch again (F7)"),
            ("Kill the server now", app.action_kill, "SIGKILL the whole tree at once, after one confirmation (F8)"),
            ("Arm / disarm the guard", app.action_toggle_guard, "F9"),
            ("Edit the guard lines", app.action_guard_lines, "warn / term / kill thresholds in GiB (Ctrl+G)"),
            ("Open a profile…", app.action_open_profile, "Ctrl+O"),
            ("Save the profile", app.action_save, "Ctrl+S"),
            ("Save the profile as…", app.action_save_as, "F2"),
            ("Pick a model from the local cache", app.action_pick_model, "F3"),
            ("Paste a vllm serve command", app.action_paste_command, "F4"),
            ("Show the keys", app.action_help, "F1"),
        ]
        for ref in getattr(self, "profiles", []):
            items.append(
                (
                    f"Load profile: {ref.name}",
                    partial(app.load_profile, ref.path),
                    f"{ref.source}: {ref.description}".strip(),
                )
            )
        for name in app.sparktui_themes():
            items.append((f"Theme: {name}", partial(setattr, app, "theme", name), "switch theme (saved)"))
        for i, suggestion in enumerate(app.fit_view.applicable, 1):
            items.append(
                (
                    f"Apply suggestion {i}: {suggestion.text}",
                    partial(app.action_apply_suggestion, i),
                    "change the form as the fit engine suggests",
                )
            )
        for pane in ("config", "server", "memory"):
            items.append((f"Show the {pane} pane", partial(app.show_pane, pane), "Ctrl+N cycles panes"))
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

"""Every action a key can run, listed once.

From this one table come the app's and the log view's key bindings, the command palette's
entries, the help screen's rows and the README's key table (tests/ui/test_actions.py keeps
README.md in step). Each action has a binding id: a user remaps its key in the settings file
(`[keys] "server.launch" = "ctrl+l"`), and the new key then shows in the footer, the help and
the palette alike.

An action with a `pane` runs on that pane (`SparkApp.action_pane`), so the keys work whichever
pane has the focus, while the behaviour lives in the pane's module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding, BindingType

Scope = Literal["app", "log"]


@dataclass(frozen=True)
class Action:
    id: str  # the binding id users remap
    key: str  # default key(s), Textual's names, comma-separated
    name: str  # the action method, without "action_" (may carry arguments: "apply_suggestion(0)")
    label: str  # the footer's word
    title: str  # the palette's and the help's line
    pane: str | None = None  # config | server | memory | bench: the pane that runs it; None: the app (or the log)
    scope: Scope = "app"  # where the binding lives: the app, or the focused log view
    show: bool = True  # in the footer
    palette: bool = True
    priority: bool = False

    @property
    def action(self) -> str:
        """The Textual action string the binding runs."""
        return f"pane({self.pane!r}, {self.name!r})" if self.pane else self.name

    @property
    def palette_action(self) -> str:
        """What the palette runs: the log's actions go through the server pane (no focus needed)."""
        return f"pane('server', {self.name!r})" if self.scope == "log" else self.action

    def binding(self) -> Binding:
        return Binding(
            self.key, self.action, self.label, show=self.show, id=self.id, priority=self.priority, tooltip=self.title
        )


ACTIONS: tuple[Action, ...] = (
    Action("app.help", "f1", "help", "Help", "Show every key and its binding id"),
    Action("server.launch", "f5", "launch", "Launch", "Launch the server with this configuration", pane="server"),
    Action(
        "server.stop", "f6", "stop", "Stop", "Stop the server (SIGTERM the group, SIGKILL after grace)", pane="server"
    ),
    Action("server.restart", "f7", "restart", "Restart", "Restart the server", pane="server", show=False),
    Action("server.kill", "f8", "kill", "Kill", "Kill the vLLM tree now (asks once)", pane="server"),
    Action(
        "server.next",
        "ctrl+r",
        "next_server",
        "Servers",
        "Switch the server pane to the next running server (its log, figures, stop and kill)",
        pane="server",
        show=False,  # the footer is full at 120 columns; the server list over the pane shows the key
    ),
    Action(
        "server.previous",
        "ctrl+e",
        "previous_server",
        "Previous server",
        "Switch the server pane to the previous running server (its log, figures, stop and kill)",
        pane="server",
        show=False,
    ),
    Action("guard.toggle", "f9", "toggle_guard", "Guard", "Arm or disarm the memory guard", pane="memory"),
    Action(
        "guard.lines", "ctrl+g", "guard_lines", "Guard lines", "Edit the guard lines (GiB)", pane="memory", show=False
    ),
    Action("config.open", "ctrl+o", "open_profile", "Profile", "Open a profile", pane="config"),
    Action("config.save", "ctrl+s", "save", "Save", "Save the profile", pane="config"),
    Action("config.save_as", "f2", "save_as", "Save as", "Save the profile as…", pane="config", show=False),
    Action(
        "config.model", "f3", "pick_model", "Model", "Pick a model from the local HF cache", pane="config", show=False
    ),
    Action("config.paste", "f4", "paste_command", "Paste cmd", "Paste a `vllm serve` line", pane="config", show=False),
    Action(
        "config.advise",
        "f12",
        "advise",
        "Advise",
        "Advise: this model's variants (fit, predicted speed, longest context)",
        pane="config",
        show=False,
    ),
    Action(
        "config.download",
        "f11",
        "download_model",
        "Download",
        "Download this model into the Hugging Face cache (free disk checked first; resumes)",
        pane="config",
        show=False,
    ),
    Action(
        "fit.apply",
        "ctrl+f",
        "apply_suggestion(0)",
        "Apply fix",
        "Apply fit suggestion [1] (the palette applies any)",
        pane="config",
        show=False,
    ),
    Action(
        "fit.grid",
        "ctrl+y",
        "trade_off_grid",
        "Grid",
        "Trade-off grid: users × context for this model, fp8 KV beside (Enter applies a cell)",
        pane="config",
        show=False,
    ),
    Action(
        "bench.run",
        "f10",
        "run_bench",
        "Bench",
        "Benchmark the running server (again: cancel)",
        pane="bench",
        show=False,  # the footer is full at 120 columns; the help, the palette and the Bench tab show it
    ),
    Action(
        "bench.settings",
        "ctrl+b",
        "bench_settings",
        "Bench settings",
        "Benchmark users, prompt and output tokens, requests per user",
        pane="bench",
        show=False,
    ),
    Action("app.theme", "ctrl+t", "next_theme", "Theme", "Next theme", show=False),
    Action("app.pane", "ctrl+n", "next_pane", "Pane", "Next pane (narrow terminals)"),
    Action("app.quit", "ctrl+q", "quit", "Quit", "Quit (the server keeps running)", priority=True),
    Action("log.follow", "f", "toggle_follow", "Follow", "Follow or pause the log (log focused)", scope="log"),
    Action("log.end", "end", "follow_end", "End", "Jump to the end and follow (log focused)", scope="log", show=False),
    Action(
        "log.polling",
        "p",
        "toggle_polling",
        "Polling",
        "Show or hide sparktui's own /metrics and /health requests in the log (log focused)",
        scope="log",
    ),
    Action(
        "log.wrap",
        "w",
        "toggle_wrap",
        "Wrap",
        "Wrap long log lines, or let them run on to scroll sideways (log focused)",
        scope="log",
        show=False,
    ),
)

BY_ID: dict[str, Action] = {a.id: a for a in ACTIONS}
PALETTE_ONLY = ("Ctrl+P", "Command palette", "–")


def bindings(scope: Scope) -> list[BindingType]:
    return [a.binding() for a in ACTIONS if a.scope == scope]


def keys_for(action: Action, keymap: Mapping[str, str]) -> str:
    """The key(s) of `action` with the user's remapping applied, as Textual names them."""
    return keymap.get(action.id, action.key)


def key_label(keys: str) -> str:
    """Textual key names as a person reads them: "ctrl+o,f5" -> "Ctrl+O / F5"."""

    def one(key: str) -> str:
        parts = key.strip().split("+")
        *mods, last = parts
        last = last.upper() if len(last) == 1 or (last[0] == "f" and last[1:].isdigit()) else last.capitalize()
        if len(last) == 1 and not mods:
            last = last.lower()  # a plain letter key is typed lower case
        return "+".join([*(m.capitalize() for m in mods), last])

    return " / ".join(one(k) for k in keys.split(","))


def help_rows(keymap: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(keys, what it does, binding id) for every action, with the user's keys."""
    rows = [(key_label(keys_for(a, keymap)), a.title, a.id) for a in ACTIONS]
    rows.append(PALETTE_ONLY)
    return rows


def palette_actions() -> Iterable[Action]:
    return (a for a in ACTIONS if a.palette)


def readme_table() -> str:
    """The README's key table (default keys), as Markdown."""
    lines = ["| Key | Action | Binding id |", "|---|---|---|"]
    for keys, title, binding_id in help_rows({}):
        ident = f"`{binding_id}`" if binding_id != "–" else binding_id
        lines.append(f"| {keys} | {title.replace('|', '/')} | {ident} |")
    return "\n".join(lines)

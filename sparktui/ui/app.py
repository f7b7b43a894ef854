"""The control panel: the config pane (form and fit), the server pane (launch and log) and the
memory pane (gauge and guard), each in its own module under `ui/panes`, each owning its workers.

The app holds only what the panes share: the working profile, the server, the latest memory
sample, the fit and the guard (`var`s: a new value runs watchers but repaints nothing by itself,
so a memory sample every second does not redraw the screen). Panes post messages (`ui.messages`); the app sets its reactives;
data binding carries them into every pane that declares them. Keys come from `ui.actions`.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.geometry import Size
from textual.reactive import var
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import Worker, WorkerState

from sparktui.errors import UserError
from sparktui.ui import messages as msg
from sparktui.ui.actions import bindings, help_rows
from sparktui.ui.backend import Backend
from sparktui.ui.commands import SparkCommands
from sparktui.ui.css_cache import CssCache
from sparktui.ui.panes import PANES, ConfigPane, Pane
from sparktui.ui.settings import Settings, load_settings, save_theme
from sparktui.ui.themes import DEFAULT_THEME, load_themes, theme_dirs
from sparktui.ui.translate import profile_guard_view
from sparktui.ui.viewmodels import FitView, GuardView
from sparktui.ui.widgets.base import TextPanel
from sparktui.ui.widgets.footer import PanelFooter
from sparktui.ui.widgets.panetabs import PaneTabs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from textual.dom import DOMNode
    from textual.notifications import SeverityLevel

    from sparktui.core.profiles import Profile
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.ui.serverviews import ServerEntry, ServerStatus

SHARED = ("profile", "server", "servers", "sample", "fit", "guard")


def _gib1(n: int) -> str:
    return f"{n / 2**30:.1f}"


class PanelScreen(Screen[None]):
    """The panel's screen. Its first resume keeps the styles each widget got as it mounted (the theme
    and the breakpoint class were in place before the first of them): Textual restyles every
    widget there, a fifth of the stylesheet's work before the first full screen."""

    _resumed = False

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False
            # only this node was styled before compose gave it the breakpoint class
            self.app.stylesheet.apply(self, animate=False)

    def _refresh_layout(self, size: Size | None = None, scroll: bool = False) -> None:
        app = self.app
        if getattr(app, "holding_first_screen", False) and app._dom_ready:
            # held (SparkApp.show_first_screen): one layout when it is drawn, not one per resize
            self._layout_required = True
            return
        super()._refresh_layout(size, scroll)

    def _compositor_refresh(self) -> None:
        if self.app._batch_count:
            return  # what it would render is dropped undrawn (App._display); the dirty regions stay
        super()._compositor_refresh()

    first_frame_pending = False  # set when the held first screen is released (SparkApp.show_first_screen)

    def _on_timer_update(self) -> None:
        if self.first_frame_pending and self._layout_required and not self.app._batch_count and self.is_current:
            # The first frame is one full render, drawn with its layout. The repaints asked for while
            # it was held would have rendered and written the whole screen a second time, at once.
            self.first_frame_pending = False
            self._compositor._dirty_regions.add(self.size.region)
            self._repaint_required = False
        super()._on_timer_update()


class StatusBar(TextPanel):
    """Top line: host, server condition, guard state, MemAvailable, profile. At 80 columns the long
    forms do not fit: it drops the badge and the host and shortens words before it cuts anything,
    and the profile name is elided in its middle, never dropped."""

    text = Text()
    parts: dict[str, str] = {}

    def show(self, text: Text, parts: dict[str, str] | None = None) -> None:
        self.text = text
        self.parts = parts or {}
        self.changed()

    def render(self) -> Text:
        width = self.draw_width
        if not self.parts or not width or self.text.cell_len <= width:
            return self.text
        return self.fitted(width)

    def fitted(self, width: int) -> Text:
        p = self.parts
        server, guard, avail, name = p["server"], p["guard"], p.get("avail", ""), p["name"]
        short_avail = f" │ {avail}G" if avail else ""
        for host in (f" {p['host']} │", ""):
            line = f"{host} {server} │ guard {guard}{short_avail} │ {name}"
            if len(line) <= width:
                return self._styled(line, server, guard)
        head = f" {server} │ {guard}{short_avail} │ "
        room = width - len(head)
        if room < len(name) and room >= 5:  # the start and the end of the name say which profile
            keep = room - 1
            name = name[: (keep + 1) // 2] + "…" + name[len(name) - keep // 2 :]
        return self._styled(head + name, server, guard)

    def _styled(self, line: str, server: str, guard: str) -> Text:
        out = Text(line, no_wrap=True, overflow="ellipsis")
        for word in (server, guard):
            start = line.find(word)
            if start >= 0:
                out.stylize("bold", start, start + len(word))
        return out


class SparkApp(App[None]):
    TITLE = "sparktui"
    CSS_PATH = Path(__file__).with_name("app.tcss")
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide"), (160, "-xwide")]
    COMMANDS = App.COMMANDS | {SparkCommands}
    BINDINGS = bindings("app")

    profile: var[Profile | None] = var(cast("Profile | None", None), init=False)
    server: var[ServerStatus | None] = var(cast("ServerStatus | None", None), init=False)
    # every server the panel lists (the server pane reads them; the fit and the memory pane count them)
    servers: var[tuple[ServerEntry, ...]] = var(cast("tuple[ServerEntry, ...]", ()), init=False)
    sample: var[MemorySample | None] = var(cast("MemorySample | None", None), init=False)
    fit: var[FitView | None] = var(cast("FitView | None", None), init=False)
    guard: var[GuardView] = var(GuardView(), init=False)  # frozen: one default is shared safely

    def __init__(
        self,
        profile: str | Path | None = None,
        theme_name: str | None = None,
        backend: Backend | None = None,
        show_host: bool = True,
    ) -> None:
        self.backend = backend or Backend()
        self.profile_arg = profile
        self.show_host = show_host
        self.settings = Settings()
        self.startup_errors: list[str] = []
        try:
            self.settings = load_settings()
        except UserError as exc:
            self.startup_errors.append(str(exc))
        self.keymap: dict[str, str] = dict(self.settings.keys)
        super().__init__()
        # Themes before the first frame: switching after mount would restyle every widget again.
        themes, errors = load_themes(theme_dirs(self.settings.path.parent / "themes"))
        for theme in themes:
            self.register_theme(theme)
        self.startup_errors.extend(errors)
        self.css_cache = CssCache()
        wanted = theme_name or self.settings.theme or DEFAULT_THEME
        if wanted not in self.available_themes:
            self.startup_errors.append(
                f"theme {wanted!r} not found; using {DEFAULT_THEME} (themes: {', '.join(t.name for t in themes)})"
            )
            wanted = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self._set_first_theme(wanted)
        # No frame is drawn until the first full screen (`show_first_screen`): the frames before it
        # (the header and an empty form, then the form waiting for its fit) were each laid out and
        # rendered for nothing, a sixth of the CPU to the full screen.
        self._begin_batch()
        self.holding_first_screen = True
        self.pane = PANES[0].NAME
        self.host = ""

    def _set_first_theme(self, name: str) -> None:
        """The theme before any CSS is parsed. Setting `theme` would run its watcher, which re-parses
        every stylesheet and restyles every widget once more in the first frame (a third of its
        CSS work); here the variables are simply in place for the first parse. The rest is what
        the watcher does (App._watch_theme), less that refresh and the change signal."""
        self.set_reactive(App.theme, name)
        self.stylesheet.set_variables(self.get_css_variables())
        self.css_cache.seed(self.stylesheet)  # the rules an earlier start parsed (ui.css_cache)
        dark = self.current_theme.dark
        self.update_classes({f"-theme-{name}": True, "-dark-mode": dark, "-light-mode": not dark}, update=False)
        self._refresh_truecolor_filter(self.ansi_theme)

    def update_styles(self, node: DOMNode, animate: bool = True) -> None:
        """Restyle `node` after a class changed, unless it is not in the DOM yet: a widget given
        classes as it is built (an Input's compact look and its validity, a Select's) was styled
        here at once and again when mounted (App._register styles every widget it mounts), a
        tenth of the stylesheet's work before the first full screen."""
        if node.is_attached:
            super().update_styles(node, animate)

    # -- layout ------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # The breakpoint class now, not on the first resize: that would restyle every widget again.
        width = self.size.width
        self.screen.update_classes(
            {
                name: width >= low and all(width < other for other, _ in self.HORIZONTAL_BREAKPOINTS if other > low)
                for low, name in self.HORIZONTAL_BREAKPOINTS
            },
            update=False,
        )
        yield StatusBar(id="status")
        yield PaneTabs([(pane.NAME, pane.TAB) for pane in PANES], self.pane, id="pane-tabs")
        narrow = width < self.HORIZONTAL_BREAKPOINTS[1][0]  # one pane at a time (app.tcss)
        with Horizontal(id="panes"):
            for pane_class in PANES:
                pane = self.make_pane(pane_class)
                pane.set_class(self.pane == pane_class.NAME, "-active")
                if narrow and self.pane != pane_class.NAME:
                    pane.start_hidden()
                shared = {n: getattr(SparkApp, n) for n in SHARED if n in getattr(pane_class, "_reactives", {})}
                yield pane.data_bind(**shared)
        yield PanelFooter()

    def get_default_screen(self) -> Screen[Any]:
        return PanelScreen(id="_default")

    def make_pane(self, pane_class: type[Pane]) -> Pane:
        if pane_class is ConfigPane:
            return ConfigPane(self.profile_arg, id="config-pane", classes="pane")
        return pane_class(id=f"{pane_class.NAME}-pane", classes="pane")

    def pane_widget(self, name: str) -> Pane:
        return self.query_one(f"#{name}-pane", Pane)

    def on_mount(self) -> None:
        # Reader threads (log tail + parser) hand the GIL back every 1 ms instead of 5, so a key
        # waits less behind a log flood. This is sparktui's own process: the setting is ours.
        sys.setswitchinterval(0.001)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.keymap:
            self.set_keymap(self.keymap)
        for error in self.startup_errors:
            self.notify(error, title="Settings", severity="error", timeout=15)
        # the CLI has these on stderr, which the panel does not show; post_message: from any thread
        self._stop_warnings = self.backend.warnings(lambda text: self.post_message(msg.StateWarning(text)))
        self.host = self.backend.host() if self.show_host else "host"
        self._refresh_status()
        # The polls start once the first full screen is up; this is only the backstop for a
        # first fit that never comes (a hung model-config fetch, say).
        self.set_timer(self.FIRST_SCREEN_WAIT_S, self._start_background, name="first-screen-backstop")
        # and what the screen holds by then is drawn anyway (a profile read that hangs, say)
        self.set_timer(self.FIRST_SCREEN_HOLD_S, self.show_first_screen, name="first-screen-hold")

    FIRST_SCREEN_WAIT_S = 3.0
    FIRST_SCREEN_HOLD_S = 1.5

    def show_first_screen(self) -> None:
        """Draw from now on: the first full screen is in place (or the hold's backstop ran out)."""
        if self.holding_first_screen:
            self.holding_first_screen = False
            self.css_cache.first_screen(self.stylesheet)
            self._end_batch()
            screen = self.screen
            if isinstance(screen, PanelScreen):
                screen.first_frame_pending = True
            screen.refresh(layout=True, repaint=False)
            # Drawn now, not at the screen's next update tick (Screen._update_timer, up to 1/60 s
            # later, idle): this frame is what the whole start was for.
            screen.call_next(screen._on_timer_update)

    background_started = False  # the polls and the post-mortem check have started

    _stop_warnings: Callable[[], None] | None = None

    def on_unmount(self) -> None:
        if self._stop_warnings is not None:
            self._stop_warnings()
        self.css_cache.store()  # as the app ends: the first screen's CSS, for the next start

    def on_first_screen(self, message: msg.FirstScreen) -> None:
        self._start_background()

    def _start_background(self) -> None:
        """After the first full screen: the post-mortem check, then every pane's polls. Before it,
        their imports (the typed protocol, NVML) and reads would compete with the first fit."""
        self.show_first_screen()
        if self.background_started:
            return
        try:
            panes = [self.pane_widget(pane_class.NAME) for pane_class in PANES]
        except NoMatches:  # the app closes before its first screen was full
            return
        self.background_started = True
        self.query_one(PanelFooter).keys_as_widgets()
        # Everything built for the first screen (the modules, the widgets, the fit) lives as long
        # as the app: keep it out of the collector's full passes (up to 100 ms each while a log
        # flood churns objects), and turn the collector back on (`sparktui ui` starts with it off).
        gc.freeze()
        gc.enable()
        # Before the server pane arms its watch of the state dir: the check may write there (the
        # watch would take that for a server's record changing).
        self._show_postmortems()
        for pane in panes:
            pane.start_background()

    # -- the shared state -----------------------------------------------------------------------------

    def on_profile_changed(self, message: msg.ProfileChanged) -> None:
        self.profile = message.profile

    def on_fit_changed(self, message: msg.FitChanged) -> None:
        self.fit = message.fit

    def on_server_changed(self, message: msg.ServerChanged) -> None:
        self.server = message.status

    def on_servers_changed(self, message: msg.ServersChanged) -> None:
        self.servers = message.servers

    def on_memory_sampled(self, message: msg.MemorySampled) -> None:
        self.sample = message.sample

    def on_guard_settings_edited(self, message: msg.GuardSettingsEdited) -> None:
        self.query_one(ConfigPane).set_guard_settings(message.settings)

    def watch_profile(self) -> None:
        self._derive_guard()
        self._refresh_status()

    def watch_server(self) -> None:
        self._derive_guard()
        self._refresh_status()

    def watch_sample(self, before: MemorySample | None, sample: MemorySample | None) -> None:
        if before is not None and sample is not None and _gib1(before.mem_available) == _gib1(sample.mem_available):
            return  # the bar shows MemAvailable to 0.1 GiB: nothing to redo each second
        self._refresh_status()

    def watch_servers(self) -> None:
        self._refresh_status()

    def watch_guard(self) -> None:
        self._refresh_status()

    def _derive_guard(self) -> None:
        """The guard on screen: the running server's; else the one the profile launches with."""
        server, profile = self.server, self.profile
        if server is not None and server.live:
            self.guard = server.guard
            return
        last_trip = server.trip if server is not None else None
        self.guard = profile_guard_view(profile.guard if profile is not None else None, last_trip)

    def _refresh_status(self) -> None:
        try:
            status_bar = self.query_one(StatusBar)
        except NoMatches:  # before compose, or while the app closes (a late message from a pane)
            return
        bar = Text(no_wrap=True, overflow="ellipsis")
        bar.append(" sparktui ", "bold reverse")
        bar.append(f" {self.host} │ server ")
        live = [e for e in self.servers if e.live]
        server = ""
        if self.server is not None and (len(live) > 1 or (live and live[0].port != self.server.port)):
            server = f":{self.server.port} "  # which one, when there are several
        bar.append(server)
        server += self.server.text() if self.server else "stopped"
        bar.append(self.server.text() if self.server else "stopped", "bold")
        if len(live) > 1:
            bar.append(f" ({len(live)} running)")
            server += f" ({len(live)} running)"
        bar.append(" │ guard ")
        bar.append(self.guard.state, "bold")
        avail = ""
        if self.sample is not None:
            avail = _gib1(self.sample.mem_available)
            bar.append(f" │ avail {avail} GiB")
        name = self.profile.name if self.profile is not None else "no profile"
        # query_one stops at the first match (near the top); query()'s truth walked every widget,
        # every second with each memory sample.
        try:
            modified = self.query_one(ConfigPane).modified
        except NoMatches:  # before compose
            modified = False
        if modified:
            name += " (modified)"
        bar.append(f" │ {name}")
        status_bar.show(
            bar, {"host": self.host, "server": server, "guard": self.guard.state, "avail": avail, "name": name}
        )

    # -- panes (all visible when wide; one at a time when narrow) ----------------------------------

    async def action_pane(self, pane: str, action: str) -> None:
        """Run a pane's action (the keys in ui.actions name their pane; the pane or its child that owns it runs it)."""
        widget = self.pane_widget(pane)
        await widget.mounted()  # a key typed before a hidden pane mounted its widgets
        await self.run_action(action, widget.action_owner(action))

    def on_show_pane(self, message: msg.ShowPane) -> None:
        self.show_pane(message.pane)

    def show_pane(self, pane: str) -> None:
        self.pane = pane
        for pane_class in PANES:
            self.pane_widget(pane_class.NAME).set_active(pane == pane_class.NAME)
        self.query_one("#pane-tabs", PaneTabs).active = pane

    def on_pane_tabs_activated(self, event: PaneTabs.Activated) -> None:
        if event.name != self.pane:
            self.show_pane(event.name)

    def action_next_pane(self) -> None:
        names = [p.NAME for p in PANES]
        self.show_pane(names[(names.index(self.pane) + 1) % len(names)])

    # -- themes, help, errors, quitting -------------------------------------------------------------

    def _theme_changed(self, theme: Theme) -> None:
        if theme.name != self.settings.theme and theme.name in self.available_themes:
            self.settings.theme = theme.name
            self._save_theme(theme.name)

    @work(thread=True, exclusive=True, group="postmortem", name="postmortems", exit_on_error=False)
    def _show_postmortems(self) -> None:
        """Once, on open: what happened when the machine went down under a server (journalctl may be slow)."""
        for text in self.backend.postmortems():
            self.call_from_thread(self.notify, text, title="Post-mortem", severity="warning", timeout=120)

    @work(thread=True, exclusive=True, group="settings", name="save-theme", exit_on_error=False)
    def _save_theme(self, name: str) -> None:
        try:
            save_theme(name, self.settings.path)
        except OSError as exc:
            self.post_message(msg.Notice(f"could not save the theme to {self.settings.path}: {exc}", "error"))

    def sparktui_themes(self) -> list[str]:
        return sorted(n for n in self.available_themes if n.startswith("sparktui"))

    def action_next_theme(self) -> None:
        names = self.sparktui_themes() or sorted(self.available_themes)
        index = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(index + 1) % len(names)]
        self.notify(f"theme {self.theme} (Ctrl+T: the next one; saved)", timeout=4)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:  # fmt: skip
        """Notices are plain text here: they quote profiles and logs (`[runner]`, `[file:line]`),
        which Textual would read as markup and drop."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own palette entries, less its Theme picker: Ctrl+T and the palette's
        "Theme: …" entries switch sparktui's themes (and save the choice)."""
        return (c for c in super().get_system_commands(screen) if c.title != "Theme")

    def key_rows(self) -> list[tuple[str, str, str]]:
        return help_rows(self.keymap)

    def action_help(self) -> None:
        from sparktui.ui.screens import HelpScreen  # a dialog: loaded when first opened

        self.push_screen(HelpScreen(self.key_rows(), str(self.settings.path)))

    def on_notice(self, message: msg.Notice) -> None:
        self.notify(message.text, severity=message.severity, timeout=8 if message.severity != "error" else 15)  # type: ignore[arg-type]

    def on_state_warning(self, message: msg.StateWarning) -> None:
        self.notify(message.text, title="Not trusted", severity="warning", timeout=30)

    def on_worker_failed(self, message: msg.WorkerFailed) -> None:
        error = message.error
        self.notify(
            f"{message.what} failed: {type(error).__name__}: {error}", title="Error", severity="error", timeout=20
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(msg.WorkerFailed(event.worker.name, event.worker.error))

    async def action_quit(self) -> None:
        """Ask before dropping unsaved edits; say that the server keeps running."""
        from sparktui.ui.screens import ConfirmScreen  # a dialog: loaded when first opened

        config = self.query_one(ConfigPane)
        if config.modified:
            name = config.loaded.name if config.loaded is not None else "the form"
            question = f"{name} has unsaved edits (Ctrl+S saves them). Quit anyway?"
            if self.server is not None and self.server.live:
                question += f"\nThe server on port {self.server.port} keeps running."

            def answered(yes: bool | None) -> None:
                if yes:
                    self._leave()

            self.push_screen(ConfirmScreen(question), answered)
            return
        self._leave()

    def _leave(self) -> None:
        server = self.server
        live = [e for e in self.servers if e.live]
        if len(live) > 1:
            ports = ", ".join(str(e.port) for e in live)
            self.exit(
                message=f"sparktui: {len(live)} servers keep running (ports {ports}) under their supervisors and "
                "guards. `sparktui` re-attaches; `sparktui status` lists them; `sparktui stop --all` stops them."
            )
        elif server is not None and server.live:
            self.exit(
                message=f"sparktui: the server on port {server.port} ({server.profile or 'no profile'}) keeps running "
                f"under its supervisor and guard. `sparktui` re-attaches; `sparktui stop --port {server.port}` stops it."
            )
        else:
            self.exit()

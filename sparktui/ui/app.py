"""The control panel: config editor with the fit panel, launch pane with the log, memory gauge.

Thin over core and runtime (through `Backend`): every piece of I/O runs in a named worker that
posts a Message; the UI thread only draws. Polls use set_interval and never overlap.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Static, Tab, Tabs

from sparktui.errors import UserError
from sparktui.ui import messages as msg
from sparktui.ui.backend import Backend, ServerStatus, Unavailable
from sparktui.ui.commands import SparkCommands
from sparktui.ui.screens import ChoiceScreen, ConfirmScreen, HelpScreen, PromptScreen
from sparktui.ui.settings import Settings, load_settings, save_theme
from sparktui.ui.themes import DEFAULT_THEME, load_themes, theme_dirs
from sparktui.ui.widgets.base import TextPanel
from sparktui.ui.widgets.editor import ConfigEditor, FormState
from sparktui.ui.widgets.fitpanel import FitPanel, FitView
from sparktui.ui.widgets.gauge import GuardView, MemoryGauge
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard, PhaseStrip, ServerInfo, ServerView

PANES = ("config", "server", "memory")
LIVE_STATES = ("starting", "ready", "stopping")


class StatusBar(TextPanel):
    """Top line: host, server state, guard state, MemAvailable, profile."""

    text = Text()

    def show(self, text: Text) -> None:
        self.text = text
        self.changed()

    def render(self) -> Text:
        return self.text


class SparkApp(App):
    TITLE = "sparktui"
    CSS_PATH = Path(__file__).with_name("app.tcss")
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    COMMANDS = App.COMMANDS | {SparkCommands}
    MEMORY_INTERVAL_S = 1.0
    SERVER_INTERVAL_S = 1.0
    METRICS_INTERVAL_S = 2.0
    FIT_REFRESH_BYTES = 256 * 2**20
    IDLE_SERVER_EVERY = 3  # server polls while none runs: every 3rd tick

    BINDINGS = [
        Binding("f1", "help", "Help", id="app.help"),
        Binding("f5", "launch", "Launch", id="server.launch"),
        Binding("f6", "stop", "Stop", id="server.stop"),
        Binding("f7", "restart", "Restart", id="server.restart", show=False),
        Binding("f8", "kill", "Kill", id="server.kill"),
        Binding("f9", "toggle_guard", "Guard", id="guard.toggle"),
        Binding("ctrl+g", "guard_lines", "Guard lines", id="guard.lines", show=False),
        Binding("ctrl+o", "open_profile", "Profile", id="config.open"),
        Binding("ctrl+s", "save", "Save", id="config.save"),
        Binding("f2", "save_as", "Save as", id="config.save_as", show=False),
        Binding("f3", "pick_model", "Model", id="config.model", show=False),
        Binding("f4", "paste_command", "Paste cmd", id="config.paste", show=False),
        Binding("ctrl+f", "apply_suggestion(0)", "Apply fix", id="fit.apply", show=False),
        Binding("ctrl+t", "next_theme", "Theme", id="app.theme", show=False),
        Binding("ctrl+n", "next_pane", "Pane", id="app.pane"),
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
    ]

    def __init__(
        self,
        profile: str | None = None,
        theme_name: str | None = None,
        backend: Backend | None = None,
        show_host: bool = True,
    ) -> None:
        self.backend = backend or Backend()
        self.profile_arg = profile
        self.theme_arg = theme_name
        self.show_host = show_host
        self.settings = Settings()
        self.startup_errors: list[str] = []
        try:
            self.settings = load_settings()
        except UserError as exc:
            self.startup_errors.append(str(exc))
        super().__init__()
        # Themes before the first frame: switching after mount would restyle every widget again.
        themes, errors = load_themes(theme_dirs(self.settings.path.parent / "themes"))
        for theme in themes:
            self.register_theme(theme)
        self.startup_errors.extend(errors)
        wanted = self.theme_arg or self.settings.theme or DEFAULT_THEME
        if wanted not in self.available_themes:
            self.startup_errors.append(
                f"theme {wanted!r} not found; using {DEFAULT_THEME} (themes: {', '.join(t.name for t in themes)})"
            )
            wanted = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self.theme = wanted
        self.profile: Any = None
        self.detected_vllm: Any = None  # runtime.vllm_version.DetectedVersion of the profile's runner
        self.form = FormState(None, {})
        self.spec: Any = None
        self.spec_model: str | None = None
        self.spec_error: str | None = None
        self.machine: Any = None
        self.fit_view = FitView("n/a", ["fill in the model"])
        self.sample: Any = None
        self.server: ServerStatus | None = None
        self.server_error: str | None = None
        self.guard = GuardView()
        self.runner_problem: str | None = None
        self.launch_error: str | None = None
        self.pane = "config"
        self.host = ""
        self._memory_busy = False
        self._server_busy = False
        self._server_ticks = 0
        self._metrics_busy = False
        self._metrics_snapshot: Any = None
        self._log_path: Path | None = None
        self._log_stop = threading.Event()

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
        yield Tabs(
            Tab("1 Config", id="tab-config"),
            Tab("2 Server", id="tab-server"),
            Tab("3 Memory", id="tab-memory"),
            id="pane-tabs",
        )
        with Horizontal(id="panes"):
            with Vertical(id="config-pane", classes="pane -active"):
                yield Static("", id="profile-line")
                with VerticalScroll(id="fit-scroll"):
                    yield FitPanel(id="fit")
                yield ConfigEditor(id="editor")
            with Vertical(id="server-pane", classes="pane"):
                yield PhaseStrip(id="phases")
                yield ServerInfo(id="server-info")
                yield DiagnosisCard(id="diagnosis")
                yield LogView(id="log")
            with VerticalScroll(id="memory-pane", classes="pane"):
                yield MemoryGauge(id="gauge")
        yield Footer()

    def on_mount(self) -> None:
        # Reader threads (log tail + parser) hand the GIL back every 1 ms instead of 5, so a key
        # waits less behind a log flood. This is sparktui's own process: the setting is ours.
        sys.setswitchinterval(0.001)
        # Everything built for the first frame lives as long as the app: keep it out of the
        # garbage collector's full passes (up to 100 ms each while a log flood churns objects).
        self.call_after_refresh(gc.freeze)
        # The main screen's widgets, kept so handlers reach them while a dialog is on top.
        self.w = SimpleNamespace(
            statusbar=self.query_one("#status", StatusBar),
            tabs=self.query_one("#pane-tabs", Tabs),
            panes=self.query_one("#panes"),
            profile_line=self.query_one("#profile-line", Static),
            fitpanel=self.query_one("#fit", FitPanel),
            editor=self.query_one("#editor", ConfigEditor),
            phases=self.query_one("#phases", PhaseStrip),
            info=self.query_one("#server-info", ServerInfo),
            diagnosis=self.query_one("#diagnosis", DiagnosisCard),
            log=self.query_one("#log", LogView),
            gauge=self.query_one("#gauge", MemoryGauge),
        )
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.settings.keys:
            self.set_keymap(self.settings.keys)
        for error in self.startup_errors:
            self.notify(error, title="Settings", severity="error", timeout=15)
        self.host = self.backend.host() if self.show_host else "host"
        self.w.info.show(ServerView("stopped", self._idle_detail()))
        self._refresh_status()
        self._load_profile(self.profile_arg, source="start")
        self._poll_memory()
        self._poll_server()
        self.set_interval(self.MEMORY_INTERVAL_S, self._poll_memory, name="memory-poll")
        self.set_interval(self.SERVER_INTERVAL_S, self._poll_server, name="server-poll")
        self.set_interval(self.METRICS_INTERVAL_S, self._poll_metrics, name="metrics-poll")

    def on_unmount(self) -> None:
        self._log_stop.set()

    def _refresh_status(self) -> None:
        bar = Text(no_wrap=True, overflow="ellipsis")
        bar.append(" sparktui ", "bold reverse")
        bar.append(f" {self.host} │ server ")
        state = self.server.state if self.server else ("n/a" if self.server_error else "stopped")
        bar.append(state, "bold")
        bar.append(" │ guard ")
        bar.append(self.guard.state, "bold")
        if self.sample is not None:
            bar.append(f" │ avail {self.sample.mem_available / 2**30:.1f} GiB")
        name = getattr(self.profile, "name", None) or "no profile"
        bar.append(f" │ {name}")
        self.w.statusbar.show(bar)

    # -- panes (all visible when wide; one at a time when narrow) ----------------------------------

    def show_pane(self, pane: str) -> None:
        self.pane = pane
        for name in PANES:
            self.w.panes.query_one(f"#{name}-pane").set_class(name == pane, "-active")
        tabs = self.w.tabs
        if tabs.active != f"tab-{pane}":
            tabs.active = f"tab-{pane}"

    @on(Tabs.TabActivated, "#pane-tabs")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        pane = event.tab.id.removeprefix("tab-")
        if pane != self.pane:
            self.show_pane(pane)

    def action_next_pane(self) -> None:
        self.show_pane(PANES[(PANES.index(self.pane) + 1) % len(PANES)])

    # -- themes and settings ---------------------------------------------------------------------

    def _theme_changed(self, theme) -> None:
        if theme.name != self.settings.theme and theme.name in self.available_themes:
            self.settings.theme = theme.name
            self._save_theme(theme.name)

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

    def on_notice(self, message: msg.Notice) -> None:
        self.notify(message.text, severity=message.severity, timeout=8 if message.severity != "error" else 15)

    # -- help -------------------------------------------------------------------------------------

    def key_rows(self) -> list[tuple[str, str, str]]:
        keymap = getattr(self, "_keymap", {})
        rows = []
        for binding in self.BINDINGS:
            keys = keymap.get(binding.id, binding.key)
            keys = ",".join(keys) if isinstance(keys, (list, tuple)) else keys
            rows.append((keys, binding.description, binding.id))
        rows.append(("ctrl+p", "Command palette", "(palette)"))
        rows.append(("f", "Follow / pause the log", "log.follow"))
        return rows

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_rows(), str(self.settings.path)))

    # -- profiles and the editor --------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="profile", name="load-profile", exit_on_error=False)
    def _load_profile(self, name_or_path: str | Path | None, source: str) -> None:
        if name_or_path is None:
            self.post_message(msg.ProfileLoaded(None, None, source))
            return
        try:
            profile = self.backend.load_profile(name_or_path)
        except (UserError, Unavailable) as exc:
            self.post_message(msg.ProfileLoaded(None, str(exc), source))
            return
        self.post_message(msg.ProfileLoaded(profile, None, source))

    def on_profile_loaded(self, message: msg.ProfileLoaded) -> None:
        line = self.w.profile_line
        if message.error:
            self.notify(message.error, title="Profile", severity="error", timeout=15)
            if self.profile is None:
                line.update(
                    Text(f"Profile: none ({message.error})  Ctrl+O opens one", no_wrap=True, overflow="ellipsis")
                )
            return
        if message.profile is None:
            line.update(
                Text("Profile: none  Ctrl+O opens one, F4 pastes a vllm serve line", no_wrap=True, overflow="ellipsis")
            )
            return
        self.profile = message.profile
        self._check_runner(self.profile)
        self._show_profile_line()
        self.w.editor.load(self.profile.serve)
        self._apply_profile_guard()
        self._refresh_status()

    @work(thread=True, exclusive=True, group="runner", name="check-runner", exit_on_error=False)
    def _check_runner(self, profile) -> None:
        try:
            problem = self.backend.runner_problem(profile)
        except Unavailable as exc:
            problem = str(exc)
        detected = self.backend.detect_vllm_version(profile)
        self.call_from_thread(self._version_detected, profile, detected)
        self.call_from_thread(self._runner_checked, problem)

    def _version_detected(self, profile, detected) -> None:
        """The fit follows the profile's runner's vLLM unless the form names one."""
        if profile is self.profile:
            self.detected_vllm = detected
            self.recompute_fit()

    def _runner_checked(self, problem: str | None) -> None:
        self.runner_problem = problem
        if self.server is None or self.server.state not in LIVE_STATES:
            view = self.w.info.view
            self.w.info.show(
                ServerView(
                    view.state if self.server else "stopped",
                    self._idle_detail(),
                    view.predicted,
                    view.actual,
                    [],
                    view.diagnosis,
                )
            )

    def _idle_detail(self) -> str:
        if self.launch_error:
            return f"launch failed: {self.launch_error}"
        if self.runner_problem:
            return (
                f"vLLM cannot be started here: {self.runner_problem}. Install vLLM (pip install vllm, "
                'or use NVIDIA\'s vLLM container with [runner] kind = "container") and reopen the profile.'
            )
        return "F5 launches the configuration"

    def _show_profile_line(self) -> None:
        p = self.profile
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Profile ", "dim")
        text.append(p.name, "bold")
        text.append(f"  machine {getattr(p, 'machine', '?')}", "dim")
        self.w.profile_line.update(text)

    def _apply_profile_guard(self) -> None:
        """With no server running, the gauge shows the guard the profile will launch with."""
        if (self.server is not None and self.server.state in LIVE_STATES) or self.profile is None:
            return
        g = self.profile.guard
        try:
            lines = self.backend.default_guard_lines(g)
        except (Unavailable, UserError) as exc:
            lines, why = {}, str(exc)
        else:
            why = "the profile's guard: it watches the server once launched"
        self.guard = GuardView(
            state="disarmed" if g.armed is False else "armed",
            warn_gib=lines.get("warn_below_gib"),
            term_gib=lines.get("term_below_gib"),
            kill_gib=lines.get("kill_below_gib"),
            why_na=why,
            last_trip=self.guard.last_trip,
        )
        self.w.gauge.update_guard(self.guard)
        self._refresh_status()

    def action_open_profile(self) -> None:
        self._list_profiles()

    @work(thread=True, exclusive=True, group="profile", name="list-profiles", exit_on_error=False)
    def _list_profiles(self) -> None:
        try:
            profiles = self.backend.list_profiles()
        except (UserError, Unavailable) as exc:
            self.post_message(msg.Notice(f"profiles: {exc}", "error"))
            return
        self.call_from_thread(self._choose_profile, profiles)

    def _choose_profile(self, refs: list[Any]) -> None:
        def chosen(path):
            if path is not None:
                self._load_profile(path, source="picker")

        options = [(f"{r.name}  ({r.source}) {r.description}", r.path) for r in refs]
        self.push_screen(ChoiceScreen("Open a profile", options, empty="no profiles found"), chosen)

    def load_profile(self, name_or_path: str | Path) -> None:
        self._load_profile(name_or_path, source="command")

    @on(ConfigEditor.Changed)
    def _form_changed(self, event: ConfigEditor.Changed) -> None:
        self.form = event.state
        config = event.state.config
        if config is not None and config.model != self.spec_model:
            self.spec_model, self.spec, self.spec_error = config.model, None, None
            self._load_spec(config.model, getattr(self.profile, "machine", "dgx-spark"))
        self.recompute_fit()

    @work(thread=True, exclusive=True, group="spec", name="model-spec", exit_on_error=False)
    def _load_spec(self, model: str, machine_name: str) -> None:
        spec = machine = None
        errors = []
        try:
            spec = self.backend.model_spec(model)
        except (UserError, Unavailable, OSError, ValueError) as exc:
            errors.append(str(exc))
        try:
            machine = self.backend.machine(machine_name)
        except (UserError, Unavailable, ValueError) as exc:
            errors.append(str(exc))
        self.post_message(msg.SpecLoaded(model, spec, machine, "; ".join(errors) or None))

    def on_spec_loaded(self, message: msg.SpecLoaded) -> None:
        if message.model != self.spec_model:
            return
        self.spec, self.machine, self.spec_error = message.spec, message.machine, message.error
        self.recompute_fit()

    def recompute_fit(self) -> None:
        """Fit the current form (pure and fast: called on every edit and every memory sample)."""
        state = self.form
        if state.config is None:
            problems = list(state.errors.values()) or ([state.general] if state.general else ["fill in the model"])
            view = FitView("error", problems[:3])
        elif self.spec_error:
            view = FitView("n/a", [self.spec_error])
        elif self.spec is None or self.machine is None:
            view = FitView("n/a", [f"reading the model config of {state.config.model}…"])
        else:
            config, source = state.config, ""
            detected = self.detected_vllm
            if config.vllm_version is None and detected is not None and detected.version:
                config, source = config.replace(vllm_version=detected.version), detected.source
            try:
                view = self.backend.fit(config, self.spec, self.machine, self.sample, source)
            except (UserError, Unavailable, ValueError) as exc:
                view = FitView("n/a", [str(exc)])
        self.fit_view = view
        self.w.fitpanel.show(view)

    def action_apply_suggestion(self, number: int) -> None:
        """Apply the fit panel's suggestion [number]; 0 means the first one."""
        applicable = self.fit_view.applicable
        number = number or 1
        if not 1 <= number <= len(applicable) or self.form.config is None:
            self.notify("no suggestion to apply", severity="warning")
            return
        suggestion = applicable[number - 1]
        try:
            config = self.form.config.replace(**suggestion.changes)
        except UserError as exc:
            self.notify(str(exc), severity="error")
            return
        self.w.editor.load(config)
        self.notify(f"applied: {suggestion.text}")

    def action_paste_command(self) -> None:
        from sparktui.core.config import parse_serve_command

        def check(text: str):
            if not text.strip():
                raise UserError("paste a command such as: vllm serve org/model --max-model-len 32k")
            return parse_serve_command(text)

        def done(config):
            if config is not None:
                self.w.editor.load(config)
                self.notify("loaded the pasted command into the form")
                if config.extra_args:
                    self.notify(f"kept as extra arguments: {' '.join(config.extra_args)}", severity="warning")

        self.push_screen(
            PromptScreen(
                "Paste a `vllm serve` command line", check, placeholder="vllm serve org/model --max-model-len 32k …"
            ),
            done,
        )

    def action_pick_model(self) -> None:
        self._list_models()

    @work(thread=True, exclusive=True, group="spec", name="list-models", exit_on_error=False)
    def _list_models(self) -> None:
        try:
            models = self.backend.local_models()
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(msg.Notice(f"local models: {exc}", "error"))
            return
        self.call_from_thread(self._choose_model, models)

    def _choose_model(self, models: list[str]) -> None:
        def chosen(model):
            if model is not None:
                editor = self.w.editor
                editor.query_one("#flag-model").value = model

        self.push_screen(
            ChoiceScreen(
                "Models in the local Hugging Face cache",
                [(m, m) for m in models],
                empty="no models in the local Hugging Face cache",
            ),
            chosen,
        )

    def _profile_with_form(self):
        if self.form.config is None:
            problems = list(self.form.errors.values()) or [self.form.general]
            raise UserError(f"the form has a problem: {problems[0]}")
        if self.profile is None:
            raise UserError("no profile open: use Save as (F2) to create one")
        return dataclasses.replace(self.profile, serve=self.form.config)

    def action_save(self) -> None:
        try:
            profile = self._profile_with_form()
        except UserError as exc:
            self.notify(str(exc), severity="error")
            return
        self._save_profile(profile, Path(profile.path))

    def action_save_as(self) -> None:
        if self.form.config is None:
            self.notify("fix the form first", severity="error")
            return
        from sparktui.core.profiles import new_profile, user_profile_path

        def check(text: str) -> Path:
            text = text.strip()
            if not text:
                raise UserError("give a profile name (saved among your profiles) or a path ending in .toml")
            if "/" in text or text.endswith(".toml"):
                return Path(text).expanduser().resolve()
            return user_profile_path(text)

        def done(path: Path | None) -> None:
            if path is None:
                return
            if self.profile is None:
                profile = new_profile(path.stem, self.form.config)
            else:
                profile = dataclasses.replace(self.profile, name=path.stem, path=path, serve=self.form.config)
            self._save_profile(profile, path)

        self.push_screen(
            PromptScreen("Save the profile as (a name, or a path ending in .toml)", check, placeholder="my-model"), done
        )

    @work(thread=True, exclusive=True, group="profile", name="save-profile", exit_on_error=False)
    def _save_profile(self, profile, path: Path) -> None:
        try:
            self.backend.save_profile(profile, path)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(msg.Notice(f"not saved: {exc}", "error"))
            return
        self.post_message(msg.ProfileLoaded(profile, None, "saved"))
        self.post_message(msg.Notice(f"saved {path}"))

    # -- memory -------------------------------------------------------------------------------------

    def _poll_memory(self) -> None:
        if not self._memory_busy:
            self._memory_busy = True
            self._sample_memory()

    @work(thread=True, exclusive=True, group="memory", name="sample-memory", exit_on_error=False)
    def _sample_memory(self) -> None:
        sample = gpu = None
        error = None
        try:
            sample = self.backend.memory()
        except (Unavailable, OSError, ValueError) as exc:
            error = str(exc)
        try:
            gpu = self.backend.gpu()
        except Unavailable as exc:
            from sparktui.ui.widgets.gauge import GpuView

            gpu = GpuView(note=str(exc))
        self.post_message(msg.MemorySampled(sample, gpu, error))

    def on_memory_sampled(self, message: msg.MemorySampled) -> None:
        self._memory_busy = False
        gauge = self.w.gauge
        if message.sample is not None:
            self.sample = message.sample
        gauge.update_sample(message.sample, message.error)
        if message.gpu is not None:
            gauge.update_gpu(message.gpu)
        # Refit when MemAvailable moved by FIT_REFRESH_BYTES: the verdict follows real changes, and
        # the panel is not redrawn every second for a few MiB of jitter.
        fitted = self.fit_view.mem_available
        if self.sample is not None and (
            fitted is None or abs(self.sample.mem_available - fitted) >= self.FIT_REFRESH_BYTES
        ):
            self.recompute_fit()
        self._refresh_status()

    # -- the server ---------------------------------------------------------------------------------

    def _poll_server(self) -> None:
        self._server_ticks += 1
        idle = self.server is None or self.server.state not in LIVE_STATES
        if idle and (self._server_ticks - 1) % self.IDLE_SERVER_EVERY:
            return  # nothing running: look for a server started elsewhere every few seconds
        if not self._server_busy:
            self._server_busy = True
            self._attach()

    @work(thread=True, exclusive=True, group="server-poll", name="attach", exit_on_error=False)
    def _attach(self) -> None:
        try:
            status = self.backend.attach(self.server.port if self.server is not None else None)
        except Unavailable as exc:
            self.post_message(msg.ServerUpdate(None, str(exc), "poll"))
            return
        self.post_message(msg.ServerUpdate(status, None, "poll"))

    def _run_server_action(self, action: str) -> None:
        self._server_action(action, self.server)

    @work(thread=True, exclusive=True, group="server", name="server-action", exit_on_error=False)
    def _server_action(self, action: str, status: ServerStatus | None, force: bool = False) -> None:
        try:
            if action == "launch":
                profile = self._launch_profile()
                problem = self.backend.runner_problem(profile)
                if problem:
                    raise Unavailable(problem)
                result = self.backend.launch(profile, force=force)
            elif action == "stop":
                result = self.backend.stop(status)
            elif action == "kill":
                result = self.backend.kill(status)
            elif action == "restart":
                result = self.backend.restart(status, self._launch_profile())
            else:
                raise ValueError(action)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(msg.ServerUpdate(status, str(exc), action))
            return
        self.post_message(msg.ServerUpdate(result, None, action))

    def _launch_profile(self):
        if self.form.config is None:
            problems = list(self.form.errors.values()) or [self.form.general]
            raise UserError(f"cannot launch: {problems[0]}")
        if self.profile is None:
            from sparktui.core.profiles import new_profile

            return new_profile("unsaved", self.form.config)
        return self._profile_with_form()

    def on_server_update(self, message: msg.ServerUpdate) -> None:
        if message.action == "poll":
            self._server_busy = False
        info = self.w.info
        if message.error and message.action != "poll":
            self.notify(message.error, title=message.action.capitalize(), severity="error", timeout=15)
        if message.error and message.action == "poll":
            self.server_error = message.error
            if self.server is None:
                info.show(ServerView("n/a", message.error))
            self._refresh_status()
            return
        if message.error:
            if message.action == "launch":  # nothing started: say why where the server would be
                self.launch_error = message.error
                self.w.phases.set_phase(None)
                self.w.info.show(ServerView("stopped", self._idle_detail()))
            return
        self.server_error = None
        status: ServerStatus | None = message.status
        previous = self.server
        if status is None and previous is not None and message.action == "poll":
            return  # keep showing how the last server ended
        self.server = status
        if status is not None and status.state not in LIVE_STATES and not self._log_stop.is_set():
            self.set_timer(1.0, self._log_stop.set)  # let the tail read the last lines first
        if status is None:
            view = info.view
            info.show(ServerView("stopped", self._idle_detail(), view.predicted, view.actual, [], view.diagnosis))
            self._apply_profile_guard()
        else:
            if status.log_path and status.log_path != self._log_path:
                self._start_tail(status.log_path)
            if status.guard is not None:
                self.guard = status.guard
                self.w.gauge.update_guard(status.guard)
            if status.trip and (previous is None or not previous.trip):
                self._show_trip(status)
            self.w.gauge.update_tree(status.tree_bytes, status.tree_procs)
            view = info.view
            detail = status.detail or (f"pid {status.pid}  http://{status.host}:{status.port}" if status.pid else "")
            info.show(
                ServerView(
                    status.state,
                    detail,
                    self._predicted(),
                    view.actual,
                    view.metrics if status.state == "ready" else [],
                    view.diagnosis,
                )
            )
            if message.action in ("launch", "restart"):
                self.show_pane("server")
        self._refresh_status()

    def _show_trip(self, status: ServerStatus) -> None:
        """The guard stopped the server: say so loudly, with its report."""
        report = self.guard.last_trip or "the memory guard stopped the server"
        self.w.diagnosis.show(
            (
                "memory guard trip",
                report,
                "Memory ran short while vLLM ran. Lower --gpu-memory-utilization or --max-model-len / "
                "--max-num-seqs, use --kv-cache-dtype fp8, or free memory used by other programs; "
                "the guard's lines are in the profile's [guard] table (Ctrl+G).",
            )
        )
        self.notify(report.splitlines()[0], title="Memory guard", severity="error", timeout=30)

    def _predicted(self) -> list[tuple[str, str]]:
        v = self.fit_view
        rows = []
        if v.kv_cache_bytes is not None:
            rows.append(("KV GiB", f"{v.kv_cache_bytes / 2**30:.2f}"))
        if v.kv_cache_tokens is not None:
            rows.append(("KV tokens", f"{v.kv_cache_tokens:,}"))
        if v.max_concurrency is not None:
            rows.append(("concurrency", f"{v.max_concurrency:.2f}x"))
        return rows

    def action_launch(self) -> None:
        if self.server is not None and self.server.state in LIVE_STATES:
            self.notify("a server is already running: stop it first (F6) or restart (F7)", severity="warning")
            return
        verdict = self.fit_view.verdict
        if verdict in ("wont_start", "unsafe"):
            words = {"wont_start": "WON'T START", "unsafe": "UNSAFE"}[verdict]
            self.push_screen(
                ConfirmScreen(f"The fit says {words}: {self.fit_view.reasons[0]}\nLaunch anyway?"),
                lambda yes: yes and self._launch(force=True),
            )
            return
        self._launch()

    def _launch(self, force: bool = False) -> None:
        self.w.log.clear()
        self.w.diagnosis.show(None)
        self.w.phases.set_phase("starting")
        info = self.w.info
        self.launch_error = None
        info.show(ServerView("starting", "asking the supervisor…", self._predicted()))
        self._server_action("launch", self.server, force)

    def action_stop(self) -> None:
        if self.server is None or self.server.state not in LIVE_STATES:
            self.notify("no server running", severity="warning")
            return
        self._run_server_action("stop")

    def action_restart(self) -> None:
        if self.server is None or self.server.state not in LIVE_STATES:
            self.action_launch()
            return
        self._run_server_action("restart")

    def action_kill(self) -> None:
        if self.server is None or self.server.state not in LIVE_STATES:
            self.notify("no server running", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._run_server_action("kill")

        self.push_screen(
            ConfirmScreen(f"Kill the vLLM process tree now (pid {self.server.pid})? SIGKILL, no grace."), confirmed
        )

    # -- the guard ------------------------------------------------------------------------------------

    def action_toggle_guard(self) -> None:
        armed = self.guard.state != "armed"
        if self.server is not None and self.server.state in LIVE_STATES:
            self._guard_action(armed, None)
        else:
            self._set_profile_guard(armed=armed)

    def _set_profile_guard(self, **changes) -> None:
        """No server: change the guard the profile launches with (Ctrl+S keeps it)."""
        if self.profile is None:
            self.notify("open or save a profile first: the guard's settings live in it", severity="warning")
            return
        try:
            guard = dataclasses.replace(self.profile.guard, **changes)
            self.backend.default_guard_lines(guard)  # validates the order of the lines
        except (UserError, Unavailable) as exc:
            self.notify(str(exc), severity="error")
            return
        self.profile = dataclasses.replace(self.profile, guard=guard)
        self._apply_profile_guard()
        self.notify("guard settings changed for the next launch (Ctrl+S saves them in the profile)")

    def action_guard_lines(self) -> None:
        g = self.guard

        def check(text: str) -> dict[str, Any]:
            parts = text.replace(",", " ").split()
            try:
                warn, term, kill = (float(p) for p in parts)
            except ValueError:
                raise UserError("expected three numbers in GiB: warn term kill, e.g. 20 12 8") from None
            if not warn >= term >= kill >= 0:
                raise UserError(f"expected warn ≥ term ≥ kill ≥ 0 GiB, got {warn:g} {term:g} {kill:g}")
            return {"warn_below_gib": warn, "term_below_gib": term, "kill_below_gib": kill}

        current = " ".join(f"{v:g}" for v in (g.warn_gib, g.term_gib, g.kill_gib) if v is not None)
        self.push_screen(
            PromptScreen(
                "Guard lines: act when MemAvailable falls below (GiB) warn term kill",
                check,
                value=current,
                placeholder="20 12 8",
            ),
            self._guard_lines_chosen,
        )

    def _guard_lines_chosen(self, lines: dict[str, Any] | None) -> None:
        if not lines:
            return
        if self.server is not None and self.server.state in LIVE_STATES:
            self._guard_action(None, lines)
        else:
            self._set_profile_guard(**lines)

    @work(thread=True, exclusive=True, group="guard", name="guard-action", exit_on_error=False)
    def _guard_action(self, armed: bool | None, lines: dict[str, Any] | None) -> None:
        try:
            view = self.backend.set_guard(self.server, armed=armed, lines=lines)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(msg.Notice(f"guard: {exc}", "error"))
            return
        self.call_from_thread(self._guard_changed, view)

    def _guard_changed(self, view: GuardView) -> None:
        self.guard = view
        self.w.gauge.update_guard(view)
        self._refresh_status()

    # -- the log --------------------------------------------------------------------------------------

    def _start_tail(self, path: Path) -> None:
        self._stop_tail()
        self._log_path = path
        self._log_stop = threading.Event()
        self.w.log.clear()
        self._tail_log(path, self._log_stop)

    def _stop_tail(self) -> None:
        self._log_stop.set()

    @work(thread=True, exclusive=True, group="log", name="tail-log", exit_on_error=False)
    def _tail_log(self, path: Path, stop: threading.Event) -> None:
        from sparktui.ui.logstate import LogState

        try:
            state = LogState()
            for batch in self.backend.follow_log(path, stop):
                if stop.is_set():
                    return
                state.feed(batch)
                self.post_message(msg.LogBatch(batch, state.phase, state.reached, state.actual(), state.diagnosis()))
        except (Unavailable, OSError) as exc:
            self.post_message(msg.LogUnavailable(str(exc)))

    def on_log_batch(self, message: msg.LogBatch) -> None:
        self.w.log.push(message.lines)
        phases = self.w.phases
        if message.phase != phases.phase:
            phases.set_phase(message.phase, message.reached)
        info = self.w.info
        view = info.view
        if message.actual != view.actual:
            info.show(
                ServerView(
                    view.state,
                    view.detail,
                    view.predicted or self._predicted(),
                    message.actual,
                    view.metrics,
                    view.diagnosis,
                )
            )
        card = self.w.diagnosis
        tripped = self.server is not None and self.server.trip
        if message.diagnosis != card.diagnosis and not tripped:
            card.show(message.diagnosis)

    def on_log_unavailable(self, message: msg.LogUnavailable) -> None:
        self.w.log.push([f"[sparktui] cannot follow the log: {message.error}"])

    # -- live metrics -------------------------------------------------------------------------------

    def _poll_metrics(self) -> None:
        if self.server is not None and self.server.state == "ready" and not self._metrics_busy:
            self._metrics_busy = True
            self._fetch_metrics(self.server, self._metrics_snapshot)

    @work(thread=True, exclusive=True, group="metrics", name="fetch-metrics", exit_on_error=False)
    def _fetch_metrics(self, status: ServerStatus, previous: Any) -> None:
        try:
            snapshot, figures = self.backend.metrics(status, previous)
        except (Unavailable, OSError, ValueError) as exc:
            self.post_message(msg.MetricsUpdate([], previous, str(exc)))
            return
        self.post_message(msg.MetricsUpdate(figures, snapshot, None))

    def on_metrics_update(self, message: msg.MetricsUpdate) -> None:
        self._metrics_busy = False
        self._metrics_snapshot = message.snapshot
        info = self.w.info
        v = info.view
        figures = message.figures if not message.error else [("metrics", message.error)]
        info.show(ServerView(v.state, v.detail, v.predicted, v.actual, figures, v.diagnosis))

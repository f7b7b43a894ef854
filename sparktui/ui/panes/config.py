"""The config pane: the profile, the `vllm serve` form and the fit panel.

It owns the profile's loading and saving, the model spec, and the fit; it posts the working
profile (the loaded one with the form's edits) and the fit for the other panes. On a re-attach
with no profile open it loads the profile the running server was started from.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import var
from textual.widgets import Input, Static

from sparktui.errors import UserError
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import FirstScreen, FitChanged, Notice, ProfileChanged
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.screens import ChoiceScreen, ConfirmScreen, PromptScreen
from sparktui.ui.viewmodels import FitView, ServerEntry, ServerStatus
from sparktui.ui.widgets.editor import ConfigEditor, FormState
from sparktui.ui.widgets.fitpanel import FitPanel

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec
    from sparktui.core.profiles import GuardSettings, Profile, ProfileRef
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.runtime.launch.vllm_version import DetectedVersion

FIT_REFRESH_BYTES = 256 * 2**20  # refit when MemAvailable moved this much (not for jitter)


def machine_label(name: str, machine: Machine | None) -> str:
    """The profile's machine in words: what the fit assumes, not just the profile's keyword."""
    if machine is None:
        return f"machine {name}"
    size = f"{machine.mem_total / 2**30:.1f} GiB"
    if str(name).strip().lower() == "auto":
        return f"machine: this host ({size}, fitted as one unified pool like a Spark)"
    if machine.unified:
        return f"machine: DGX Spark ({size} unified memory)"
    return f"machine: a GPU with {machine.total / 2**30:.0f} GiB"


class ConfigPane(Pane):
    NAME = "config"
    TAB = "1 Config"

    profile: var[Profile | None] = var(cast("Profile | None", None), init=False)
    server: var[ServerStatus | None] = var(cast("ServerStatus | None", None), init=False)
    sample: var[MemorySample | None] = var(cast("MemorySample | None", None), init=False)
    servers: var[tuple[ServerEntry, ...]] = var(cast("tuple[ServerEntry, ...]", ()), init=False)

    def __init__(self, profile_arg: str | Path | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.profile_arg = profile_arg
        self.loaded: Profile | None = None  # as on disk (or as the running server has it)
        self.guard_settings: GuardSettings | None = None  # edited for the next launch
        self.form = FormState(None, {})
        self.spec: ModelSpec | None = None
        self.spec_model: str | None = None
        self.spec_error: str | None = None
        self.machine: Machine | None = None
        self.detected_vllm: DetectedVersion | None = None  # the loaded profile's runner's vLLM
        self.fit = FitView("n/a", ["fill in the model"])
        self.fit_saw_sample = False  # the fit was computed with a memory reading at hand
        self.asked_server_profile = False
        self.load_error: str | None = None
        self.server_port: int | None = None  # the server the panel follows (a switch opens its profile)
        self._reserved: tuple[tuple[int, int | None, float | None, bool], ...] = ()  # what the fit counted
        self._fit_generation = 0  # bumped per recompute: only the newest fit is shown
        self._first_screen = False  # FirstScreen posted

    def compose(self) -> ComposeResult:
        yield Static("", id="profile-line")
        with VerticalScroll(id="fit-scroll"):
            yield FitPanel(id="fit")
        yield ConfigEditor(id="editor")

    def on_mount(self) -> None:
        self._show_profile_line()
        # After the first frame: the worker's imports (pydantic, the flag table) would hold the GIL
        # while the frame is drawn.
        self.call_after_refresh(self._load_profile, self.profile_arg, "start")
        if self.profile_arg is None:
            self.call_after_refresh(self._screen_full)  # nothing to load: the first frame is it

    def _screen_full(self) -> None:
        """Once: the first full screen is up (the profile in the form and its fit, or why not)."""
        if not self._first_screen:
            self._first_screen = True
            self.query_one(ConfigEditor).build_rest()
            self.post_message(FirstScreen())

    # -- the working profile ------------------------------------------------------------------------

    def working_profile(self) -> Profile | None:
        """The loaded profile with the form's edits (an unsaved one when none was loaded)."""
        config = self.form.config
        if config is None:
            return None
        if self.loaded is None:
            from sparktui.core.profiles import new_profile

            base = new_profile("unsaved", config)
        else:
            base = dataclasses.replace(self.loaded, serve=config)
        if self.guard_settings is not None:
            base = dataclasses.replace(base, guard=self.guard_settings)
        return base

    @property
    def modified(self) -> bool:
        """The form or the guard differ from the profile on disk."""
        if self.loaded is None:
            return self.form.config is not None  # typed or pasted, never saved
        if self.form.config is None:
            return True  # edits broke the form
        return self.form.config != self.loaded.serve or (
            self.guard_settings is not None and self.guard_settings != self.loaded.guard
        )

    def _publish(self) -> None:
        self.post_message(ProfileChanged(self.working_profile()))
        self._show_profile_line()

    def _show_profile_line(self) -> None:
        line = self.query_one("#profile-line", Static)
        text = Text()  # wraps at 80 columns rather than cutting the machine's size off
        p = self.loaded
        if p is None:
            text.append("Profile: none", "bold")
            if self.load_error:
                text.append(f" ({self.load_error})", "dim")
            text.append("  Ctrl+O opens one, F4 pastes a vllm serve line", "dim")
        else:
            text.append("Profile ", "dim")
            text.append(p.name, "bold")
            if self.modified:
                text.append(" (modified)", "bold italic")
            elif p.path is None:
                text.append(" (unsaved)", "italic")
            text.append(f"  {machine_label(p.machine, self.machine)}", "dim")
        line.update(text)

    def set_guard_settings(self, settings: GuardSettings) -> None:
        self.guard_settings = settings
        self._publish()

    # -- loading ----------------------------------------------------------------------------------

    def load_profile(self, name_or_path: str | Path) -> None:
        self._load_profile(name_or_path, source="command")

    @io_worker("load-profile", "loading the profile", group="profile")
    def _load_profile(self, name_or_path: str | Path | None, source: str) -> None:
        if name_or_path is None:
            return
        try:
            profile = self.backend.load_profile(name_or_path)
        except (UserError, Unavailable, OSError) as exc:
            self.app.call_from_thread(self._profile_failed, str(exc))
            return
        self.app.call_from_thread(self._profile_loaded, profile)

    def _profile_failed(self, error: str) -> None:
        self.app.notify(error, title="Profile", severity="error", timeout=15)
        if self.loaded is None:
            self.load_error = error
            self._show_profile_line()
        self._screen_full()

    def _profile_loaded(self, profile: Profile) -> None:
        self.loaded, self.guard_settings, self.load_error = profile, None, None
        self.query_one(ConfigEditor).load(profile.serve)  # posts Changed once filled
        self._show_profile_line()
        self._check_machine(profile.machine)
        self.detected_vllm = None
        self._detect_vllm(profile)
        self._check_downloaded(profile.serve.model)

    # -- the model's weights: offered for download when they are not in the Hugging Face cache ---

    @io_worker("model-downloaded", "looking for the model in the Hugging Face cache", group="download-check")
    def _check_downloaded(self, model: str) -> None:
        try:
            downloaded = self.backend.model_downloaded(model)
        except (UserError, Unavailable, OSError):
            return
        if downloaded is False:
            self.app.call_from_thread(self._offer_download, model)

    def _offer_download(self, model: str) -> None:
        from sparktui.ui.actions import ACTIONS, key_label, keys_for

        action = next(a for a in ACTIONS if a.id == "config.download")
        key = key_label(keys_for(action, cast(Any, self.app).keymap))
        self.app.notify(
            f"{model} is not downloaded yet: {key} (or the palette's Download) fetches it into the Hugging Face "
            "cache, with the free disk checked first",
            title="Model",
            timeout=20,
        )

    def action_download_model(self) -> None:
        config = self.form.config
        if config is None:
            self.app.notify("fix the form first: the model to download is its model", severity="error")
            return
        self._download(config.model)

    @io_worker("download", "downloading the model", group="download")
    def _download(self, model: str) -> None:
        try:
            if self.backend.model_downloaded(model) is None:
                self.post_message(Notice(f"{model}: not a Hugging Face repo id to download (a local folder?)", "error"))
                return
            plan = self.backend.download_plan(model)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(str(exc), "error"))
            return
        if not plan.fits:
            self.post_message(
                Notice(
                    f"{model}: not enough disk: {plan.need_bytes / 2**30:.2f} GiB to fetch + "
                    f"{plan.reserve_bytes / 2**30:.2f} GiB kept free, {plan.free_bytes / 2**30:.2f} GiB free in "
                    f"{plan.cache}; nothing was downloaded",
                    "error",
                )
            )
            return
        total = max(1, plan.need_bytes + plan.partial_bytes)
        done: dict[str, int] = {}
        said = [-1]

        def progress(name: str, n: int, size: int) -> None:
            done[name] = n
            step = int(100 * sum(done.values()) / total) // 25  # a notice at 0, 25, 50, 75 %
            if step != said[0] and step < 4:
                said[0] = step
                self.post_message(Notice(f"downloading {model}: {25 * step}% of {total / 2**30:.2f} GiB ({name})"))

        self.post_message(Notice(f"downloading {model}: {plan.describe()}"))
        try:
            folder = self.backend.download(plan, progress)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"{exc} (what came is kept: download again to resume)", "error"))
            return
        self.post_message(Notice(f"downloaded {model} to {folder}"))
        self.app.call_from_thread(self.recompute_fit)

    def watch_server(self, server: ServerStatus | None) -> None:
        # Re-attached to a server with no profile open: open the one it was started from (also
        # after a failed start: that profile is the one to fix). Switched to another server: open
        # its profile too (its fit, and the predicted column), unless the form holds unsaved edits.
        if server is None:
            return
        switched = self.server_port is not None and server.port != self.server_port
        self.server_port = server.port
        if switched and self.loaded is not None and server.profile != self.loaded.name:
            if self.modified:
                self.app.notify(
                    f"the form keeps your unsaved edits of {self.loaded.name}; Ctrl+O opens {server.profile}, the "
                    f"profile of the server on :{server.port}",
                    severity="warning",
                )
            elif server.profile_path is not None:
                self._load_server_profile(server.profile_path, server.profile, switched=True)
            return
        if self.loaded is not None or self.asked_server_profile:
            return
        if server.profile_path is not None:
            self.asked_server_profile = True
            self._load_server_profile(server.profile_path, server.profile)

    def watch_servers(self, servers: tuple[ServerEntry, ...]) -> None:
        # Refit when what the others reserve changed (not for a new phase or a new metric).
        reserved = tuple((e.port, e.reserved_bytes, e.utilization, e.live) for e in servers)
        if reserved != self._reserved:
            self._reserved = reserved
            self.recompute_fit()

    @io_worker("server-profile", "loading the server's profile", group="profile")
    def _load_server_profile(self, path: Path, name: str | None, switched: bool = False) -> None:
        """The exact copy the supervisor started from; named after the user's profile when that
        one still holds the same configuration (so Ctrl+S saves where the user expects)."""
        try:
            profile = self.backend.load_profile(path)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"cannot open the running server's profile {path}: {exc}", "error"))
            return
        try:
            own = self.backend.load_profile(name) if name else None
        except (UserError, Unavailable, OSError):
            own = None
        if own is not None and own.serve == profile.serve:
            profile = own
        else:
            profile = dataclasses.replace(profile, path=None)
        self.app.call_from_thread(self._server_profile_loaded, profile, switched)

    def _server_profile_loaded(self, profile: Profile, switched: bool = False) -> None:
        if self.loaded is None or (switched and not self.modified):
            self._profile_loaded(profile)
            self.app.notify(f"opened {profile.name}, the profile the server on :{profile.serve.port} was started from")

    @io_worker("machine", "reading the machine", group="machine")
    def _check_machine(self, name: str) -> None:
        try:
            machine = self.backend.machine(name)
        except (UserError, Unavailable, ValueError, OSError):
            return
        self.app.call_from_thread(self._machine_known, name, machine)

    @io_worker("vllm-version", "finding the runner's vLLM version", group="vllm-version")
    def _detect_vllm(self, profile: Profile) -> None:
        detected = self.backend.detect_vllm_version(profile)
        self.app.call_from_thread(self._vllm_detected, profile, detected)

    def _vllm_detected(self, profile: Profile, detected: DetectedVersion | None) -> None:
        """The fit follows the profile's runner's vLLM unless the form names one."""
        if self.loaded is profile:
            self.detected_vllm = detected
            self.recompute_fit()

    def _machine_known(self, name: str, machine: Machine) -> None:
        if self.loaded is not None and self.loaded.machine == name:
            self.machine = machine
            self._show_profile_line()

    # -- the form and the fit -----------------------------------------------------------------------

    @on(ConfigEditor.Changed)
    def _form_changed(self, event: ConfigEditor.Changed) -> None:
        if event.state == self.form:
            return  # the same form (rows mounted holding the loaded values say so again): no refit
        self.form = event.state
        config = event.state.config
        if config is not None and config.model != self.spec_model:
            self.spec_model, self.spec, self.spec_error = config.model, None, None
            self._load_spec(config.model, self.loaded.machine if self.loaded else "dgx-spark")
        self.recompute_fit()
        self._publish()

    @io_worker("model-spec", "reading the model's config", group="spec")
    def _load_spec(self, model: str, machine_name: str) -> None:
        spec = machine = None
        errors = []
        try:
            spec = self.backend.model_spec(model)
        except (UserError, Unavailable, OSError, ValueError) as exc:
            errors.append(str(exc))
        try:
            machine = self.backend.machine(machine_name)
        except (UserError, Unavailable, ValueError, OSError) as exc:
            errors.append(str(exc))
        self.app.call_from_thread(self._spec_loaded, model, spec, machine, "; ".join(errors) or None)

    def _spec_loaded(self, model: str, spec: ModelSpec | None, machine: Machine | None, error: str | None) -> None:
        if model != self.spec_model:
            return
        self.spec, self.machine, self.spec_error = spec, machine, error
        self.recompute_fit()
        self._show_profile_line()

    def watch_sample(self, sample: MemorySample | None) -> None:
        if sample is None:
            return
        fitted = self.fit.mem_available
        if fitted is None or not self.fit.mem_available_live:
            # A fit that has seen a reading and left it out (the profile's machine is not this
            # host: it is fitted against that machine's idle figure) stays as it is; refitting
            # every second would redraw the fit, the server pane and the status bar for nothing.
            if self.fit_saw_sample:
                return
        elif abs(sample.mem_available - fitted) < FIT_REFRESH_BYTES:
            return
        self.recompute_fit()

    def recompute_fit(self) -> None:
        """Fit the current form, on every edit and every real memory change. The views that need no
        fit are made here; the fit itself (it reads the bench history) runs in a worker, so the UI
        thread does nothing heavier than this."""
        state = self.form
        self._fit_generation += 1
        if state.config is None:
            # the form shows each problem under its field; the model's own "required" line would
            # say the same twice on a first launch, so the fit points at where to fill it in
            no_model = state.errors.get("model", "").startswith("model: required")
            problems = [m for f, m in state.errors.items() if not (f == "model" and no_model)] or (
                [state.general] if state.general else []
            )
            if no_model and not problems:
                view = FitView("n/a", ["no model yet: type one in the form, F3 picks one, F4 pastes a vllm serve line"])
            else:
                view = FitView("error", (problems or ["fill in the model"])[:3])
        elif self.spec_error:
            view = FitView("n/a", [self.spec_error])
        elif self.spec is None or self.machine is None:
            view = FitView("n/a", [f"reading the model config of {state.config.model}…"])
        else:
            config, source = state.config, ""
            detected = self.detected_vllm
            if config.vllm_version is None and detected is not None and detected.version:
                config, source = config.replace(vllm_version=detected.version), detected.source
            self._fit(self._fit_generation, config, self.spec, self.machine, self.sample, source, self.servers)
            return
        self._show_fit(view, self.sample is not None)
        if self.spec_error:  # the model's config cannot be read: that is the first screen's fit
            self._screen_full()

    @io_worker("fit", "fitting the form", group="fit")
    def _fit(
        self,
        generation: int,
        config: ServeConfig,
        spec: ModelSpec,
        machine: Machine,
        sample: MemorySample | None,
        source: str,
        servers: tuple[ServerEntry, ...],
    ) -> None:
        try:
            view = self.backend.fit(config, spec, machine, sample, source, servers)
        except (UserError, Unavailable, ValueError) as exc:
            view = FitView("n/a", [str(exc)])
        self.app.call_from_thread(self._fitted, generation, view, sample is not None)

    def _fitted(self, generation: int, view: FitView, saw_sample: bool) -> None:
        if generation == self._fit_generation:  # else the form changed meanwhile: a newer fit is coming
            self._show_fit(view, saw_sample)
            self.call_after_refresh(self._screen_full)  # once the frame with the fit is drawn

    def _show_fit(self, view: FitView, saw_sample: bool) -> None:
        self.fit = view
        self.fit_saw_sample = saw_sample
        self.query_one(FitPanel).show(view)
        self.post_message(FitChanged(view))

    # -- actions (keys and palette: sparktui.ui.actions) ---------------------------------------------

    def action_apply_suggestion(self, number: int) -> None:
        """Apply the fit panel's suggestion [number]; 0 means the first one."""
        applicable = self.fit.applicable
        number = number or 1
        if not 1 <= number <= len(applicable) or self.form.config is None:
            self.app.notify("no suggestion to apply", severity="warning")
            return
        suggestion = applicable[number - 1]
        try:
            config = self.form.config.replace(**suggestion.changes)
        except UserError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self.query_one(ConfigEditor).load(config)
        self.app.notify(f"applied: {suggestion.text}")

    def action_trade_off_grid(self) -> None:
        config = self.form.config
        if config is None or self.spec is None or self.machine is None:
            self.app.notify("the grid needs the model read and the form valid first", severity="warning")
            return
        detected, source = self.detected_vllm, ""
        if config.vllm_version is None and detected is not None and detected.version:
            config, source = config.replace(vllm_version=detected.version), detected.source
        self._grid(config, self.spec, self.machine, self.sample, source)

    @io_worker("grid", "fitting the trade-off grid", group="grid")
    def _grid(self, config: ServeConfig, spec: ModelSpec, machine: Machine, sample: Any, source: str) -> None:
        try:
            grid = self.backend.grid(config, spec, machine, sample, source)
        except (UserError, Unavailable, ValueError) as exc:
            self.post_message(Notice(f"trade-off grid: {exc}", "error"))
            return
        self.app.call_from_thread(self._show_grid, grid, config.model)

    def _show_grid(self, grid: Any, model: str) -> None:
        from sparktui.ui.grid_screen import GridScreen

        def chosen(cell: Any) -> None:
            if cell is None or self.form.config is None:
                return
            changes = {"max_num_seqs": cell.max_num_seqs, "max_model_len": cell.max_model_len}
            changes["kv_cache_dtype"] = cell.kv_cache_dtype
            try:
                config = self.form.config.replace(**changes)
            except UserError as exc:
                self.app.notify(str(exc), severity="error")
                return
            self.query_one(ConfigEditor).load(config)
            self.app.notify(
                f"applied the grid's cell: --max-num-seqs {cell.max_num_seqs} --max-model-len {cell.max_model_len} "
                f"--kv-cache-dtype {cell.kv_cache_dtype}"
            )

        self.app.push_screen(GridScreen(grid, model), chosen)

    def action_paste_command(self) -> None:
        from sparktui.core.config import parse_serve_command

        def check(text: str) -> ServeConfig:
            if not text.strip():
                raise UserError("paste a command such as: vllm serve org/model --max-model-len 32k")
            return parse_serve_command(text)

        def done(config: object) -> None:
            if config is None:
                return
            self.query_one(ConfigEditor).load(config)  # type: ignore[arg-type]
            self.app.notify("loaded the pasted command into the form")
            extra = getattr(config, "extra_args", None)
            if extra:
                self.app.notify(f"kept as extra arguments: {' '.join(extra)}", severity="warning")

        self.app.push_screen(
            PromptScreen(
                "Paste a `vllm serve` command line", check, placeholder="vllm serve org/model --max-model-len 32k …"
            ),
            done,
        )

    def action_open_profile(self) -> None:
        if not self.modified:
            self._list_profiles()
            return
        name = self.loaded.name if self.loaded is not None else "the form"

        def answered(yes: object) -> None:
            if yes:
                self._list_profiles()

        self.app.push_screen(
            ConfirmScreen(f"Open another profile and discard the unsaved edits of {name}? (Ctrl+S saves them)"),
            answered,
        )

    @io_worker("list-profiles", "listing profiles", group="profile-list")
    def _list_profiles(self) -> None:
        try:
            profiles = self.backend.list_profiles()
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"profiles: {exc}", "error"))
            return
        self.app.call_from_thread(self._choose_profile, profiles)

    def _choose_profile(self, refs: list[ProfileRef]) -> None:
        def chosen(path: object) -> None:
            if isinstance(path, (str, Path)):
                self._load_profile(path, source="picker")

        options: list[tuple[str, object]] = [(f"{r.name}  ({r.source}) {r.description}", r.path) for r in refs]
        self.app.push_screen(ChoiceScreen("Open a profile", options, empty="no profiles found"), chosen)

    def action_pick_model(self) -> None:
        self._list_models()

    @io_worker("list-models", "listing local models", group="models")
    def _list_models(self) -> None:
        try:
            models = self.backend.local_models()
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"local models: {exc}", "error"))
            return
        self.app.call_from_thread(self._choose_model, models)

    def _choose_model(self, models: list[str]) -> None:
        def chosen(model: object) -> None:
            if model is not None:
                self.query_one("#flag-model", Input).value = str(model)

        self.app.push_screen(
            ChoiceScreen(
                "Models: the local Hugging Face cache, then sparktui's catalog",
                [(m, m) for m in models],
                empty="no models in the local Hugging Face cache or the catalog",
            ),
            chosen,
        )

    def action_advise(self) -> None:
        config = self.form.config
        if config is None or self.machine is None:
            self.app.notify("fill in the model first", severity="warning")
            return
        self._advise(config, self.machine)

    @io_worker("advise", "fitting the model's variants", group="advise")
    def _advise(self, config, machine) -> None:
        try:
            advice = self.backend.advise(config, machine)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"advise: {exc}", "error"))
            return
        self.app.call_from_thread(self._choose_variant, advice)

    def _choose_variant(self, advice: list) -> None:
        def chosen(pick: Any) -> None:  # a core.advisor.Advice, or None when dismissed
            if pick is None:
                return
            self.query_one("#flag-model", Input).value = pick.model
            if not pick.fits and pick.longest_context_for_users:
                self.query_one("#flag-max_model_len", Input).value = str(pick.longest_context_for_users)

        def label(a) -> str:
            who = "1 user" if a.users == 1 else f"{a.users} users"
            rate = "-" if a.per_user_tok_s is None else f"{a.per_user_tok_s:.0f} tok/s ({who} at {a.context:,} ctx)"
            fits = (
                "fits"
                if a.fits
                else f"fits up to {a.longest_context_for_users:,}"
                if a.longest_context_for_users
                else "no"
            )
            return (
                f"{a.model}  {a.format}  {a.weights_bytes / 2**30:.0f} GiB  {fits}  {rate}  ctx ≤ {a.longest_context:,}"
            )

        self.app.push_screen(
            ChoiceScreen(
                "Variants of this model (best predicted speed first)",
                [(label(a), a) for a in advice],
                empty="no variant of this model in the local cache or the catalog",
            ),
            chosen,
        )

    def action_save(self) -> None:
        profile = self.working_profile()
        if profile is None:
            problems = list(self.form.errors.values()) or [self.form.general or "the form is empty"]
            self.app.notify(f"the form has a problem: {problems[0]}", severity="error")
            return
        from sparktui.core.profiles import copied_as, save_target

        try:
            target = save_target(profile) if self.loaded is not None else None
        except UserError as exc:
            self.app.notify(str(exc), severity="error")
            return
        if target is None:
            self.app.notify("this profile has no file yet: use Save as (F2)", severity="error")
            return
        if target != profile.path:  # a shipped profile: read-only, the copy goes among the user's
            self._save_profile(copied_as(profile, profile.name, target), target, copied_from=profile.path)
            return
        self._save_profile(profile, target)

    def action_save_as(self) -> None:
        config = self.form.config
        if config is None:
            self.app.notify("fix the form first", severity="error")
            return
        from sparktui.core.profiles import user_profile_path

        def check(text: str) -> Path:
            text = text.strip()
            if not text:
                raise UserError("give a profile name (saved among your profiles) or a path ending in .toml")
            if "/" in text or text.endswith(".toml"):
                return Path(text).expanduser().resolve()
            return user_profile_path(text)

        def done(path: object) -> None:
            profile = self.working_profile()
            if not isinstance(path, Path) or profile is None:
                return
            from sparktui.core.profiles import copied_as

            self._save_profile(copied_as(profile, path.stem, path), path)

        self.app.push_screen(
            PromptScreen("Save the profile as (a name, or a path ending in .toml)", check, placeholder="my-model"), done
        )

    @io_worker("save-profile", "saving the profile", group="profile")
    def _save_profile(self, profile: Profile, path: Path, copied_from: Path | None = None) -> None:
        try:
            self.backend.save_profile(profile, path)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"not saved: {exc}", "error"))
            return
        self.app.call_from_thread(self._saved, profile, path, copied_from)

    def _saved(self, profile: Profile, path: Path, copied_from: Path | None = None) -> None:
        self.loaded, self.guard_settings = profile, None
        self._publish()
        if copied_from is not None:
            self.app.notify(
                f"shipped profiles are read-only ({copied_from}): saved your copy to {path}; "
                f"the name {profile.name} now opens it",
                timeout=12,
            )
        else:
            self.app.notify(f"saved {path}")

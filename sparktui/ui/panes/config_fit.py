"""The config pane's fit: the scrolling box over the form that holds the fit panel, and what the
fit is made from: the model's spec, the profile's machine, the runner's vLLM version, the memory
reading and the other servers' reservations.

It owns those and its workers (spec, machine, vLLM version, the fit itself, the trade-off grid);
the pane tells it when the form or the profile changed, and it posts the fit (`FitChanged`) for
the other panes, and `MachineRead` when the profile line can name the machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import var

from sparktui.errors import UserError
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import FitChanged, Notice
from sparktui.ui.panes.base import backend_of, io_worker, post_up
from sparktui.ui.viewmodels import FitView
from sparktui.ui.widgets.editor import ConfigEditor
from sparktui.ui.widgets.fitpanel import FitPanel

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec
    from sparktui.core.profiles import Profile
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.runtime.launch.vllm_version import DetectedVersion
    from sparktui.ui.backend import Backend
    from sparktui.ui.serverviews import ServerEntry
    from sparktui.ui.widgets.editor import FormState

FIT_REFRESH_BYTES = 256 * 2**20  # refit when MemAvailable moved this much (not for jitter)


class ProfileForm(Protocol):
    """What the config pane holds that its children read: the form as last edited, the profile as loaded."""

    form: FormState
    loaded: Profile | None


class FitBox(VerticalScroll):
    """The fit panel in its scrolling box; the fit's inputs and its workers."""

    sample: var[MemorySample | None] = var(cast("MemorySample | None", None), init=False)
    servers: var[tuple[ServerEntry, ...]] = var(cast("tuple[ServerEntry, ...]", ()), init=False)

    class MachineRead(Message):
        """The profile's machine is known (or known again): the profile line names it."""

    class Fitted(Message):
        """A fit of the form is shown (or why there is none: the model's config cannot be read)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec: ModelSpec | None = None
        self.spec_model: str | None = None
        self.spec_error: str | None = None
        self.machine: Machine | None = None
        self.detected_vllm: DetectedVersion | None = None  # the loaded profile's runner's vLLM
        self.fit = FitView("n/a", ["fill in the model"])
        self.fit_saw_sample = False  # the fit was computed with a memory reading at hand
        self._reserved: tuple[tuple[int, int | None, float | None, bool], ...] = ()  # what the fit counted
        self._fit_generation = 0  # bumped per recompute: only the newest fit is shown
        # Until the editor posts its first form there is nothing to fit: a memory reading or the
        # spec arriving first showed "error: fill in the model" (twice) before the profile's fit.
        self._form_seen = False

    def compose(self) -> ComposeResult:
        yield FitPanel(id="fit")

    @property
    def backend(self) -> Backend:
        return backend_of(self)

    @property
    def pane(self) -> ProfileForm:
        return cast("ProfileForm", self.parent)  # the config pane (not imported: it imports this module)

    @property
    def form(self) -> FormState:
        return self.pane.form

    # -- what the pane tells it -----------------------------------------------------------------------

    def read_profile_inputs(self, profile: Profile) -> tuple[Machine | None, DetectedVersion | None]:
        """The profile's machine and its runner's vLLM. Blocking: the worker that loaded the profile
        calls it and hands the result to `profile_loaded`, then reads the model (`read_spec`): one
        worker on the way to the first fit, not one (and a redraw) for each of them."""
        try:
            machine = self.backend.machine(profile.machine)
        except (UserError, Unavailable, ValueError, OSError):
            machine = None
        return machine, self.backend.detect_vllm_version(profile)

    def profile_loaded(
        self, profile: Profile, inputs: tuple[Machine | None, DetectedVersion | None] | None = None
    ) -> None:
        """A profile was opened; `inputs` (read_profile_inputs) when its worker read them, and its
        model next (so the form's change asks for no spec of its own)."""
        if inputs is not None:
            self.machine, self.detected_vllm = inputs
            self.spec_model, self.spec, self.spec_error = profile.serve.model, None, None
            if self.machine is not None:
                post_up(self, self.MachineRead())
            return
        self._check_machine(profile.machine)
        self.detected_vllm = None
        self._detect_vllm(profile)

    def form_changed(self, machine_name: str) -> None:
        """The form changed: a new model's spec is read, and the fit follows."""
        self._form_seen = True
        config = self.form.config
        if config is not None and config.model != self.spec_model:
            self.spec_model, self.spec, self.spec_error = config.model, None, None
            self._load_spec(config.model, machine_name)
        self.recompute_fit()

    # -- the machine, the runner's vLLM and the model's spec ------------------------------------------

    @io_worker("machine", "reading the machine", group="machine")
    def _check_machine(self, name: str) -> None:
        try:
            machine = self.backend.machine(name)
        except (UserError, Unavailable, ValueError, OSError):
            return
        self.app.call_from_thread(self._machine_known, name, machine)

    def _machine_known(self, name: str, machine: Machine) -> None:
        loaded = self.pane.loaded
        if loaded is not None and loaded.machine == name:
            self.machine = machine
            post_up(self, self.MachineRead())

    @io_worker("vllm-version", "finding the runner's vLLM version", group="vllm-version")
    def _detect_vllm(self, profile: Profile) -> None:
        detected = self.backend.detect_vllm_version(profile)
        self.app.call_from_thread(self._vllm_detected, profile, detected)

    def _vllm_detected(self, profile: Profile, detected: DetectedVersion | None) -> None:
        """The fit follows the profile's runner's vLLM unless the form names one."""
        if self.pane.loaded is profile:
            self.detected_vllm = detected
            self.recompute_fit()

    @io_worker("model-spec", "reading the model's config", group="spec")
    def _load_spec(self, model: str, machine_name: str) -> None:
        self.read_spec(model, machine_name)

    def read_spec(self, model: str, machine_name: str) -> None:
        """Read the model's spec (and the machine again) and show the fit that follows. Blocking:
        from a worker."""
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
        post_up(self, self.MachineRead())

    # -- the fit ---------------------------------------------------------------------------------------

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

    def watch_servers(self, servers: tuple[ServerEntry, ...]) -> None:
        # Refit when what the others reserve changed (not for a new phase or a new metric).
        reserved = tuple((e.port, e.reserved_bytes, e.utilization, e.live) for e in servers)
        if reserved != self._reserved:
            self._reserved = reserved
            self.recompute_fit()

    def _versioned(self, config: ServeConfig) -> tuple[ServeConfig, str]:
        """The form's config with the runner's detected vLLM version when the form names none."""
        detected = self.detected_vllm
        if config.vllm_version is None and detected is not None and detected.version:
            return config.replace(vllm_version=detected.version), detected.source
        return config, ""

    def recompute_fit(self) -> None:
        """Fit the current form, on every edit and every real memory change. The views that need no
        fit are made here; the fit itself (it reads the bench history) runs in a worker, so the UI
        thread does nothing heavier than this."""
        if not self._form_seen:
            return
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
            config, source = self._versioned(state.config)
            self._fit(self._fit_generation, config, self.spec, self.machine, self.sample, source, self.servers)
            return
        self._show_fit(view, self.sample is not None)
        if self.spec_error:
            post_up(self, self.Fitted())

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
            post_up(self, self.Fitted())

    def _show_fit(self, view: FitView, saw_sample: bool) -> None:
        self.fit = view
        self.fit_saw_sample = saw_sample
        self.query_one(FitPanel).show(view)
        post_up(self, FitChanged(view))

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
        self.screen.query_one(ConfigEditor).load(config)
        self.app.notify(f"applied: {suggestion.text}")

    def action_trade_off_grid(self) -> None:
        config = self.form.config
        if config is None or self.spec is None or self.machine is None:
            self.app.notify("the grid needs the model read and the form valid first", severity="warning")
            return
        config, source = self._versioned(config)
        self._grid(config, self.spec, self.machine, self.sample, source)

    @io_worker("grid", "fitting the trade-off grid", group="grid")
    def _grid(self, config: ServeConfig, spec: ModelSpec, machine: Machine, sample: Any, source: str) -> None:
        try:
            grid = self.backend.grid(config, spec, machine, sample, source)
        except (UserError, Unavailable, ValueError) as exc:
            post_up(self, Notice(f"trade-off grid: {exc}", "error"))
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
            self.screen.query_one(ConfigEditor).load(config)
            self.app.notify(
                f"applied the grid's cell: --max-num-seqs {cell.max_num_seqs} --max-model-len {cell.max_model_len} "
                f"--kv-cache-dtype {cell.kv_cache_dtype}"
            )

        self.app.push_screen(GridScreen(grid, model), chosen)

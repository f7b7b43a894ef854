"""The config pane: the profile, the `vllm serve` form and the fit panel.

It owns the profile's loading and saving and the form; its children own the rest: the fit and
what it is made from (`config_fit.FitBox`), and the model actions, F3, F4, F11 and F12
(`config_model.ModelActions`). It posts the working profile (the loaded one with the form's
edits) for the other panes. On a re-attach with no profile open it loads the profile the running
server was started from.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.reactive import var
from textual.widgets import Static

from sparktui.errors import UserError
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import FirstScreen, Notice, ProfileChanged
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.panes.config_fit import FitBox
from sparktui.ui.panes.config_model import ModelActions
from sparktui.ui.widgets.editor import ConfigEditor, FormState

if TYPE_CHECKING:
    from sparktui.core.machine import Machine
    from sparktui.core.profiles import GuardSettings, Profile, ProfileRef
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.runtime.launch.vllm_version import DetectedVersion
    from sparktui.ui.serverviews import ServerEntry, ServerStatus


def machine_label(name: str, machine: Machine | None) -> str:
    """The profile's machine in words: what the fit assumes, not just the profile's keyword."""
    if machine is None:
        return f"machine {name}"
    return f"machine: {machine.label(name)}"


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
        self.asked_server_profile = False
        self.load_error: str | None = None
        self.server_port: int | None = None  # the server the panel follows (a switch opens its profile)
        self._first_screen = False  # FirstScreen posted
        self._check_after_first_screen: str | None = None  # the model whose download is checked then
        self._fit_box = FitBox(id="fit-scroll")  # kept: the profile's worker hands it what it reads

    def compose(self) -> ComposeResult:
        yield Static("", id="profile-line")
        # the fit follows the memory reading and the other servers' reservations the app shares
        yield self._fit_box.data_bind(ConfigPane.sample, ConfigPane.servers)
        yield ConfigEditor(id="editor", wait_for_load=self.profile_arg is not None)
        yield ModelActions()

    @property
    def fit_box(self) -> FitBox:
        return self._fit_box

    def on_mount(self) -> None:
        self._show_profile_line()
        # At once: no frame is drawn before the profile's (SparkApp.show_first_screen), and the
        # worker's imports and reads fill the waits of the start (the terminal's, the screen's
        # update tick) that would otherwise pass idle.
        self._load_profile(self.profile_arg, "start")
        if self.profile_arg is None:
            self._screen_drawn()  # nothing to load: the first frame is it

    def _screen_drawn(self) -> None:
        """The screen holds all it will show first: draw it, then `_screen_full`."""
        self.app.show_first_screen()  # type: ignore[attr-defined]
        self.call_after_refresh(self._screen_full)

    def _screen_full(self) -> None:
        """Once: the first full screen is up (the profile in the form and its fit, or why not)."""
        if not self._first_screen:
            self._first_screen = True
            self.query_one(ConfigEditor).build_rest()
            self.post_message(FirstScreen())
            if self._check_after_first_screen is not None:
                self.query_one(ModelActions).check_downloaded(self._check_after_first_screen)

    def on_fit_box_fitted(self) -> None:
        self._screen_drawn()

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
            text.append(f"  {machine_label(p.machine, self.fit_box.machine)}", "dim")
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
        # what its fit is made from, read here too: the profile shows, then its fit, with no
        # worker (and no redraw) in between for the machine, the runner's vLLM and the model
        box = self._fit_box
        self.app.call_from_thread(self._profile_loaded, profile, box.read_profile_inputs(profile))
        box.read_spec(profile.serve.model, profile.machine)  # may fetch from the Hub: the form shows first

    def _profile_failed(self, error: str) -> None:
        self.query_one(ConfigEditor).build()  # the empty form (it waited for the profile)
        self.app.notify(error, title="Profile", severity="error", timeout=15)
        if self.loaded is None:
            self.load_error = error
            self._show_profile_line()
        self._screen_drawn()

    def _profile_loaded(
        self, profile: Profile, inputs: tuple[Machine | None, DetectedVersion | None] | None = None
    ) -> None:
        self.loaded, self.guard_settings, self.load_error = profile, None, None
        self.fit_box.profile_loaded(profile, inputs)  # before the form's change asks for a fit
        self.query_one(ConfigEditor).load(profile.serve)  # posts Changed once filled
        self._show_profile_line()
        if self._first_screen:
            self.query_one(ModelActions).check_downloaded(profile.serve.model)
        else:  # its notice (and its read of the cache) once the first screen is up
            self._check_after_first_screen = profile.serve.model

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

    def on_fit_box_machine_read(self) -> None:
        self._show_profile_line()

    @on(ConfigEditor.Changed)
    def _form_changed(self, event: ConfigEditor.Changed) -> None:
        if event.state == self.form:
            return  # the same form (rows mounted holding the loaded values say so again): no refit
        self.form = event.state
        self.fit_box.form_changed(self.loaded.machine if self.loaded else "dgx-spark")
        self._publish()

    # -- actions (keys and palette: sparktui.ui.actions; the fit's and the model's are its children's) --

    def action_open_profile(self) -> None:
        from sparktui.ui.screens import ConfirmScreen  # a dialog: loaded when first opened

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
        from sparktui.ui.screens import ChoiceScreen  # a dialog: loaded when first opened

        def chosen(path: object) -> None:
            if isinstance(path, (str, Path)):
                self._load_profile(path, source="picker")

        options: list[tuple[str, object]] = [(f"{r.name}  ({r.source}) {r.description}", r.path) for r in refs]
        self.app.push_screen(ChoiceScreen("Open a profile", options, empty="no profiles found"), chosen)

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
        from sparktui.ui.screens import PromptScreen  # a dialog: loaded when first opened

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

"""Messages between the panes and the app. Payloads are typed view models (ui.viewmodels) or
core objects; a pane posts, the app updates its shared reactives, and data binding carries the
new values into every pane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from sparktui.core.profiles import GuardSettings, Profile
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.ui.serverviews import ServerEntry, ServerStatus
    from sparktui.ui.viewmodels import FitView


class ProfileChanged(Message):
    """The working profile: the loaded one with the form's edits (None: no valid form yet)."""

    def __init__(self, profile: Profile | None) -> None:
        super().__init__()
        self.profile = profile


class FitChanged(Message):
    def __init__(self, fit: FitView) -> None:
        super().__init__()
        self.fit = fit


class ServerChanged(Message):
    """The supervisor's view of the server, after an action or a poll (None: none known)."""

    def __init__(self, status: ServerStatus | None) -> None:
        super().__init__()
        self.status = status


class ServersChanged(Message):
    """Every server on this machine the panel lists (live, lost, and the one followed)."""

    def __init__(self, servers: tuple[ServerEntry, ...]) -> None:
        super().__init__()
        self.servers = servers


class MemorySampled(Message):
    def __init__(self, sample: MemorySample) -> None:
        super().__init__()
        self.sample = sample


class GuardSettingsEdited(Message):
    """No server runs: the guard the profile launches with changed (Ctrl+S saves it)."""

    def __init__(self, settings: GuardSettings) -> None:
        super().__init__()
        self.settings = settings


class FirstScreen(Message):
    """The config pane shows its first full screen: the profile in the form and its fit (or why
    there is none). The polls and the other start-up reads wait for it (they would compete with
    the first fit for the one interpreter), and start now."""


class ShowPane(Message):
    def __init__(self, pane: str) -> None:
        super().__init__()
        self.pane = pane


class WorkerFailed(Message):
    """A worker died of an exception nobody expected; `what` says what it was doing."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__()
        self.what, self.error = what, error


class StateWarning(Message):
    """A warning about state sparktui read but does not trust (files.Warnings), from any thread."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class Notice(Message):
    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text, self.severity = text, severity

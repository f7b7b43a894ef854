"""The server pane: launch, stop, kill and restart through the supervisor; the phase strip, the
predicted-vs-actual summary, live figures, the diagnosis card and the log.

It owns the server poll (the supervisor's state record, every second while a server lives, every
few seconds otherwise, never overlapping), the actions' workers and the log tail. Live figures
come from the record (the supervisor reads /metrics); the pane never scrapes the server itself.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from textual.app import ComposeResult
from textual.message import Message
from textual.reactive import var
from textual.worker import Worker

from sparktui.errors import UserError
from sparktui.ui.actions import BY_ID, key_label, keys_for
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import ServerChanged, ShowPane
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.screens import ConfirmScreen
from sparktui.ui.viewmodels import FitView, LogProgress, ServerStatus, ServerView
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard, LogHeader, PhaseStrip, ServerInfo

if TYPE_CHECKING:
    from sparktui.core.profiles import Profile


class ServerPane(Pane):
    NAME = "server"
    TAB = "2 Server"
    POLL_S = 1.0
    IDLE_EVERY = 3  # with no server running, look for one started elsewhere every 3rd tick

    profile: var[Profile | None] = var(cast("Profile | None", None), init=False)
    server: var[ServerStatus | None] = var(cast("ServerStatus | None", None), init=False)
    fit: var[FitView | None] = var(cast("FitView | None", None), init=False)

    class Polled(Message):
        def __init__(self, status: ServerStatus | None, error: str | None) -> None:
            super().__init__()
            self.status, self.error = status, error

    class ActionDone(Message):
        def __init__(self, action: str, status: ServerStatus | None, error: str | None) -> None:
            super().__init__()
            self.action, self.status, self.error = action, status, error

    class LogBatch(Message):
        def __init__(self, lines: list[str], progress: LogProgress | None, error: str | None = None) -> None:
            super().__init__()
            self.lines, self.progress, self.error = lines, progress, error

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runner_problem: str | None = None
        self.launch_error: str | None = None
        self.poll_error: str | None = None
        self.pending: str | None = None  # an action on its way to the supervisor
        self.progress: LogProgress | None = None
        self.log_path: Path | None = None
        self._log_stop = threading.Event()
        self._ticks = 0
        self._poll_worker: Worker[None] | None = None

    def compose(self) -> ComposeResult:
        yield PhaseStrip(id="phases")
        yield ServerInfo(id="server-info")
        yield DiagnosisCard(id="diagnosis")
        yield LogHeader(id="log-header")
        yield LogView(id="log")

    def on_mount(self) -> None:
        log = self.query_one(LogView)
        self.watch(log, "follow", self._log_mode_changed, init=False)
        self.watch(log, "show_polling", self._log_mode_changed, init=False)
        self.watch(log, "hidden", self._log_mode_changed, init=False)
        self._log_mode_changed()
        self.render_server()
        self.call_after_refresh(self.poll)  # after the first frame (its worker imports the protocol)
        self.set_interval(self.POLL_S, self.poll, name="server-poll")

    def on_unmount(self) -> None:
        self._log_stop.set()

    # -- the poll -----------------------------------------------------------------------------------

    def poll(self) -> None:
        self._ticks += 1
        idle = self.server is None or not self.server.live
        if idle and (self._ticks - 1) % self.IDLE_EVERY:
            return
        if not self.running(self._poll_worker):  # never overlapping; a dead worker never blocks it
            self._poll_worker = self._read_server(self.server.port if self.server is not None else None)

    @io_worker("server-poll", "polling the supervisor's state")
    def _read_server(self, port: int | None) -> None:
        try:
            status = self.backend.attach(port)
        except Unavailable as exc:
            self.post_message(self.Polled(None, str(exc)))
            return
        self.post_message(self.Polled(status, None))

    def on_server_pane_polled(self, message: Polled) -> None:
        self.poll_error = message.error
        if message.error or (message.status is None and self.server is not None):
            self.render_server()  # keep showing how the last server ended
            return
        self.post_message(ServerChanged(message.status))

    # -- the server as the app shares it --------------------------------------------------------------

    def watch_server(self, previous: ServerStatus | None, status: ServerStatus | None) -> None:
        if status is not None:
            if status.log_path and status.log_path != self.log_path:
                self.start_tail(status.log_path)
            if not status.live and not self._log_stop.is_set():
                self.set_timer(1.0, self._log_stop.set)  # let the tail read the last lines first
            if status.trip and (previous is None or not previous.trip):
                self.app.notify(status.trip.splitlines()[0], title="Memory guard", severity="error", timeout=30)
        self.render_server()

    def watch_fit(self) -> None:
        self.render_server()

    def watch_profile(self, profile: Profile | None) -> None:
        if profile is not None and (self.server is None or not self.server.live):
            self._check_runner(profile)

    @io_worker("check-runner", "checking how vLLM is started")
    def _check_runner(self, profile: Profile) -> None:
        try:
            problem = self.backend.runner_problem(profile)
        except Unavailable as exc:
            problem = str(exc)
        self.app.call_from_thread(self._runner_checked, problem)

    def _runner_checked(self, problem: str | None) -> None:
        self.runner_problem = problem
        self.render_server()

    def idle_detail(self) -> str:
        if self.launch_error:
            return f"launch failed: {self.launch_error}"
        if self.runner_problem:
            return (
                f"vLLM cannot be started here: {self.runner_problem}. Install vLLM (pip install vllm, "
                'or use NVIDIA\'s vLLM container with [runner] kind = "container") and reopen the profile.'
            )
        return f"{key_label(keys_for(BY_ID['server.launch'], self.app_keymap()))} launches the configuration"

    def app_keymap(self) -> dict[str, str]:
        return dict(getattr(self.app, "keymap", {}))

    def render_server(self) -> None:
        """Everything the pane shows about the server, from the server, the fit and the log."""
        s, progress = self.server, self.progress
        predicted = (s.predicted if s is not None else ()) or (self.fit.predicted() if self.fit else ())
        actual = (progress.actual if progress else ()) or (s.actual if s is not None else ())
        if self.pending == "launch":
            view = ServerView("starting", "asking the supervisor…", predicted)
        elif s is None:
            state = "n/a" if self.poll_error else "stopped"
            view = ServerView(state, self.poll_error or self.idle_detail(), predicted, bad=bool(self.poll_error))
        else:
            detail = s.detail() if s.live else ", ".join(x for x in (s.detail(), self.launch_error) if x)
            view = ServerView(
                s.text(),
                detail,
                predicted,
                actual,
                s.metrics,
                bad=s.state in ("failed", "lost"),
            )
        self.query_one(ServerInfo).show(view)
        self._render_phase()
        self._render_diagnosis()

    def _render_phase(self) -> None:
        s, progress, strip = self.server, self.progress, self.query_one(PhaseStrip)
        if self.pending == "launch":
            strip.set_phase("starting")
        elif s is None:
            strip.set_phase(None)
        elif s.state == "failed":
            reached = (progress.reached if progress else None) or s.condition.phase
            strip.set_phase("failed", reached)
        elif s.state == "starting":
            strip.set_phase(progress.phase if progress and progress.phase != "failed" else s.condition.phase)
        elif s.state in ("ready", "stopping"):
            strip.set_phase("ready")
        else:
            strip.set_phase(None)

    def _render_diagnosis(self) -> None:
        s, progress = self.server, self.progress
        diagnosis = None
        if s is not None and (s.trip or not s.live):
            diagnosis = s.diagnosis  # the supervisor's word, once it has ended
        if diagnosis is None and progress is not None and self.pending != "launch":
            diagnosis = progress.diagnosis
        self.query_one(DiagnosisCard).show(diagnosis)

    # -- actions (keys and palette: sparktui.ui.actions) ---------------------------------------------

    def action_launch(self) -> None:
        if self.server is not None and self.server.live:
            self.app.notify("a server is already running: stop it first (F6) or restart (F7)", severity="warning")
            return
        fit = self.fit
        if fit is not None and fit.verdict in ("wont_start", "unsafe"):
            words = {"wont_start": "WON'T START", "unsafe": "UNSAFE"}[fit.verdict]
            reason = fit.reasons[0] if fit.reasons else ""

            def answered(yes: bool | None) -> None:
                if yes:
                    self._launch(force=True)

            self.app.push_screen(ConfirmScreen(f"The fit says {words}: {reason}\nLaunch anyway?"), answered)
            return
        self._launch()

    def _launch(self, force: bool = False) -> None:
        profile = self.profile
        if profile is None:
            reason = self.fit.reasons[0] if self.fit is not None and self.fit.reasons else "fill in the model"
            self.app.notify(f"cannot launch: {reason}", title="Launch", severity="error")
            return
        self.launch_error, self.pending, self.progress = None, "launch", None
        self.query_one(LogView).clear()
        self.render_server()
        self.post_message(ShowPane("server"))
        self._server_action("launch", None, profile, force)

    def action_stop(self) -> None:
        if self._need_live():
            self._server_action("stop", self.server)

    def action_restart(self) -> None:
        if self.server is None or not self.server.live:
            self.action_launch()
        elif self.profile is not None:
            self._server_action("restart", self.server, self.profile)

    def action_kill(self) -> None:
        if not self._need_live():
            return
        status = self.server
        assert status is not None

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._server_action("kill", status)

        self.app.push_screen(
            ConfirmScreen(f"Kill the vLLM process tree now (pid {status.pid})? SIGKILL, no grace."), confirmed
        )

    def _need_live(self) -> bool:
        if self.server is None or not self.server.live:
            self.app.notify("no server running", severity="warning")
            return False
        return True

    @io_worker("server-action", "asking the supervisor")
    def _server_action(
        self, action: str, status: ServerStatus | None, profile: Profile | None = None, force: bool = False
    ) -> None:
        try:
            if action == "launch" and profile is not None:
                problem = self.backend.runner_problem(profile)
                if problem:
                    raise Unavailable(problem)
                result = self.backend.launch(profile, force=force)
            elif action == "stop" and status is not None:
                result = self.backend.stop(status)
            elif action == "kill" and status is not None:
                result = self.backend.kill(status)
            elif action == "restart" and profile is not None:
                result = self.backend.restart(status, profile)
            else:
                raise ValueError(f"unknown server action {action!r}")
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(self.ActionDone(action, status, str(exc)))
            return
        self.post_message(self.ActionDone(action, result, None))

    def on_server_pane_action_done(self, message: ActionDone) -> None:
        self.pending = None
        if message.error:
            self.app.notify(message.error, title=message.action.capitalize(), severity="error", timeout=15)
            if message.action == "launch":  # nothing started: say why where the server would be
                self.launch_error = message.error
            self.render_server()
            return
        if message.action in ("launch", "restart"):
            self.progress = None
            self.log_path = None  # the new run's log, from its start
        self.post_message(ServerChanged(message.status))

    def worker_failed(self, worker: Worker[Any]) -> None:
        if worker.name == "server-action":
            self.pending = None
            self.render_server()

    # -- the log -------------------------------------------------------------------------------------

    def start_tail(self, path: Path) -> None:
        self._log_stop.set()
        self.log_path = path
        self._log_stop = threading.Event()
        self.progress = None
        self.query_one(LogView).clear()  # follows again: a new log is read from its end
        self._tail_log(path, self._log_stop)

    def stop_tail(self) -> None:
        self._log_stop.set()

    @io_worker("tail-log", "following the log")
    def _tail_log(self, path: Path, stop: threading.Event) -> None:
        from sparktui.ui.logstate import LogState  # the log parser, loaded after the first frame

        state = LogState()
        try:
            for batch in self.backend.follow_log(path, stop):
                if stop.is_set():
                    return
                state.feed(batch)
                self.post_message(self.LogBatch(batch, state.progress()))
        except (Unavailable, OSError) as exc:
            self.post_message(self.LogBatch([], None, str(exc)))

    def on_server_pane_log_batch(self, message: LogBatch) -> None:
        log = self.query_one(LogView)
        if message.error:
            log.push([f"[sparktui] cannot follow the log: {message.error}"])
            return
        log.push(message.lines)
        if message.progress != self.progress:
            self.progress = message.progress
            self.render_server()

    def _log_mode_changed(self) -> None:
        log = self.query_one(LogView)
        keymap = self.app_keymap()
        keys = (key_label(keys_for(BY_ID["log.follow"], keymap)), key_label(keys_for(BY_ID["log.polling"], keymap)))
        self.query_one(LogHeader).show(log.follow, log.show_polling, log.polling_hidden, keys)

    def action_toggle_follow(self) -> None:
        self.query_one(LogView).action_toggle_follow()

    def action_follow_end(self) -> None:
        self.query_one(LogView).action_follow_end()

    def action_toggle_polling(self) -> None:
        self.query_one(LogView).action_toggle_polling()

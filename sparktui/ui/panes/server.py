"""The server pane: launch, stop, kill and restart through the supervisor; the phase strip, the
predicted-vs-actual summary, live figures, the diagnosis card and the log; over them, the list of
every server on this machine, and the key that switches the pane to another one.

It owns the server poll (the followed server's record, every second while it lives, every few
seconds otherwise, never overlapping), the server list (read again when a record in the state
dir changes: an inotify wait, no CPU at idle), the actions' workers and the log tail. Live figures
come from the record (the supervisor reads /metrics); the pane never scrapes the server itself.
Stop, kill and restart act on the followed server only.
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
from sparktui.ui.messages import ServerChanged, ServersChanged, ShowPane
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.screens import ConfirmScreen
from sparktui.ui.viewmodels import (
    FitView,
    Launched,
    LogProgress,
    PreflightNote,
    ServerEntry,
    ServerStatus,
    ServerView,
)
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard, LogHeader, PhaseStrip, ServerInfo
from sparktui.ui.widgets.serverlist import ServerList

if TYPE_CHECKING:
    from sparktui.core.profiles import Profile
    from sparktui.runtime.records.state_watch import StateDirWatch


class ServerPane(Pane):
    NAME = "server"
    TAB = "2 Server"
    POLL_S = 1.0
    IDLE_EVERY = 3  # with no server running, look for one started elsewhere every 3rd tick
    LIST_EVERY = 5  # while other servers run, check every 5th tick that their supervisors live
    # (one killed outright writes nothing the watch could see)

    profile: var[Profile | None] = var(cast("Profile | None", None), init=False)
    server: var[ServerStatus | None] = var(cast("ServerStatus | None", None), init=False)
    fit: var[FitView | None] = var(cast("FitView | None", None), init=False)
    servers: var[tuple[ServerEntry, ...]] = var(cast("tuple[ServerEntry, ...]", ()), init=False)

    class Polled(Message):
        def __init__(self, status: ServerStatus | None, error: str | None, port: int | None = None) -> None:
            super().__init__()
            self.status, self.error, self.port = status, error, port

    class Listed(Message):
        def __init__(self, entries: tuple[ServerEntry, ...] | None, error: str | None = None) -> None:
            super().__init__()
            self.entries, self.error = entries, error

    class RecordsMoved(Message):
        """A server's record changed on disk (a server started, moved on or ended)."""

    class ActionDone(Message):
        def __init__(
            self,
            action: str,
            status: ServerStatus | None,
            error: str | None,
            notes: tuple[PreflightNote, ...] = (),
        ) -> None:
            super().__init__()
            self.action, self.status, self.error, self.notes = action, status, error, notes

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
        # What each launch from here found before it started, by its log: shown at the top of that log
        self.preflight: dict[Path, tuple[PreflightNote, ...]] = {}
        self._log_stop = threading.Event()
        self._ticks = 0
        self._poll_worker: Worker[None] | None = None
        self.target: int | None = None  # the port of the server the pane follows (None: the newest)
        self.recorded: tuple[ServerEntry, ...] = ()  # every record, as last read (ended ones too)
        self._list_worker: Worker[None] | None = None
        self._list_again = False
        self._watch: StateDirWatch | None = None
        self._watching = False  # the state dir watch runs (else the poll reads the list now and then)
        self._unmounted = threading.Event()

    def compose(self) -> ComposeResult:
        yield ServerList(id="server-list")
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
        self.watch(log, "wrap", self._log_mode_changed, init=False)
        self._log_mode_changed()
        self.render_server()

    def start_background(self) -> None:
        # After the first full screen: the poll's worker imports the typed protocol
        self.poll()
        self._start_listing()
        self.set_interval(self.POLL_S, self.poll, name="server-poll")

    def on_unmount(self) -> None:
        self._log_stop.set()
        self._unmounted.set()
        if self._watch is not None:
            self._watch.close()

    # -- the poll -----------------------------------------------------------------------------------

    def poll(self) -> None:
        self._ticks += 1
        others = any(e.live and e.port != self.target for e in self.servers)
        if (others or not self._watching) and self._ticks % self.LIST_EVERY == 0:
            self.refresh_list()
        idle = self.server is None or not self.server.live
        if idle and (self._ticks - 1) % self.IDLE_EVERY:
            return
        if not self.running(self._poll_worker):  # never overlapping; a dead worker never blocks it
            self._poll_worker = self._read_server(self.target)

    @io_worker("server-poll", "polling the supervisor's state")
    def _read_server(self, port: int | None) -> None:
        try:
            status = self.backend.attach(port)
        except Unavailable as exc:
            self.post_message(self.Polled(None, str(exc), port))
            return
        self.post_message(self.Polled(status, None, port))

    def on_server_pane_polled(self, message: Polled) -> None:
        if message.port != self.target:
            return  # asked before a switch to another server: not the one followed now
        self.poll_error = message.error
        if message.error or (message.status is None and self.server is not None):
            self.render_server()  # keep showing how the last server ended
            return
        self.post_message(ServerChanged(message.status))

    # -- the server as the app shares it --------------------------------------------------------------

    def watch_server(self, previous: ServerStatus | None, status: ServerStatus | None) -> None:
        if status is not None:
            self.target = status.port
            if status.log_path and status.log_path != self.log_path:
                self.start_tail(status.log_path)
            if not status.live and not self._log_stop.is_set():
                self.set_timer(1.0, self._log_stop.set)  # let the tail read the last lines first
            if status.trip and (previous is None or not previous.trip):
                self.app.notify(status.trip.splitlines()[0], title="Memory guard", severity="error", timeout=30)
        self.render_server()
        self.render_list()

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
                bad=s.state in ("failed", "lost", "wedged"),
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
        elif s.state in ("ready", "stopping", "wedged"):
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

    # -- every server on this machine: the list, and switching between them ------------------------

    def _start_listing(self) -> None:
        self.refresh_list()
        # A thread for the pane's lifetime, not a worker: workers are tasks that end (the app and
        # its tests wait for them), and this wait must not hold a slot of the pool they share.
        threading.Thread(target=self._watch_records, name="sparktui-server-watch", daemon=True).start()

    def _watch_records(self) -> None:
        """Post RecordsMoved whenever a server's record changes (blocks in the kernel meanwhile)."""
        try:
            watch = self.backend.watch_servers()
        except (Unavailable, OSError):
            return  # the poll reads the list every few seconds instead
        self._watch = watch
        if self._unmounted.is_set():  # unmounted while this thread started: on_unmount saw no watch
            watch.close()
        self._watching = True
        try:
            for _ in watch:
                self.post_message(self.RecordsMoved())
        except OSError:
            pass
        finally:
            self._watching = False

    def on_server_pane_records_moved(self) -> None:
        self.refresh_list()

    def refresh_list(self) -> None:
        if self.running(self._list_worker):
            self._list_again = True  # one more read when this one is done: never two at once
            return
        self._list_worker = self._list_servers()

    @io_worker("server-list", "listing the servers")
    def _list_servers(self) -> None:
        try:
            entries = self.backend.servers()
        except (Unavailable, OSError) as exc:
            self.post_message(self.Listed(None, str(exc)))
            return
        self.post_message(self.Listed(tuple(entries)))

    def on_server_pane_listed(self, message: Listed) -> None:
        if self._list_again:
            self._list_again = False
            self.refresh_list()
        if message.entries is None:
            return
        before = {e.port: e for e in self.recorded}
        self.recorded = message.entries
        for entry in message.entries:
            was = before.get(entry.port)
            if entry.port == self.target:
                continue  # the followed server's end is the pane's own news
            if was is not None and was.live and not entry.live:
                text = f"the server on :{entry.port} ({entry.profile}) is {entry.text()}"
                self.app.notify(text, severity="error" if entry.state in ("failed", "lost") else "information")
        fresh = [e for e in message.entries if e.live and (e.port not in before or not before[e.port].live)]
        if fresh and (self.server is None or (not self.server.live and self.pending is None)):
            self.select(fresh[0].port)  # nothing live followed: follow the server that appeared
        self._publish_list()

    def _publish_list(self) -> None:
        shown = tuple(e for e in self.recorded if e.live or e.state == "lost" or e.port == self.target)
        if shown != self.servers:
            self.post_message(ServersChanged(shown))

    def watch_servers(self) -> None:
        self.render_list()

    def render_list(self) -> None:
        keymap = self.app_keymap()
        next_key, previous_key = (key_label(keys_for(BY_ID[i], keymap)) for i in ("server.next", "server.previous"))
        self.query_one(ServerList).show(self.servers, self.target, (next_key, previous_key))

    def action_next_server(self) -> None:
        """Follow the next server of the list (the server pane's log, phases, figures and keys)."""
        self._step(1)

    def action_previous_server(self) -> None:
        self._step(-1)

    def _step(self, by: int) -> None:
        ports = [e.port for e in self.servers]
        others = [p for p in ports if p != self.target]
        if not others:
            self.app.notify("no other server is running", severity="warning")
            return
        index = ports.index(self.target) if self.target in ports else (-1 if by > 0 else 0)
        self.select(ports[(index + by) % len(ports)])
        self.post_message(ShowPane("server"))

    def on_server_list_selected(self, message: ServerList.Selected) -> None:
        self.select(message.port)

    def select(self, port: int) -> None:
        """Follow the server on `port`: its record, log, phases and figures; the keys act on it."""
        if port == self.target:
            return
        self.target = port
        self.launch_error, self.progress, self.poll_error = None, None, None
        self._log_stop.set()
        self.log_path = None
        self.query_one(LogView).clear()
        self.render_list()
        self._publish_list()  # an ended server stays listed while followed, and goes when not
        self._poll_worker = self._read_server(port)  # now, not at the next tick

    # -- actions (keys and palette: sparktui.ui.actions) ---------------------------------------------

    def followed(self) -> ServerStatus | None:
        """The server the keys act on: the one followed, once its record has been read."""
        s = self.server
        return s if s is not None and s.port == self.target else None

    def action_launch(self) -> None:
        port = self.profile.serve.port if self.profile is not None else None
        busy = next((e for e in self.servers if e.live and e.port == port), None)
        if busy is not None or (self.server is not None and self.server.live and self.server.port == port):
            self.app.notify(
                f"a server is already running on port {port}: stop it first (F6), restart it (F7), "
                "or change --port to run another beside it",
                severity="warning",
            )
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
        if (status := self._need_live()) is not None:
            self._server_action("stop", status)

    def action_restart(self) -> None:
        status = self.followed()
        if status is None or not status.live:
            self.action_launch()
        elif self.profile is not None:
            if self.profile.serve.port != status.port:
                self.app.notify(
                    f"the form holds {self.profile.name} (port {self.profile.serve.port}), not the server on "
                    f":{status.port} ({status.profile}): switch to its server, or open its profile, to restart it",
                    severity="warning",
                )
                return
            self._server_action("restart", status, self.profile)

    def action_kill(self) -> None:
        status = self._need_live()
        if status is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._server_action("kill", status)

        self.app.push_screen(
            ConfirmScreen(
                f"Kill the vLLM process tree of :{status.port} ({status.profile or 'no profile'}, pid {status.pid}) "
                "now? SIGKILL, no grace."
            ),
            confirmed,
        )

    def _need_live(self) -> ServerStatus | None:
        status = self.followed()
        if status is None or not status.live:
            why = "no server running" if status is None else f"the server on :{status.port} is not running"
            self.app.notify(why, severity="warning")
            return None
        return status

    @io_worker("server-action", "asking the supervisor")
    def _server_action(
        self, action: str, status: ServerStatus | None, profile: Profile | None = None, force: bool = False
    ) -> None:
        try:
            if action == "launch" and profile is not None:
                problem = self.backend.runner_problem(profile)
                if problem:
                    raise Unavailable(problem)
                result: ServerStatus | Launched = self.backend.launch(profile, force=force)
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
        if isinstance(result, Launched):
            self.post_message(self.ActionDone(action, result.status, None, result.notes))
        else:
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
            started = message.status.log_path if message.status is not None else None
            self._keep_preflight(started, message.notes)
            if started is not None and started == self.log_path:
                self.start_tail(started)  # a poll got there first: read again, the preflight on top
            else:
                self.log_path = None  # the new run's log, from its start
            self.target = message.status.port if message.status is not None else self.target
        elif message.status is not None and message.status.port != self.target:
            # a stop or kill that ended after the user switched to another server: say so, stay put
            self.app.notify(f"the server on :{message.status.port} is {message.status.text()}")
            self.refresh_list()
            return
        self.post_message(ServerChanged(message.status))

    KEEP_PREFLIGHTS = 8  # launches whose preflight lines are kept (a switch back shows them again)

    def _keep_preflight(self, log_path: Path | None, notes: tuple[PreflightNote, ...]) -> None:
        """Keep a launch's preflight lines for the top of its log; say its warnings now (without
        blocking anything: the server is already starting)."""
        if not notes:
            return
        if log_path is not None:
            self.preflight[log_path] = notes
            for old in list(self.preflight)[: -self.KEEP_PREFLIGHTS]:
                del self.preflight[old]
        else:
            self.query_one(LogView).note(self._note_lines(notes))  # no log to tie them to: now
        warnings = [n.text for n in notes if n.warning]
        if warnings:
            shown = warnings[:3] + ([f"… {len(warnings) - 3} more at the top of the log"] if len(warnings) > 3 else [])
            self.app.notify(
                "\n".join(shown),
                title=f"Preflight: {len(warnings)} warning{'s' if len(warnings) > 1 else ''}",
                severity="warning",
                timeout=20,
            )

    @staticmethod
    def _note_lines(notes: tuple[PreflightNote, ...]) -> list[tuple[str, str]]:
        return [("warning" if n.warning else "note", n.line()) for n in notes]

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
        log = self.query_one(LogView)
        log.clear()  # follows again: a new log is read from its end
        notes = self.preflight.get(path)
        if notes:
            log.note(self._note_lines(notes))
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
        follow, polling, wrap = (key_label(keys_for(BY_ID[f"log.{n}"], keymap)) for n in ("follow", "polling", "wrap"))
        self.query_one(LogHeader).show(
            log.follow, log.show_polling, log.polling_hidden, (follow, polling, wrap), log.wrap
        )

    def action_toggle_follow(self) -> None:
        self.query_one(LogView).action_toggle_follow()

    def action_follow_end(self) -> None:
        self.query_one(LogView).action_follow_end()

    def action_toggle_polling(self) -> None:
        self.query_one(LogView).action_toggle_polling()

    def action_toggle_wrap(self) -> None:
        self.query_one(LogView).action_toggle_wrap()

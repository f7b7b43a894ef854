"""The server pane: launch, stop, kill and restart through the supervisor; the phase strip, the
predicted-vs-actual summary, live figures, the diagnosis card and the log; over them, the list of
every server on this machine, and the key that switches the pane to another one.

It owns the server poll (the followed server's record, every second while it lives, never
overlapping; with none live, a server started elsewhere is found by the list's watch of the state
dir, or every few seconds where that watch cannot run) and the actions' workers; its children own the rest: the
list of servers and the wait on the state dir (`server_list.ServerRoster`), and the log with its
tail (`server_log.ServerLog`). Live figures come from the record (the supervisor reads /metrics);
the pane never scrapes the server itself. Stop, kill and restart act on the followed server only.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from textual.message import Message
from textual.reactive import var
from textual.timer import Timer
from textual.widget import Widget
from textual.worker import Worker

from sparktui.errors import UserError
from sparktui.ui.actions import BY_ID, key_label, keys_for
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import ServerChanged, ShowPane
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.viewmodels import FitView

if TYPE_CHECKING:
    from sparktui.core.profiles import Profile
    from sparktui.ui.panes.server_list import ServerRoster
    from sparktui.ui.panes.server_log import ServerLog
    from sparktui.ui.serverviews import Launched, PreflightNote, ServerEntry, ServerStatus
    from sparktui.ui.widgets.serverlist import ServerList


class ServerPane(Pane):
    NAME = "server"
    TAB = "2 Server"
    POLL_S = 1.0
    IDLE_EVERY = 3  # with no server running and no watch, look for one started elsewhere every 3rd tick
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

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runner_problem: str | None = None
        self.launch_error: str | None = None
        self.poll_error: str | None = None
        self.pending: str | None = None  # an action on its way to the supervisor
        self._ticks = 0
        self._poll_worker: Worker[None] | None = None
        self._poll_timer: Timer | None = None
        self.target: int | None = None  # the port of the server the pane follows (None: the newest)

    # Its widgets (and their modules) are made when first used: on a narrow terminal, after the first
    # full screen (Pane.MOUNTS_LATER). Before they mount they keep what they are given.
    MOUNTS_LATER = True

    @cached_property
    def roster(self) -> ServerRoster:
        from sparktui.ui.panes.server_list import ServerRoster

        return ServerRoster(id="server-list")

    @cached_property
    def server_log(self) -> ServerLog:
        from sparktui.ui.panes.server_log import ServerLog

        return ServerLog(id="server-log")

    def widgets(self) -> list[Widget]:
        from sparktui.ui.widgets.server import DiagnosisCard, PhaseStrip, ServerInfo

        return [
            self.roster,
            PhaseStrip(id="phases"),
            ServerInfo(id="server-info"),
            DiagnosisCard(id="diagnosis"),
            self.server_log,
        ]

    def widgets_mounted(self) -> None:
        self.render_server()
        self.render_list()

    def on_mount(self) -> None:
        self.render_server()

    def start_background(self) -> None:
        self._background = True
        self.watch_profile(self.profile)  # the profile's runner, checked now (see watch_profile)
        self.call_later(self._start_polls)

    async def _start_polls(self) -> None:
        # After the first full screen: the poll's worker imports the typed protocol
        await self.mounted()  # a pane that started hidden mounts its widgets first
        self.poll()
        self.roster.start_listing()
        self._poll_timer = self.set_interval(self.POLL_S, self.poll, name="server-poll")

    # -- the poll -----------------------------------------------------------------------------------

    def poll(self) -> None:
        self._ticks += 1
        others = any(e.live and e.port != self.target for e in self.servers)
        if (others or not self.roster.watching) and self._ticks % self.LIST_EVERY == 0:
            self.roster.refresh_list()
        idle = self.server is None or not self.server.live
        # With nothing live followed, the roster's watch of the state dir says when a server starts
        # (appeared() then reads it): the supervisor's state is read again only where it cannot run.
        if idle and self.roster.watching and not others and self._poll_timer is not None:
            self._poll_timer.pause()  # nothing to do each second: resume_poll() when that changes
            return
        if idle and (self.roster.watching or (self._ticks - 1) % self.IDLE_EVERY):
            return
        if not self.running(self._poll_worker):  # never overlapping; a dead worker never blocks it
            self._poll_worker = self._read_server(self.target)

    def resume_poll(self) -> None:
        """A server followed or listed, or the watch of the state dir ended: poll each second again."""
        if self._poll_timer is not None:
            self._poll_timer.resume()

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
        if status is not None and self.target is not None and status.port != self.target:
            # a record of the server followed before a switch, still on its way up to the app (the
            # switch reads the new one at once): following it again would undo the switch
            return
        self.resume_poll()
        if status is not None:
            self.target = status.port
            self.server_log.follow_server(status)
            if status.trip and (previous is None or not previous.trip):
                self.app.notify(status.trip.splitlines()[0], title="Memory guard", severity="error", timeout=30)
        self.render_server()
        self.render_list()

    def watch_fit(self) -> None:
        self.render_server()

    _background = False  # start_background has run: the first full screen is up

    def watch_profile(self, profile: Profile | None) -> None:
        # not before the first screen: the check (imports, PATH lookups) would compete with the first fit
        if profile is not None and self._background and (self.server is None or not self.server.live):
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
        if self._hidden_at_start:
            return  # drawn once mounted
        from sparktui.ui.serverviews import ServerView  # imported with widgets() (the pane is mounted)
        from sparktui.ui.widgets.server import DiagnosisCard, PhaseStrip, ServerInfo

        s, progress = self.server, self.server_log.progress
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
        self.query_one(PhaseStrip).follow(s, progress, self.pending == "launch")
        self.query_one(DiagnosisCard).follow(s, progress, self.pending == "launch")

    def on_server_log_log_read(self) -> None:
        self.render_server()  # what the log says of the start-up changed

    # -- every server on this machine: the list, and switching between them ------------------------

    def appeared(self, port: int) -> None:
        """A server started elsewhere: followed when nothing live is (and no launch is on its way)."""
        if self.server is None or (not self.server.live and self.pending is None):
            if port == self.target:  # a new start on the port of the ended one followed: read it now
                self._poll_worker = self._read_server(port)
                return
            self.select(port)

    def watch_servers(self) -> None:
        self.resume_poll()
        self.render_list()

    def render_list(self) -> None:
        if self._hidden_at_start:
            return  # drawn once mounted
        keymap = self.app_keymap()
        next_key, previous_key = (key_label(keys_for(BY_ID[i], keymap)) for i in ("server.next", "server.previous"))
        self.roster.show(self.servers, self.target, (next_key, previous_key))

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
        self.launch_error, self.poll_error = None, None
        self.server_log.forget()
        self.render_list()
        self.roster.publish()  # an ended server stays listed while followed, and goes when not
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
            from sparktui.ui.screens import ConfirmScreen  # a dialog: loaded when first opened

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
        self.launch_error, self.pending = None, "launch"
        self.server_log.clear()
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
        from sparktui.ui.screens import ConfirmScreen  # a dialog: loaded when first opened

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
        from sparktui.ui.serverviews import Launched  # loaded by the backend's launch, if not before

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
            self.server_log.launched(message.status.log_path if message.status is not None else None, message.notes)
            self.target = message.status.port if message.status is not None else self.target
        elif message.status is not None and message.status.port != self.target:
            # a stop or kill that ended after the user switched to another server: say so, stay put
            self.app.notify(f"the server on :{message.status.port} is {message.status.text()}")
            self.roster.refresh_list()
            return
        self.post_message(ServerChanged(message.status))

    def worker_failed(self, worker: Worker[Any]) -> None:
        if worker.name == "server-action":
            self.pending = None
            self.render_server()

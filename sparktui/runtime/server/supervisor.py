"""The supervisor: owns one running vLLM — launch, watch, guard, stop — and records its state.

It runs in the foreground (`sparktui serve`, systemd-friendly: SIGTERM stops the whole tree) or
detached in a new session (`--detach`, the TUI), so an SSH drop or a TUI crash changes nothing.
vLLM's output goes to a per-run log file that is tailed and parsed (core.vllm_log) for phase and
events; readiness is /health, load is /metrics. State is a JSON file (state.py) rewritten
atomically; commands (status, stop, kill) come over a Unix socket only the user can open.

At rest it costs almost nothing (bench/supervisor_rest.py): the loop sleeps in poll() until the
log is written (inotify), a request or signal arrives (a wake pipe), or vLLM exits (its pidfd);
/metrics is scraped only while someone reads it or the server is busy; the guard's own thread
keeps its pace near the lines, is woken by PSI on memory stalls (guard.py) and wakes the loop when
its line has news.

If the supervisor dies, vLLM does not live on unguarded: the API server gets SIGKILL from the
kernel (PR_SET_PDEATHSIG, proc.spawn), a reaper process (reaper.py) sweeps the recorded tree, and
the next launch sweeps anything a lost supervisor left.

The Supervisor class is the loop and the record; each of its other jobs is a part in its own
module beside this one, holding its own state: command_socket, guard_wiring, log_ingest,
metrics_pace, restarts, leak_check, watch_wiring, cluster_wiring, wakeup, record_file. The API the
CLI and TUI use is client.py and launcher.py; preflight is preflight.py.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.core import pool
from sparktui.errors import UserError
from sparktui.runtime.guard.guard import Guard
from sparktui.runtime.host import proc, provenance
from sparktui.runtime.launch.runner import LaunchCommand, build_command
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.endpoint import Endpoint, base_url
from sparktui.runtime.records.launch_id import ENV as LAUNCH_ID_ENV
from sparktui.runtime.records.launch_id import EXPECTED as LAUNCH_ID_EXPECTED
from sparktui.runtime.records.launch_id import is_launch_id, not_this_launch
from sparktui.runtime.server.cluster_wiring import ClusterWiring
from sparktui.runtime.server.command_socket import CommandSocket
from sparktui.runtime.server.guard_wiring import GuardWiring
from sparktui.runtime.server.hardening import harden_supervisor
from sparktui.runtime.server.leak_check import LeakCheck
from sparktui.runtime.server.log_ingest import LogIngest, say
from sparktui.runtime.server.logtail import LogTail
from sparktui.runtime.server.metrics_pace import MetricsOnDemand
from sparktui.runtime.server.preflight import preflight
from sparktui.runtime.server.reaper import Reaper
from sparktui.runtime.server.record_file import RecordFile
from sparktui.runtime.server.restarts import Restarts
from sparktui.runtime.server.sweep import set_aside_unreadable, sweep_lost_servers
from sparktui.runtime.server.wakeup import Wakeup
from sparktui.runtime.server.watch_wiring import WatchWiring

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.metrics import MetricsSnapshot
    from sparktui.core.profiles import Profile

# The loop sleeps in poll() until something happens: a log write (inotify), a request on the
# socket or a signal (the wake pipe), vLLM's exit (its pidfd), or the next timer below.
STARTUP_TICK_S = 0.25  # while starting: members appear, /health is asked every HEALTH_EVERY_S
HEALTH_EVERY_S = 0.5
# Once ready the loop needs no timer of its own: the guard wakes it for news (a sample 0.5 GiB from the
# recorded line, a new action or alert; warnings, trips and kernel lines too), so it wakes at the
# members' timer (REST_TRACK_S) and this is only a backstop.
REST_TICK_S = 30.0
SAVE_RETRY_S = 5.0  # a state write the disk refused (full, the dir deleted) is tried again this often
REST_TRACK_S = 10.0  # once ready: new members (a /proc scan only if some process was created meanwhile)
LOG_FALLBACK_S = 0.25  # how often the log is read where inotify is missing
RECENT_EVENTS = 50
REPLY_DRAIN_S = 5.0  # at the end, how long replies still being sent (a stop's final state) are waited for
GUARD_EXIT = 97  # like `sparktui guard`: the memory guard stopped the server


class Supervisor:
    """One server's supervisor: the loop, the record, and the verbs of its socket. Its parts, each
    holding its own state: the command socket, the guard, the log, /metrics, the watch and its
    restarts, the cluster link, the loop's sleep (their modules beside this one)."""

    def __init__(
        self,
        profile: Profile,
        serve: ServeConfig | None = None,
        *,
        force: bool = False,
        detached: bool = False,
        launch_id: str | None = None,
    ) -> None:
        self.profile = profile
        self.serve = serve if serve is not None else profile.serve
        self.force, self.detached = force, detached
        self.launch_id = launch_id  # runtime/records/launch_id.py: a request naming another is refused
        self.harden = False  # serve_foreground sets it: mlockall, nice, oom_score_adj (server/hardening.py)
        self.reservation: pool.Reservation | None = None  # set by preflight in run()
        self.port = self.serve.port
        self.file = RecordFile(st.state_path(self.port), say)
        self.events: collections.deque[pr.EventRecord] = collections.deque(maxlen=RECENT_EVENTS)
        self._saved_event: pr.EventRecord | None = None  # the newest event the last save carried
        self.requested: str | None = None  # "stop" | "kill", from a signal or the socket
        self.requested_by: str | None = None
        self.finished = threading.Event()
        self.lock = threading.RLock()
        self.tree: proc.ProcessTree | None = None
        self.command: LaunchCommand | None = None
        self.state: pr.StateRecord | None = None
        self.healthy = False
        # a cluster worker's rank, once its head answers /health (node-watch passes the word on):
        # a headless rank never logs "ready" itself, yet the cluster serves; its loop may rest
        self.cluster_ready = False
        self.endpoint: Endpoint | None = None
        self.reaper: Reaper | None = None
        self.mark = provenance.new_mark()  # carried by vLLM's tree and the reaper: proves they are ours
        record, lock, event = (lambda: self.record), self.lock, self._add_event
        self.wakeup = Wakeup()
        self.commands = CommandSocket(self.port, say)
        self.guarding = GuardWiring(
            profile.guard, self.port, event, lock=lock, record=record, save=self._save,
            reaper=lambda: self.reaper, wake=self.wakeup.wake, say=say,
        )  # fmt: skip
        self.metrics = MetricsOnDemand(lock, self.wakeup.wake, healthy=lambda: self.healthy)
        self.cluster = ClusterWiring(profile, self.serve, launch_id, record=record, wake=self.wakeup.wake, say=say)
        self.watching = WatchWiring(
            profile, self.serve, event, lock=lock, recording=lambda: self.state is not None,
            save=self._save, wake=self.wakeup.wake, say=say,
        )  # fmt: skip
        self.watch = self.guarding.flight = self.watching.watch  # its recorder, woken by the guard's samples
        self.restarts = Restarts(self.watch, profile.name, self.port, event, lock=lock, save=self._save, say=say)
        self.ingest = LogIngest(
            profile, self.serve, event, record=record, on_line=self.watch.on_line,
            healthy=lambda: self.healthy, on_activity=self.metrics.note_activity,
            on_phase=self.guarding.set_phase, cluster_ready=lambda: self.cluster_ready, say=say,
        )  # fmt: skip
        self.leaks = LeakCheck(profile.guard.leak_wait_s, lock=lock, event=event, save=self._save, say=say)

    @property
    def record(self) -> pr.StateRecord:
        """The state record (set by run() before anything else happens)."""
        assert self.state is not None
        return self.state

    @property
    def guard(self) -> Guard | None:
        return self.guarding.guard

    # -- state

    def _add_event(self, data: dict[str, Any]) -> None:
        """One event for the state record's recent events (kind and t, then its own fields)."""
        self.events.append(pr.EventRecord.model_validate(data))

    def _save(self, **changes: object) -> bool:
        """Record the state; True when it reached the disk. A failed write (a full disk, the state
        dir deleted) is reported once and retried (SAVE_RETRY_S): the guard never waits on it."""
        with self.lock:
            state = self.state
            assert state is not None
            for name, value in changes.items():
                setattr(state, name, value)
            state.updated_at = time.time()
            if self.tree is not None:
                record = self.tree.to_record()
                state.tree = pr.TreeRecord.model_validate(record)
                state.containment = self.tree.containment
                if self.reaper is not None:
                    self.reaper.tell(record)  # the reaper needs no state file to sweep the tree
            state.summary = pr.LogSummaryRecord.model_validate(self.ingest.summary.to_dict())
            state.watch = pr.WatchRecord.model_validate(self.watch.to_state())
            state.events = list(self.events)
            self._saved_event = state.events[-1] if state.events else None
            return self.file.write(state)

    def _events_unsaved(self) -> bool:
        """Another thread (the guard's deferral, the watch) added an event since the last save: the
        loop may have saved that sample's line already, so woken again the line is no news, the event is."""
        events = self.events
        return bool(events) and events[-1] is not self._saved_event

    # -- signals and commands

    def request(self, what: str, by: str) -> None:
        with self.lock:
            if self.requested != "kill":  # kill wins over stop
                self.requested, self.requested_by = what, by
        self.wakeup.wake()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.request("stop", signal.Signals(signum).name)

    def claim_port(self) -> None:
        """One launch per port: bind the port's command socket first of all (before preflight)."""
        self.commands.claim()

    def answer(self, req: pr.AnyRequest) -> pr.Reply:
        """Carry out one socket request; the reply carries the state afterwards."""
        only = req.only_id if isinstance(req, pr.StopRequest | pr.KillRequest | pr.ClusterReadyRequest) else None
        if only is not None and only != self.launch_id:
            why = not_this_launch(self.port, os.getpid(), self.launch_id, only)
            return pr.Reply(ok=False, error=why, state=self.snapshot())
        if isinstance(req, pr.ClusterReadyRequest):
            if not self.cluster.worker:
                return pr.Reply(ok=False, error="not a cluster worker's rank", state=self.snapshot())
            with self.lock:
                self.cluster_ready = True
            self.wakeup.wake()
        elif isinstance(req, pr.StatusRequest):
            if req.metrics:
                self.metrics.want()
        elif isinstance(req, pr.StopRequest | pr.KillRequest):
            self.request(req.cmd, "socket")
            self.finished.wait(req.wait)
        elif isinstance(req, pr.GuardRequest):
            if self.guard is None:
                return pr.Reply(ok=False, error="the guard is not running yet; try again", state=self.snapshot())
            notes = self.guarding.change(req)
            return pr.Reply(ok=True, state=self.snapshot(), notes=notes)
        return pr.Reply(ok=True, state=self.snapshot())

    def snapshot(self) -> pr.StateRecord | None:
        with self.lock:
            if self.state is None:
                return None
            live = self.record.model_copy(deep=True)
            guard = self.guard
            if live.running and (line := self.guarding.line()) is not None:
                live.guard.last = line  # the latest sample: the file's line is rewritten only for news
            if guard is not None and guard.sampled_at is not None and live.running and guard.running:
                planned = guard.last.next_interval if guard.last is not None else 0.0
                live.guard.set_age(guard.clock() - guard.sampled_at, planned)
            # Only in live replies (never written to the file): what the loop has been doing.
            live.loop = pr.LoopStats(wakes=dict(self.wakeup.wakes), metrics_scrapes=self.metrics.count)
            return live

    # -- main loop

    def run(self) -> int:
        """Launch and supervise until vLLM exits or is stopped; returns the exit status to use."""
        self.claim_port()  # first: a second launch on this port stops here, before it touches anything
        exporter = start_exporter(self.profile.metrics_listen)
        try:
            return self._run()
        finally:
            if exporter is not None:
                exporter.shutdown()
            st.HELD_HERE.discard(self.port)
            if self.commands.server is not None:
                self.commands.server.close()

    def _run(self) -> int:
        st.writable_state_dir()  # a read-only or full state dir: refused here, naming it
        set_aside_unreadable(self.port)
        sweep_lost_servers()
        pre = preflight(self.profile, self.serve, force=self.force, evict=True)
        for note in pre.notes:
            say(note)
        for warning in pre.warnings:
            say(f"warning: {warning}")
        self.command = self.cluster.command(self.profile, self.serve, build_command(self.profile, self.serve))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = st.state_dir() / "logs" / f"{st.safe_name(self.profile.name)}-{self.port}-{stamp}.log"
        self.state = first_record(self, log_path, pre.warnings, pre.fit)
        self.reservation = pre.reservation
        if pre.reservation is not None:
            r = pre.reservation
            self.state.reservation = pr.ReservationRecord(bytes=r.bytes, basis=r.basis, priority=r.priority)
        self.record.argv = self.command.argv
        self.record.runner = self.command.kind
        self.record.container = self.command.container
        self.record.page_cache = pre.page_cache

        previous = {}
        if threading.current_thread() is threading.main_thread():  # only there can signals be handled
            handled = (signal.SIGTERM, signal.SIGINT) + (() if self.detached else (signal.SIGHUP,))
            previous = {s: signal.signal(s, self._on_signal) for s in handled}
            if self.detached:
                previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if self.harden:  # its own process (`sparktui serve`), after preflight: a refusal says only why
            os.environ.setdefault("SPARKTUI_USER_NICE", str(os.getpriority(os.PRIO_PROCESS, 0)))  # for vLLM
            say(harden_supervisor().summary())
        try:
            if not self._save():  # nothing is started that its record could not name
                raise UserError(
                    f"state dir {st.state_dir()}: cannot write the state file {self.file.path} (full or "
                    "read-only); free some space there and launch again"
                )
            self.guarding.open_beat()
            alarm = self.guarding.alarm.fd if self.guarding.alarm is not None else None
            reaper = self.reaper = Reaper(self.file.path, beat_fd=self.guarding.beat_fd, alarm_fd=alarm, mark=self.mark)
            # saved before vLLM runs: the reaper carries the mark, which proves us (fallback.refuse_unproven…)
            self._save(reaper=pr.ProcessRef(pid=reaper.pid, start_time=proc.start_time_of(reaper.pid)))
            env = {**os.environ, **self.command.env, provenance.TREE_MARK_ENV: self.mark}
            self.watching.start_recording(self.record.started_at, self._flight_context)
            self.leaks.before()
            self.tree = proc.spawn(self.command.argv, log_path, env)
            reaper.tell(self.tree.to_record())
            self.guarding.start(self.tree, self.reservation)
            # before the save that records the tree: launch() returns on it
            self.commands.serve(self.answer, self.snapshot)
            self._save(status="starting", phase=self.ingest.summary.phase)
            say(f"vLLM pid {self.tree.pid} on {self.record.url}, log {log_path}")
            with Endpoint(base_url(self.serve.host, self.port), api_key=self.serve.api_key) as self.endpoint:
                while True:
                    code = self._loop(log_path)
                    restart = self.restarts.log_path(self.record.exit, self.requested, self.ingest.summary.reached)
                    if restart is None:
                        return code
                    log_path = restart
                    self._respawn(log_path, env)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._close()
            self.wakeup.close()

    def _flight_context(self) -> tuple[str, str, list[int]]:
        tree = self.tree
        pids = [] if tree is None else [i.pid for i in tree.recorded]
        return self.ingest.summary.phase, self.record.status, pids

    def _loop(self, log_path: Path) -> int:
        tree = self.tree
        assert tree is not None  # set by run() before the loop starts
        follower = LogTail(log_path, keep=1)
        sleep = self.wakeup.sleeper(follower, tree.pid)
        try:
            how = self._watch(follower, sleep.sleep, sleep.log_fd is None)
        finally:
            sleep.close()
        return self._finish(how, follower)

    def _watch(self, follower: LogTail, sleep: Callable[[float], None], no_inotify: bool) -> str:
        """Until vLLM ends or is to be stopped; how ("guard", "stop", "kill", "exited", "wedge")."""
        tree, endpoint, guard = self.tree, self.endpoint, self.guard
        assert tree is not None and endpoint is not None and guard is not None  # set by run() before the loop starts
        generation = tree.generation
        next_track = next_health = 0.0
        resting = False  # served (/health answers here, or at a worker's head): the loop's resting pace
        while True:
            lines = follower.poll()
            changed = self.ingest.feed(lines)
            behind = bool(lines) and follower.pending()  # a flood: read on before sleeping
            now = time.monotonic()
            if self.cluster_ready and not resting:
                resting = changed = True
                self.cluster.rest_as_worker(self.guarding.set_phase)
            resting = resting or self.healthy
            if now >= next_track:  # in a cgroup: its cgroup.procs; otherwise /proc, scanned at rest only after a fork
                tree.track() if resting or tree.scope is not None else tree.refresh()
                next_track = now + (REST_TRACK_S if resting else STARTUP_TICK_S)
            if tree.generation != generation:
                generation, changed = tree.generation, True
            if self.ingest.summary.ready and not self.healthy and now >= next_health:
                next_health = now + HEALTH_EVERY_S
                if endpoint.health().ok:
                    # Lines written before /health answered are start-up, not load: read them
                    # while still unhealthy, or a late start-up line would count as activity.
                    while batch := follower.poll():
                        changed |= self.ingest.feed(batch)
                    tree.refresh()  # the state that says "running" names every process
                    with self.lock:
                        self.healthy, changed = True, True
                        self.metrics.next_at = now  # the first scrape at once
                    self.record.status, self.record.ready_at = "running", time.time()
                    say(f"ready: {self.record.url} answers /health")
                    self.cluster.announce_ready()
            if self.cluster.due(now):
                changed |= self.cluster.look(now, None if self.requested else self._stop_for)
            if self.healthy and now >= self.metrics.next_at:
                self.metrics.poll(endpoint, self._seen_metrics, self._store_metrics)
                changed = True
            if self.guarding.tripped.is_set():
                return "guard"
            if self.requested:
                return self.requested
            if self.watch.restart_wanted.is_set():
                return "wedge"
            if tree.returncode() is not None:
                last = guard.last  # set before the guard signals: its trip may be what ended vLLM
                return "guard" if last is not None and last.action.value in ("term", "kill") else "exited"
            changed |= self.guarding.status()
            if changed or self.file.unsaved or self._events_unsaved():
                self._save()
            timers = [next_track, now + (REST_TICK_S if resting else STARTUP_TICK_S)]
            if self.ingest.summary.ready and not self.healthy:
                timers.append(next_health)
            if self.healthy:
                timers.append(self.metrics.next_at)
            if self.cluster.next_at is not None:
                timers.append(self.cluster.next_at)
            if no_inotify:
                timers.append(now + LOG_FALLBACK_S)
            if self.file.unsaved:
                timers.append(now + SAVE_RETRY_S)
            sleep(0.0 if behind else max(0.0, min(timers) - time.monotonic()))

    def _stop_for(self, why: str) -> None:
        """The rest of the cluster is gone: stop this node (the loop sees it at once)."""
        self.requested, self.requested_by = "stop", why

    def _seen_metrics(self, snapshot: MetricsSnapshot) -> None:
        self.watching.on_metrics(snapshot)
        self.guarding.follow_load(self.ingest.summary.phase, self.watch.prefilling, self.watch.stalled)

    def _store_metrics(self, metrics: dict[str, Any]) -> None:
        self.record.metrics = pr.MetricsRecord.model_validate(metrics)

    def _finish(self, how: str, follower: LogTail) -> int:
        tree = self.tree
        assert tree is not None  # set by run() before the loop starts
        self.guarding.status()  # a trip can end the loop before the guard's line (kernel tripwire…) was recorded
        self.guarding.tell_reaper(watching=False)  # the guard's heartbeat stops here: no stand-in wanted
        self._save(status="stopping")
        self.guarding.end(tripped=how == "guard")
        assert self.command is not None  # built by run() before the first launch
        report = end_tree(how, tree, self.command, self.guarding.grace_s)
        self.cluster.close(how)
        returncode = tree.returncode()
        if how == "exited" or not tree.is_gone():  # vLLM left children (EngineCore), or died whole (OOM killer)
            report = tree.kill()  # on a tree with nothing left, no signal: the /dev/shm files it was seen holding
        self.cluster.tree_gone()
        self.ingest.feed(follower.drain())
        follower.close()
        summary = self.ingest.summary
        if how == "exited":
            self.ingest.finish(returncode)
        reason = {"stop": "stopped", "kill": "killed", "guard": "guard", "wedge": "wedged"}.get(
            how, "failed" if summary.failure else "exited"
        )
        phase = summary.phase if how == "exited" else "stopped"
        self._save(
            status="exited",
            phase=phase,
            exit=pr.ExitRecord(
                reason=reason,
                by=self.requested_by,
                returncode=returncode,
                stop=report.to_dict() if report else None,
                failure=summary.failure.to_dict() if summary.failure else None,
            ),
        )
        if how == "exited" and summary.failure:
            f = summary.failure
            say(f"vLLM failed ({f.kind}): {f.message}\n  hint: {f.hint}")
        self.leaks.after(self.tree, self.record.exit)
        if how == "guard":
            return GUARD_EXIT
        if how == "wedge":
            return 1
        return 0 if how in ("stop", "kill") or returncode == 0 else 1

    def _respawn(self, log_path: Path, env: dict[str, str]) -> None:
        """A restart (restarts.py allowed it): every part starts over on a new run of vLLM."""
        self.ingest.restart()
        self.healthy = self.cluster_ready = False
        self.metrics.forget()
        self.guarding.restart()
        self.watch.reset_for_restart()
        assert self.command is not None  # built by run() before the first launch
        self.leaks.before()
        self.tree = proc.spawn(self.command.argv, log_path, env)
        self.guarding.start(self.tree, self.reservation)
        phase = self.ingest.summary.phase
        self._save(status="starting", phase=phase, log_path=str(log_path), exit=None, ready_at=None)
        say(f"vLLM pid {self.tree.pid} on {self.record.url}, log {log_path}")

    def _close(self) -> None:
        self.watch.close(clean=True)
        self.commands.close()
        self.finished.set()
        self.commands.drain(REPLY_DRAIN_S)  # a stop or kill waiting on `finished` gets its reply before we exit
        if self.reaper is not None:
            # a final record the disk refused (full, read-only): the reaper writes it once there is room
            unsaved = self.record.to_json() if self.file.unsaved and self.state is not None else None
            self.reaper.dismiss(unsaved)
        self.guarding.close_beat()


def first_record(sup: Supervisor, log_path: Path, warnings: list[str], fit: dict[str, Any] | None) -> pr.StateRecord:
    """The record as a launch starts, before vLLM does."""
    me = proc.read_stat(os.getpid())
    serve, profile = sup.serve, sup.profile
    return pr.StateRecord(
        status="starting",
        phase="launching",
        profile=profile.name,
        profile_path=str(profile.path) if profile.path else None,
        model=serve.model,
        host=serve.host,
        port=sup.port,
        url=f"http://{serve.host}:{sup.port}",
        log_path=str(log_path),
        socket="@" + sup.commands.name[1:],
        detached=sup.detached,
        launch_id=sup.launch_id,
        supervisor=pr.ProcessRef(pid=os.getpid(), start_time=me.start_time if me else 0),
        mark=sup.mark,  # the reaper carries it from its start: it proves this supervisor before vLLM runs
        started_at=time.time(),
        preflight=pr.PreflightRecord(warnings=warnings, fit=fit),
        guard=pr.GuardRecord(armed=sup.guarding.armed, state="starting", lines=sup.guarding.lines),
    )


def end_tree(how: str, tree: proc.ProcessTree, command: LaunchCommand, grace_s: float) -> proc.StopReport | None:
    """Stop or kill the tree as asked, the runner's own way first (a container's stop); None for
    an end that asks neither (vLLM exited, or the guard is stopping it)."""
    if how == "kill":
        if command.kill_argv:
            subprocess.run(command.kill_argv, capture_output=True, timeout=20)
        return tree.kill()
    if how in ("stop", "wedge"):
        if command.stop_argv:
            subprocess.run(command.stop_argv, capture_output=True, timeout=grace_s + 20)
        return tree.stop(grace_s)
    return None


def start_exporter(listen: str | None) -> Any:
    """[metrics] listen: serve sparktui's figures to Prometheus while this server runs (a port
    that cannot be had is said, never a reason not to launch)."""
    if listen is None:
        return None
    from sparktui.runtime import exporter

    try:
        server = exporter.serve(listen)
    except UserError as exc:
        say(f"warning: [metrics] {exc}; no /metrics for this server")
        return None
    say(f"[metrics] sparktui's figures on http://{listen}/metrics")
    return server


# ---------------------------------------------------------------- the API the CLI and TUI use
# (read, attach, stop, kill, set_guard, change_guard: runtime.server.client)


def serve_foreground(
    profile: Profile, serve: ServeConfig | None = None, *, force: bool = False, launch_id: str | None = None
) -> int:
    detached = os.environ.get("SPARKTUI_DETACHED") == "1"  # set by launch() for its child
    given = os.environ.pop(LAUNCH_ID_ENV, None)  # set by launch() for its child; never inherited further
    if launch_id is None and given is not None:
        if not is_launch_id(given):
            raise UserError(f"{LAUNCH_ID_ENV}={given!r}: expected a launch id ({LAUNCH_ID_EXPECTED})")
        launch_id = given
    sup = Supervisor(profile, serve, force=force, detached=detached, launch_id=launch_id)
    sup.harden = True
    return sup.run()

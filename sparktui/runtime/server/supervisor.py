"""The supervisor: owns one running vLLM — launch, watch, guard, stop — and records its state.

It runs in the foreground (`sparktui serve`, systemd-friendly: SIGTERM stops the whole tree) or
detached in a new session (`--detach`, the TUI), so an SSH drop or a TUI crash changes nothing.
vLLM's output goes to a per-run log file that is tailed and parsed (core.vllm_log) for phase and
events; readiness is /health, load is /metrics. State is a JSON file (state.py) rewritten
atomically; commands (status, stop, kill) come over a Unix socket only the user can open.

At rest it costs almost nothing (bench/supervisor_rest.py): the loop sleeps in poll() until the
log is written (inotify), a request or signal arrives (a wake pipe), or vLLM exits (its pidfd);
/metrics is scraped only while someone reads it or the server is busy; the guard's own thread
keeps its pace near the lines and is woken by PSI on memory stalls (guard.py).

If the supervisor dies, vLLM does not live on unguarded: the API server gets SIGKILL from the
kernel (PR_SET_PDEATHSIG, proc.spawn), a reaper process (reaper.py) sweeps the recorded tree, and
the next launch sweeps anything a lost supervisor left.

Python API for the TUI: preflight(), launch(), read(), stop(), kill(), restart().
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.core import pool, vllm_log
from sparktui.core.kernel_log import DEFAULT_KERNEL_MODE, KernelEvent
from sparktui.core.leak import MEMORY_BACK_TIMEOUT_S
from sparktui.errors import UserError
from sparktui.runtime.cluster import link as cluster_link
from sparktui.runtime.guard import leakgate
from sparktui.runtime.guard.guard import Guard, GuardLines, TripReport, resolve_lines
from sparktui.runtime.guard.stop_order import StopOrder
from sparktui.runtime.host import proc
from sparktui.runtime.host.memory import read_memory
from sparktui.runtime.launch.runner import LaunchCommand, build_command
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.endpoint import Endpoint, base_url
from sparktui.runtime.records.launch_id import ENV as LAUNCH_ID_ENV
from sparktui.runtime.records.launch_id import EXPECTED as LAUNCH_ID_EXPECTED
from sparktui.runtime.records.launch_id import is_launch_id, not_this_launch
from sparktui.runtime.server.hardening import harden_supervisor
from sparktui.runtime.server.logtail import LogTail
from sparktui.runtime.server.preflight import preflight
from sparktui.runtime.server.reaper import Reaper
from sparktui.runtime.server.sweep import set_aside_unreadable, sweep_lost_servers
from sparktui.runtime.watch import FlightHeader, ServerWatch, current_boot_id, flight_dir

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.metrics import MetricsSnapshot
    from sparktui.core.profiles import Profile
    from sparktui.runtime.guard.guard import Decision

# The loop sleeps in poll() until something happens: a log write (inotify), a request on the
# socket or a signal (the wake pipe), vLLM's exit (its pidfd), or the next timer below.
STARTUP_TICK_S = 0.25  # while starting: members appear, /health is asked every HEALTH_EVERY_S
HEALTH_EVERY_S = 0.5
REST_TICK_S = 5.0  # once ready: the guard's line in the state (warnings and trips wake the loop at once)
REST_TRACK_S = 10.0  # once ready: new members (a /proc scan only if some process was created meanwhile)
LOG_FALLBACK_S = 0.25  # how often the log is read where inotify is missing
# /metrics as often as someone needs it: every METRICS_EVERY_S while a client asked within
# METRICS_WANTED_S (`status`, the TUI), while the server is busy (requests running or waiting, or
# log lines other than probes within METRICS_BUSY_S); otherwise the gap doubles up to
# METRICS_IDLE_MAX_S, since each scrape is also an access-log line in the server's log.
METRICS_EVERY_S = 2.0
METRICS_WANTED_S = 30.0
METRICS_BUSY_S = 30.0
METRICS_IDLE_MAX_S = 120.0
METRICS_WAIT_S = 2.0  # a status request waits this long at most for a fresh scrape
PROBE_LINES = ('"GET /metrics', '"GET /health')  # access-log lines of probes: not activity
# The guard's line in the state file: rewritten when MemAvailable moved this much, or after this long.
GUARD_NEWS_GIB = 0.1
GUARD_REFRESH_S = 10.0
RECENT_EVENTS = 50
BEAT_EVERY_S = 0.25  # the guard's heartbeat (state.beat_path): often enough to see it stall within a second
GUARD_EXIT = 97  # like `sparktui guard`: the memory guard stopped the server
SOCKET_BACKLOG = 1024  # a burst of clients (panels, scripts, a cluster's head) waits in the queue, not refused
# ---------------------------------------------------------------- serve config with CLI overrides


# ---------------------------------------------------------------- preflight


# ---------------------------------------------------------------- the supervisor


def _event_dict(event: vllm_log.Event) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": vllm_log.event_kind(event), "t": time.time()}
    out.update(dataclasses.asdict(event))
    return out


class Supervisor:
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
        self.lines = GuardLines.from_settings(profile.guard)
        self.grace_s = self.lines.grace_s  # SIGTERM → SIGKILL, for a stop as for a guard trip
        self.guard: Guard | None = None
        self.reservation: pool.Reservation | None = None  # set by preflight in run()
        self.tripped = threading.Event()
        self.trip_report: TripReport | None = None
        self.port = self.serve.port
        self.state_file = st.state_path(self.port)
        self.socket_file = st.socket_address(self.port)
        self.summary = vllm_log.LogSummary()
        self.events: collections.deque[pr.EventRecord] = collections.deque(maxlen=RECENT_EVENTS)
        self._calibration_kept = False  # this launch's start-up figures went to runtime/calibrations.py
        self.requested: str | None = None  # "stop" | "kill", from a signal or the socket
        self.requested_by: str | None = None
        self.finished = threading.Event()
        self.lock = threading.RLock()
        self.tree: proc.ProcessTree | None = None
        self.baseline: leakgate.Baseline | None = None  # the machine before this launch (the leak gate)
        self.command: LaunchCommand | None = None
        self.state: pr.StateRecord | None = None
        self._unsaved = False  # a state write failed (ENOSPC…): retried on the next tick
        self.healthy = False
        # a cluster worker's rank, once its head answers /health (node-watch passes the word on):
        # a headless rank never logs "ready" itself, yet the cluster serves; its loop may rest
        self.cluster_ready = False
        self._last_metrics: MetricsSnapshot | None = None  # the previous /metrics snapshot, for rates
        self.endpoint: Endpoint | None = None
        self.reaper: Reaper | None = None
        self._server: socket.socket | None = None
        self._foreign_clients: set[int | None] = set()
        self._beat_fd: int | None = None  # the guard's heartbeat file (_open_beat)
        self._beat_at = float("-inf")
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # /metrics on demand (all monotonic times, under self.lock)
        self._metrics_wanted_until = 0.0
        self._metrics_at: float | None = None  # the last scrape
        self._metrics_next = 0.0
        self._metrics_gap = METRICS_EVERY_S
        self._metrics_done = threading.Condition(self.lock)
        self._metrics_count = 0
        self._last_activity = float("-inf")  # the last log line that was load, not a probe
        self.wakes: collections.Counter[str] = collections.Counter()  # why the loop woke
        self.link = cluster_link.link_for(
            profile, self.serve, self._wake, launch_id
        )  # one node of a [cluster]: the others
        self.watch = ServerWatch(
            profile.watch,
            url=base_url(self.serve.host, self.port),
            api_key=self.serve.api_key,
            model=self.serve.served_model_name or self.serve.model,
            say=self._watch_said,
        )

    # -- state

    @property
    def record(self) -> pr.StateRecord:
        """The state record (set by run() before anything else happens)."""
        assert self.state is not None
        return self.state

    def _add_event(self, data: dict[str, Any]) -> None:
        """One event for the state record's recent events (kind and t, then its own fields)."""
        self.events.append(pr.EventRecord.model_validate(data))

    def _save(self, **changes: object) -> bool:
        """Record the state; True when it reached the disk. A failed write (a full disk, the state
        dir deleted) is reported once and retried on the next tick: the guard never waits on it."""
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
            state.summary = pr.LogSummaryRecord.model_validate(self.summary.to_dict())
            state.watch = pr.WatchRecord.model_validate(self.watch.to_state())
            state.events = list(self.events)
            try:
                self.state_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                st.write_state(self.state_file, state)
            except OSError as exc:
                if not self._unsaved:
                    self._say(f"warning: cannot write the state file {self.state_file}: {exc}; retrying")
                self._unsaved = True
                return False
            if self._unsaved:
                self._say(f"the state file {self.state_file} is written again")
            self._unsaved = False
            return True

    def _initial_state(self, log_path: Path, warnings: list[str], fit: dict[str, Any] | None) -> pr.StateRecord:
        me = proc.read_stat(os.getpid())
        return pr.StateRecord(
            status="starting",
            phase="launching",
            profile=self.profile.name,
            profile_path=str(self.profile.path) if self.profile.path else None,
            model=self.serve.model,
            host=self.serve.host,
            port=self.port,
            url=f"http://{self.serve.host}:{self.port}",
            log_path=str(log_path),
            socket="@" + self.socket_file[1:],
            detached=self.detached,
            launch_id=self.launch_id,
            supervisor=pr.ProcessRef(pid=os.getpid(), start_time=me.start_time if me else 0),
            started_at=time.time(),
            preflight=pr.PreflightRecord(warnings=warnings, fit=fit),
            guard=pr.GuardRecord(
                armed=self.profile.guard.armed is not False,
                state="starting",
                lines=pr.GuardLinesRecord.model_validate(dataclasses.asdict(self.lines)),
            ),
        )

    # -- signals and commands

    def request(self, what: str, by: str) -> None:
        with self.lock:
            if self.requested != "kill":  # kill wins over stop
                self.requested, self.requested_by = what, by
        self._wake()

    def _wake(self) -> None:
        """Wake the loop from its poll() (another thread, or a signal handler: os.write takes no lock)."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # full (it is awake already) or closed (it has finished)
            pass

    def _want_metrics(self) -> None:
        """A client reads the state: scrape /metrics every METRICS_EVERY_S for METRICS_WANTED_S, and
        give this one a scrape at most METRICS_EVERY_S old (waiting up to METRICS_WAIT_S for it)."""
        with self.lock:
            now = time.monotonic()
            self._metrics_wanted_until = now + METRICS_WANTED_S
            self._metrics_gap = METRICS_EVERY_S
            if not self.healthy:
                return
            if self._metrics_at is not None and now - self._metrics_at < METRICS_EVERY_S:
                self._metrics_next = min(self._metrics_next, self._metrics_at + METRICS_EVERY_S)
                return
            self._metrics_next = now
            seen = self._metrics_count
            self._wake()
            self._metrics_done.wait_for(lambda: self._metrics_count != seen, METRICS_WAIT_S)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.request("stop", signal.Signals(signum).name)

    def claim_port(self) -> None:
        """One launch per port: bind the port's command socket first of all (before preflight).

        It is a Linux abstract socket named by user and port (state.socket_address): binding it is
        atomic (a second launch gets EADDRINUSE and stops before touching anything), it needs no
        file (the supervisor stays reachable with its state dir deleted), and it vanishes with
        the process. Only this user's processes are answered (SO_PEERCRED, in _handle)."""
        names = [st.socket_address(self.port)] + [
            st.alternate_address(self.port, n) for n in range(1, st.ALTERNATE_NAMES + 1)
        ]
        for name in names:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                server.bind(name)
                break
            except OSError as exc:
                server.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                holder = _holder_uid(name)
                if holder is None or st.trusted_uid(holder):
                    raise UserError(
                        f"--port {self.port}: another sparktui supervisor already holds this port (a server runs "
                        f"or is starting there); see `sparktui status --port {self.port}`, stop it with "
                        f"`sparktui stop --port {self.port}`, or choose another --port"
                    ) from None
                self._say(
                    f"warning: user id {holder} holds this port's supervisor socket name (not a supervisor of "
                    "yours: ignored); using the next name"
                )
        else:
            raise UserError(
                f"--port {self.port}: other users hold all {len(names)} of this port's supervisor socket names; "
                "choose another --port (and find who squats them: `ss -xlp | grep sparktui`)"
            )
        server.listen(SOCKET_BACKLOG)
        self._server = server
        self.socket_file = name
        st.HELD_HERE.add(self.port)  # its own preflight must not ask it (nothing answers until _serve_socket)

    def _serve_socket(self) -> None:
        if self._server is None:
            self.claim_port()
        threading.Thread(target=self._accept, name="sparktui-socket", daemon=True).start()

    def _accept(self) -> None:
        server = self._server
        assert server is not None  # bound by _serve_socket before this thread starts
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            uid = st.peer_uid(conn)
            if not st.trusted_uid(uid):
                if uid not in self._foreign_clients:  # an abstract socket has no file mode: refuse other users here
                    self._foreign_clients.add(uid)
                    self._say(
                        f"warning: ignored a connection from user id {uid} (only your user and root are answered)"
                    )
                return
            try:
                conn.settimeout(5)
                data = b""
                while not data.endswith(b"\n") and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                reply = self.answer(pr.parse_request(data))
            except UserError as exc:  # ProtocolError, or guard lines out of order
                reply = pr.Reply(ok=False, error=str(exc), state=self.snapshot())
            except (OSError, ValueError) as exc:
                reply = pr.Reply(ok=False, error=str(exc))
            except Exception as exc:  # a crafted message must get an answer, never a traceback
                self._say(f"warning: a request failed: {type(exc).__name__}: {exc}"[:300])
                reply = pr.Reply(ok=False, error=f"the request failed: {type(exc).__name__}: {exc}"[:1000])
            try:
                conn.sendall(reply.to_line())
            except OSError:
                pass

    def answer(self, req: pr.AnyRequest) -> pr.Reply:
        """Carry out one socket request; the reply carries the state afterwards."""
        if isinstance(req, pr.StopRequest | pr.KillRequest | pr.ClusterReadyRequest) and req.only_id not in (
            None,
            self.launch_id,
        ):
            assert req.only_id is not None
            why = not_this_launch(self.port, os.getpid(), self.launch_id, req.only_id)
            return pr.Reply(ok=False, error=why, state=self.snapshot())
        if isinstance(req, pr.ClusterReadyRequest):
            if self.link is None or not self.link.rank:
                return pr.Reply(ok=False, error="not a cluster worker's rank", state=self.snapshot())
            with self.lock:
                self.cluster_ready = True
            self._wake()
        elif isinstance(req, pr.StatusRequest):
            if req.metrics:
                self._want_metrics()
        elif isinstance(req, pr.StopRequest | pr.KillRequest):
            self.request(req.cmd, "socket")
            self.finished.wait(req.wait)
        elif isinstance(req, pr.GuardRequest):
            if self.guard is None:
                return pr.Reply(ok=False, error="the guard is not running yet; try again", state=self.snapshot())
            notes = self.change_guard(req)
            return pr.Reply(ok=True, state=self.snapshot(), notes=notes)
        return pr.Reply(ok=True, state=self.snapshot())

    def change_guard(self, req: pr.GuardRequest) -> list[str]:
        """Move the lines and/or arm or disarm, live. The lines given win; a current line in their
        way is turned off (the notes say which); lines given out of order raise UserError."""
        assert self.guard is not None and self.state is not None
        notes: list[str] = []
        if req.lines is not None:
            lines, notes = resolve_lines(req.lines.given(), self.lines)
            self.guard.set_lines(lines)
            self.lines = lines
            with self.lock:
                self.record.guard.lines = pr.GuardLinesRecord.model_validate(dataclasses.asdict(lines))
            self._add_event({"kind": "GuardLines", "t": time.time(), **req.lines.given()})
        if req.kernel is not None:
            self.guard.set_kernel(req.kernel)
            with self.lock:  # the reply shows it at once (the loop fills in the rest)
                kernel = self.record.guard.kernel or pr.KernelRecord()
                kernel.mode = req.kernel
                self.record.guard.kernel = kernel
            self._add_event({"kind": "GuardKernel", "t": time.time(), "mode": req.kernel})
        if req.armed is not None:
            self.guard.arm() if req.armed else self.guard.disarm()
            self._add_event({"kind": "GuardArmed" if req.armed else "GuardDisarmed", "t": time.time()})
        self._tell_reaper_guard()
        with self.lock:
            self.record.guard.armed = self.guard.armed
            if self.record.guard.state != "tripped":
                self.record.guard.state = "watching" if self.guard.armed else "disarmed"
        for note in notes:
            self._say(f"guard: {note}")
        self._save()
        return notes

    def snapshot(self) -> pr.StateRecord | None:
        with self.lock:
            if self.state is None:
                return None
            live = self.record.model_copy(deep=True)
            guard = self.guard
            if guard is not None and guard.sampled_at is not None and live.running and guard.running:
                planned = guard.last.next_interval if guard.last is not None else 0.0
                live.guard.set_age(guard.clock() - guard.sampled_at, planned)
            # Only in live replies (never written to the file): what the loop has been doing.
            live.loop = pr.LoopStats(wakes=dict(self.wakes), metrics_scrapes=self._metrics_count)
            return live

    # -- reaper

    def _start_reaper(self) -> Reaper:
        self.reaper = Reaper(self.state_file, beat_fd=self._beat_fd)
        return self.reaper

    def _tell_reaper_guard(self, watching: bool = True) -> None:
        """The reaper acts on the kill line itself when the guard's heartbeat stops (a frozen or
        starved supervisor): it is told the line, and that the guard stands down at the end."""
        if self.reaper is None:
            return
        guard = self.guard
        kill = self.lines.bytes("kill")
        armed = watching and guard is not None and guard.armed and kill is not None
        self.reaper.tell_guard(kill if armed else None)

    def _dismiss_reaper(self) -> None:
        if self.reaper is not None:
            # a final record the disk refused (full, read-only): the reaper writes it once there is room
            unsaved = self.record.to_json() if self._unsaved and self.state is not None else None
            self.reaper.dismiss(unsaved)

    # -- main loop

    def run(self) -> int:
        """Launch and supervise until vLLM exits or is stopped; returns the exit status to use."""
        self.claim_port()  # first: a second launch on this port stops here, before it touches anything
        exporter = self._start_exporter()
        try:
            return self._run()
        finally:
            if exporter is not None:
                exporter.shutdown()
            st.HELD_HERE.discard(self.port)
            if self._server is not None:
                self._server.close()

    def _start_exporter(self) -> Any:
        """[metrics] listen: serve sparktui's figures to Prometheus while this server runs (a port
        that cannot be had is said, never a reason not to launch)."""
        if self.profile.metrics_listen is None:
            return None
        from sparktui.runtime import exporter

        try:
            server = exporter.serve(self.profile.metrics_listen)
        except UserError as exc:
            self._say(f"warning: [metrics] {exc}; no /metrics for this server")
            return None
        self._say(f"[metrics] sparktui's figures on http://{self.profile.metrics_listen}/metrics")
        return server

    def _run(self) -> int:
        st.writable_state_dir()  # a read-only or full state dir: refused here, naming it
        set_aside_unreadable(self.port)
        sweep_lost_servers()
        pre = preflight(self.profile, self.serve, force=self.force, evict=True)
        for note in pre.notes:
            self._say(note)
        for warning in pre.warnings:
            self._say(f"warning: {warning}")
        self.command = build_command(self.profile, self.serve)
        if self.link is not None and self.link.cluster.backend == "ray":
            from sparktui.runtime.cluster import ray_backend as ray_cluster

            ray_cluster.remove_temp_dir(self.port)  # a lost run's Ray sessions (ours: this state dir and port)
            self.command = ray_cluster.node_command(self.profile, self.serve, self.command, self.link.rank)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = st.state_dir() / "logs" / f"{st.safe_name(self.profile.name)}-{self.port}-{stamp}.log"
        self.state = self._initial_state(log_path, pre.warnings, pre.fit)
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
            self._say(harden_supervisor().summary())
        try:
            if not self._save():  # nothing is started that its record could not name
                raise UserError(
                    f"state dir {st.state_dir()}: cannot write the state file {self.state_file} (full or "
                    "read-only); free some space there and launch again"
                )
            self._open_beat()
            reaper = self._start_reaper()
            self.record.reaper = pr.ProcessRef(pid=reaper.pid, start_time=proc.start_time_of(reaper.pid))
            env = {**os.environ, **self.command.env}
            self._start_flight_recorder()
            self.baseline = leakgate.take_baseline()
            self.tree = proc.spawn(self.command.argv, log_path, env)
            reaper.tell(self.tree.to_record())
            self._start_guard()
            self._serve_socket()  # before the save that records the tree: launch() returns on it
            self._save(status="starting", phase=self.summary.phase)
            self._say(f"vLLM pid {self.tree.pid} on {self.record.url}, log {log_path}")
            with Endpoint(base_url(self.serve.host, self.port), api_key=self.serve.api_key) as self.endpoint:
                while True:
                    code = self._loop(log_path)
                    restart = self._restart_log_path(code)
                    if restart is None:
                        return code
                    log_path = restart
                    self._respawn(log_path, env)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._close()
            wake_w, self._wake_w = self._wake_w, -1  # a late _wake() now fails harmlessly (EBADF)
            os.close(wake_w)
            os.close(self._wake_r)

    def _loop(self, log_path: Path) -> int:
        tree = self.tree
        assert tree is not None  # set by run() before the loop starts
        follower = LogTail(log_path, keep=1)
        poller = select.poll()
        log_fd = follower.fileno()  # armed before the first read: no write goes unnoticed
        if log_fd is not None:
            poller.register(log_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        root_fd = _pidfd(tree.pid)  # readable the moment vLLM's API server exits
        if root_fd is not None:
            poller.register(root_fd, select.POLLIN)
        try:
            how = self._watch(follower, poller, log_fd, root_fd)
        finally:
            if root_fd is not None:
                os.close(root_fd)
        return self._finish(how, follower)

    def _watch(self, follower: LogTail, poller: select.poll, log_fd: int | None, root_fd: int | None) -> str:
        """Until vLLM ends or is to be stopped; how ("guard", "stop", "kill", "exited")."""
        tree, endpoint, guard = self.tree, self.endpoint, self.guard
        assert tree is not None and endpoint is not None and guard is not None  # set by run() before the loop starts
        generation = tree.generation
        next_track = next_health = 0.0
        resting = False  # served (/health answers here, or at a worker's head): the loop's resting pace
        while True:
            lines = follower.poll()
            changed = self._ingest(lines)
            behind = bool(lines) and follower.pending()  # a flood: read on before sleeping
            now = time.monotonic()
            if self.cluster_ready and not resting:
                resting = changed = True
                self._rest_as_worker()
            resting = resting or self.healthy
            if now >= next_track:  # in a cgroup: its cgroup.procs; otherwise /proc, scanned at rest only after a fork
                tree.track() if resting or tree.scope is not None else tree.refresh()
                next_track = now + (REST_TRACK_S if resting else STARTUP_TICK_S)
            if tree.generation != generation:
                generation, changed = tree.generation, True
            if self.summary.ready and not self.healthy and now >= next_health:
                next_health = now + HEALTH_EVERY_S
                if endpoint.health().ok:
                    # Lines written before /health answered are start-up, not load: read them
                    # while still unhealthy, or a late start-up line would count as activity.
                    while batch := follower.poll():
                        changed |= self._ingest(batch)
                    tree.refresh()  # the state that says "running" names every process
                    with self.lock:
                        self.healthy, changed = True, True
                        self._metrics_next = now  # the first scrape at once
                    self.record.status, self.record.ready_at = "running", time.time()
                    self._say(f"ready: {self.record.url} answers /health")
                    if self.link is not None:
                        self.link.announce_ready()  # the workers' headless ranks may rest now
            if self.link is not None and self.link.due(now):
                changed |= self._look_at_cluster(now)
            if self.healthy and now >= self._metrics_next:
                self._poll_metrics()
                changed = True
            if self.tripped.is_set():
                return "guard"
            if self.requested:
                return self.requested
            if self.watch.restart_wanted.is_set():
                return "wedge"
            if tree.returncode() is not None:
                last = guard.last  # set before the guard signals: its trip may be what ended vLLM
                return "guard" if last is not None and last.action.value in ("term", "kill") else "exited"
            changed |= self._guard_status()
            if changed or self._unsaved:
                self._save()
            timers = [next_track, now + (REST_TICK_S if resting else STARTUP_TICK_S)]
            if self.summary.ready and not self.healthy:
                timers.append(next_health)
            if self.healthy:
                timers.append(self._metrics_next)
            if self.link is not None:
                timers.append(self.link.next_at)
            if log_fd is None:
                timers.append(now + LOG_FALLBACK_S)
            timeout = 0.0 if behind else max(0.0, min(timers) - time.monotonic())
            self._sleep(poller, follower, log_fd, root_fd, timeout)

    def _rest_as_worker(self) -> None:
        """The head serves: this headless rank is loaded too, so its loop and guard take the
        resting pace (the guard still samples fast near a line or in a fast fall)."""
        self._say("ready: the head answers /health; resting")
        self.record.phase = "ready"
        if self.guard is not None:
            self.guard.set_phase("ready")

    def _look_at_cluster(self, now: float) -> bool:
        """The rest of the cluster: a node that ended stops this one; a headless rank (no /health)
        is running once it reached its head."""
        assert self.link is not None
        up, why = self.link.check(now)
        if why and not self.requested:
            self._say(f"stopping: {why}")
            self.requested, self.requested_by = "stop", why
            return True
        if up and self.link.rank and self.record.status == "starting":
            self.record.status, self.record.ready_at = "running", time.time()
            self._say(f"ready: rank {self.link.rank} joined its head")
            return True
        return False

    def _sleep(
        self, poller: select.poll, follower: LogTail, log_fd: int | None, root_fd: int | None, timeout: float
    ) -> None:
        ready = poller.poll(timeout * 1000)
        if not ready:
            self.wakes["timer"] += 1
        for fd, _ in ready:
            if fd == self._wake_r:
                self.wakes["request"] += 1
                try:
                    while os.read(self._wake_r, 256):
                        pass
                except BlockingIOError:
                    pass
            elif fd == log_fd:
                self.wakes["log"] += 1
                follower.consume()
            elif fd == root_fd:
                self.wakes["exit"] += 1
                poller.unregister(fd)  # stays readable: returncode() sees it from here on

    def _ingest(self, lines: list[str]) -> bool:
        changed = False
        for line in lines:
            self.watch.on_line(line)
            if self.healthy and not any(probe in line for probe in PROBE_LINES):
                self._note_activity()  # requests, stats: start-up lines are not load
            for event in self.summary.feed(line):
                if isinstance(event, vllm_log.PhaseChanged):
                    changed = True
                    self._say(f"phase: {event.phase}")
                    if self.guard is not None and not self.cluster_ready:
                        self.guard.set_phase(event.phase)
                    continue
                if isinstance(event, vllm_log.KVCacheSize):
                    self._say(f"{event.device} KV cache: {event.tokens:,} tokens")
                    self._keep_calibration()
                self._add_event(_event_dict(event))
                changed = True
        if changed:
            self.record.phase = "ready" if self.cluster_ready else self.summary.phase
        return changed

    def _keep_calibration(self) -> None:
        """Keep vLLM's own figures of this start-up for the next fit of the same key
        (runtime/calibrations.py), once per launch; a failure here never touches the server."""
        if self._calibration_kept:
            return
        self._calibration_kept = True
        from sparktui.runtime import calibrations

        try:
            mem = read_memory(psi=False)
            text = Path(self.record.log_path or "").read_text(errors="replace")
            kept = calibrations.record_launch(
                self.profile, self.serve, text, self.record.log_path or "", mem.mem_total, mem.mem_available
            )
            self._say(f"start-up figures kept for the next fit: {kept.describe()}")
        except (UserError, OSError, ValueError) as exc:
            self._say(f"start-up figures not kept: {exc}")

    def _say(self, text: str) -> None:
        """One line of progress on stderr (the terminal, or the journal under systemd)."""
        try:
            print(f"sparktui: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass  # a full disk under the detached supervisor's log: the guard matters, not the words

    def _note_activity(self) -> None:
        """The server did something (a log line that is not a probe's): scrape at the busy pace."""
        with self.lock:
            self._last_activity = time.monotonic()
            self._metrics_gap = METRICS_EVERY_S
            if self._metrics_at is not None:
                self._metrics_next = min(self._metrics_next, self._metrics_at + METRICS_EVERY_S)

    def _poll_metrics(self) -> None:
        endpoint = self.endpoint
        assert endpoint is not None  # set by run() before the loop starts
        from sparktui.core import metrics as m

        fetched = endpoint.metrics()
        busy = False
        if fetched.snapshot is None:
            metrics: dict[str, Any] = {"error": fetched.error, "at": time.time()}
        else:
            snapshot = fetched.snapshot
            if self.watch.on_metrics(snapshot):
                self._add_event({"kind": "Wedge", "t": time.time(), **self.watch.to_state()["wedge"]})
            if self.guard is not None and self.summary.phase == "ready":
                self.guard.set_phase("prefill" if self.watch.prefilling else "ready")
            if self.guard is not None:
                self.guard.set_stalled(self.watch.stalled)
            stats = m.derive(snapshot, self._last_metrics)
            self._last_metrics = snapshot
            busy = bool(stats.running or stats.waiting)
            metrics = {
                **stats.to_dict(),
                "prompt_tokens_total": snapshot.total(m.PROMPT_TOKENS),
                "generation_tokens_total": snapshot.total(m.GENERATION_TOKENS),
                "at": time.time(),
            }
        with self.lock:
            self.record.metrics = pr.MetricsRecord.model_validate(metrics)
            now = time.monotonic()
            self._metrics_at = now
            wanted = now < self._metrics_wanted_until or now - self._last_activity < METRICS_BUSY_S or busy
            if wanted:
                self._metrics_gap = METRICS_EVERY_S
            else:  # nobody reads them and nothing happens: back off
                self._metrics_gap = min(self._metrics_gap * 2, METRICS_IDLE_MAX_S)
            self._metrics_next = now + self._metrics_gap
            self._metrics_count += 1
            self._metrics_done.notify_all()

    def _finish(self, how: str, follower: LogTail) -> int:
        tree, guard = self.tree, self.guard
        assert tree is not None and guard is not None  # set by run() before the loop starts
        self._guard_status()  # a trip can end the loop before the guard's line (kernel tripwire…) was recorded
        self._tell_reaper_guard(watching=False)  # the guard's heartbeat stops here: no stand-in wanted
        self._save(status="stopping")
        report = None
        if how == "guard":
            guard.join(self.grace_s + 30)  # the guard is stopping the tree; wait for its report
            self.record.trip = pr.TripRecord.model_validate(self.trip_report.to_dict()) if self.trip_report else None
            if self.trip_report:
                self._say(self.trip_report.summary())
        else:
            guard.close()
        if how == "kill":
            report = self._kill()
        elif how in ("stop", "wedge"):
            report = self._stop()
        if self.link is not None:
            for note in self.link.close(how):  # the head's end is the whole cluster's
                self._say(f"warning: {note}")
        returncode = tree.returncode()
        if not tree.is_gone():  # vLLM exited by itself but left children (EngineCore)
            report = tree.kill()
        if self.link is not None and self.link.cluster.backend == "ray":
            from sparktui.runtime.cluster import ray_backend as ray_cluster

            ray_cluster.remove_temp_dir(self.port, self.link.ray_dir)  # Ray's sessions and sockets: the tree is gone
        self._ingest(follower.drain())
        follower.close()
        if how == "exited":
            for event in self.summary.finish(returncode):
                if not isinstance(event, vllm_log.PhaseChanged):
                    self._add_event(_event_dict(event))
        reason = {"stop": "stopped", "kill": "killed", "guard": "guard", "wedge": "wedged"}.get(
            how, "failed" if self.summary.failure else "exited"
        )
        phase = self.summary.phase if how == "exited" else "stopped"
        self._save(
            status="exited",
            phase=phase,
            exit=pr.ExitRecord(
                reason=reason,
                by=self.requested_by,
                returncode=returncode,
                stop=report.to_dict() if report else None,
                failure=self.summary.failure.to_dict() if self.summary.failure else None,
            ),
        )
        if how == "exited" and self.summary.failure:
            f = self.summary.failure
            self._say(f"vLLM failed ({f.kind}): {f.message}\n  hint: {f.hint}")
        self._check_leak()
        if how == "guard":
            return GUARD_EXIT
        if how == "wedge":
            return 1
        return 0 if how in ("stop", "kill") or returncode == 0 else 1

    # -- leak gate

    def _check_leak(self) -> None:
        """The tree is gone: wait (up to [guard] leak-wait-s) for its memory to come back, and record
        in the end record how much did not and what holds it (runtime/guard/leakgate.py)."""
        tree, baseline, exit_ = self.tree, self.baseline, self.record.exit
        if tree is None or baseline is None or exit_ is None:
            return
        ran = leakgate.with_tree(
            baseline, [(i.pid, i.start_time) for i in tree.recorded], tree.to_record().get("cgroup")
        )
        wait_s = self.profile.guard.leak_wait_s
        back = leakgate.wait_for_memory_back(ran, MEMORY_BACK_TIMEOUT_S if wait_s is None else wait_s)
        record = back.record(ran)
        with self.lock:
            exit_.leak = record
        if not back.back:
            self._say(f"warning: leak gate: {record.summary()}")
            self._add_event({"kind": "Leak", "t": time.time(), "leaked_bytes": record.leaked_bytes})
        self._save()

    # -- guard

    def _start_guard(self) -> None:
        # Several servers on one machine: stop them in the declared order, only as many as must go.
        order = None if self.reservation is None else StopOrder(self.reservation, self.grace_s)
        self.guard = Guard(
            self.tree,
            self.lines,
            armed=self.profile.guard.armed is not False,
            track_interval=None,  # the loop records the tree's members
            on_warn=self._on_warn,
            on_trip=self._on_trip,
            on_report=self._on_report,
            on_sample=self._beat,
            defer=None if order is None else self._deferral(order),
            kernel=self.profile.guard.kernel or DEFAULT_KERNEL_MODE,
            on_kernel=self._on_kernel,
        )
        self.guard.start()
        self._tell_reaper_guard()

    def _open_beat(self) -> None:
        """The guard's heartbeat file (state.beat_path), 0600; its fd goes to the reaper too, so a
        deleted state dir does not blind it."""
        try:
            self._beat_fd = os.open(st.beat_path(self.port), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            self._say(f"warning: no guard heartbeat file ({exc}); `status` cannot tell a frozen guard")
            return
        self._beat()

    def _beat(self) -> None:
        """After each guard sample: the heartbeat, at most every BEAT_EVERY_S (one pwrite)."""
        now = st.boottime()
        if self._beat_fd is None or now - self._beat_at < BEAT_EVERY_S:
            return
        self._beat_at = now
        # with the gap to the next heartbeat it plans: a guard that samples seldom at rest is not
        # taken for a stopped one (the next write is at most BEAT_EVERY_S after a sample)
        last = self.guard.last if self.guard is not None else None
        plan = max(BEAT_EVERY_S, last.next_interval if last is not None else 0.0)
        try:
            os.pwrite(self._beat_fd, f"{now:.3f} {plan:.3f}\n".encode().ljust(32), 0)
        except OSError:
            pass  # a full disk cannot refuse an overwrite in place of a tmpfs page; others: no heartbeat

    def _close_beat(self) -> None:
        if self._beat_fd is not None:
            os.close(self._beat_fd)
            self._beat_fd = None
            try:
                st.beat_path(self.port).unlink(missing_ok=True)
            except OSError:
                pass

    def _deferral(self, order: StopOrder) -> Callable[[Decision], str | None]:
        """The stop order, with each new reason to wait recorded once as an event (status shows it)."""
        said: list[str | None] = [None]

        def defer(decision: Decision) -> str | None:
            why = order(decision)
            if why is not None and why != said[0]:
                self._add_event({**_guard_event("GuardDeferred", decision), "why": why})
                self._say(f"guard: {why}")
                self._wake()  # into the state now, as a warning or a trip is: status shows the wait
            said[0] = why
            return why

        return defer

    def _on_warn(self, decision: Decision) -> None:
        self._add_event(_guard_event("GuardWarning", decision))
        self._wake()

    def _on_trip(self, decision: Decision) -> None:
        self._add_event(_guard_event("GuardTrip", decision))
        self.tripped.set()
        self._wake()

    def _on_kernel(self, event: KernelEvent) -> None:
        """An NVRM line the guard recorded (a driver out-of-memory line, or an Xid naming our tree)."""
        self._add_event({"kind": "KernelLine", "t": time.time(), **event.to_dict()})
        what = "the NVIDIA driver ran out of memory" if event.kind == "no_memory" else f"Xid {event.xid}"
        self._say(f"kernel log: {what}: {event.line}")
        self._wake()

    def _on_report(self, report: TripReport) -> None:
        self.trip_report = report

    def _guard_status(self) -> bool:
        """Refresh the guard's line in the state (a few times a second); True when it changed."""
        guard = self.guard
        assert guard is not None  # set by run() before the loop starts
        d = guard.last
        if d is None:
            return False
        now = pr.GuardLast(
            action=d.action.value,
            available_gib=round((d.available or 0) / (1 << 30), 2),
            rate_gib_s=round(-d.rate / (1 << 30), 2),
            interval_s=d.next_interval,
            at=time.time(),
        )
        g = self.record.guard
        g.armed = guard.armed
        g.state = "tripped" if self.tripped.is_set() else ("watching" if guard.armed else "disarmed")
        g.pressure = pr.PressureRecord(
            trigger=guard.pressure.spec()[:-1].decode() if guard.pressure is not None else None,
            wakes=guard.pressure_wakes,
            error=guard.pressure_error,
        )
        access = guard.kernel_access
        kernel = pr.KernelRecord(
            mode=guard.kernel_mode,
            source=access.source if access else None,
            detail=(access.detail if access.source else access.text()) if access else None,
            events=[e.to_dict() for e in guard.kernel_events],
        )
        kernel_news = g.kernel != kernel
        alert_news = g.alert != d.alert  # the pace changes with it: the line is news too
        g.kernel = kernel
        g.alert = d.alert
        last = g.last
        moved = abs(now.available_gib - last.available_gib) if last else 0.0
        if (
            last
            and not alert_news
            and last.action == now.action
            and (moved == 0.0 or (moved < GUARD_NEWS_GIB and now.at - last.at < GUARD_REFRESH_S))
        ):
            return kernel_news  # the file is rewritten for news, not for every sample
        g.last = now
        return True

    def _stop(self) -> proc.StopReport:
        tree, command = self.tree, self.command
        assert tree is not None and command is not None  # set by run() before the loop starts
        if command.stop_argv:
            subprocess.run(command.stop_argv, capture_output=True, timeout=self.grace_s + 20)
        return tree.stop(self.grace_s)

    def _kill(self) -> proc.StopReport:
        tree, command = self.tree, self.command
        assert tree is not None and command is not None  # set by run() before the loop starts
        if command.kill_argv:
            subprocess.run(command.kill_argv, capture_output=True, timeout=20)
        return tree.kill()

    # -- watch: flight recorder, restarts

    def _watch_said(self, text: str) -> None:
        self._say(text)
        with self.lock:
            if self.state is None:
                return
            self._add_event({"kind": "Watch", "t": time.time(), "text": text})
        self._save()
        if self.watch.restart_wanted.is_set():
            self._wake()  # the loop sleeps until an event: a restart is one

    def _start_flight_recorder(self) -> None:
        header = FlightHeader(
            port=self.port,
            profile=self.profile.name,
            model=self.serve.model,
            boot_id=current_boot_id(),
            started_at=self.record.started_at or time.time(),
            supervisor_pid=os.getpid(),
        )

        def context() -> tuple[str, str, list[int]]:
            tree = self.tree
            pids = [] if tree is None else [i.pid for i in tree.recorded]
            return self.summary.phase, self.record.status, pids

        self.watch.start_recording(flight_dir(st.state_dir()), header, context)

    def _restart_log_path(self, code: int) -> Path | None:
        """After the server ended: a new log path when the profile asks for a restart and the
        crash-loop breaker allows one; None to finish."""
        exit_ = self.record.exit
        if exit_ is None or self.requested or exit_.reason in ("stopped", "killed", "guard"):
            return None
        kind = "wedge" if exit_.reason == "wedged" else "crash"
        failure = exit_.failure or {}
        phase = self.summary.reached  # the furthest start-up phase ("ready" once it served)
        detail = (
            (self.watch.to_state()["wedge"].get("evidence") or "wedged")
            if kind == "wedge"
            else str(failure.get("message") or f"exit status {exit_.returncode}")
        )
        verdict = self.watch.may_restart(kind, phase, detail)
        if verdict is None:
            return None
        if not verdict.restart:
            self._say(f"{verdict.reason}:")
            for f in verdict.failures:
                self._say(f"  {f.line()}")
            self._add_event({"kind": "CrashLoop", "t": time.time(), "reason": verdict.reason})
            with self.lock:
                exit_.breaker = self.watch.to_state()["breaker"]
            self._save()
            return None
        if exit_.leak is not None:
            try:  # the same gate as a launch: never restart into memory the last run left held
                leakgate.gate([(self.port, exit_.leak)])
            except UserError as exc:
                self._say(f"not restarting: {exc}")
                self._add_event({"kind": "CrashLoop", "t": time.time(), "reason": f"leak gate: {exc}"})
                with self.lock:
                    exit_.breaker = {"reason": f"leak gate: {exc}", "failures": []}
                self._save()
                return None
        attempt = len(self.watch.restarts)
        self._say(f"restarting after a {kind} in phase {phase} (restart {attempt}): {detail}")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return st.state_dir() / "logs" / f"{st.safe_name(self.profile.name)}-{self.port}-{stamp}-r{attempt}.log"

    def _respawn(self, log_path: Path, env: dict[str, str]) -> None:
        self.summary = vllm_log.LogSummary()
        self.healthy = self.cluster_ready = False
        self._last_metrics = None
        self.tripped.clear()
        self.trip_report = None
        self.watch.reset_for_restart()
        assert self.command is not None  # built by run() before the first launch
        self.baseline = leakgate.take_baseline()
        self.tree = proc.spawn(self.command.argv, log_path, env)
        self._start_guard()
        self._save(status="starting", phase=self.summary.phase, log_path=str(log_path), exit=None, ready_at=None)
        self._say(f"vLLM pid {self.tree.pid} on {self.record.url}, log {log_path}")

    def _close(self) -> None:
        self.watch.close(clean=True)
        if self._server is not None:
            try:
                self._server.close()
            except OSError:
                pass
        self.finished.set()
        time.sleep(0.05)  # let socket handlers waiting on `finished` send their replies
        self._dismiss_reaper()
        self._close_beat()


def _holder_uid(name: str) -> int | None:
    """Who listens on an abstract name we could not bind: their user id (SO_PEERCRED), or None
    when nobody answers (a supervisor between its bind and its listen, or one not listening)."""
    for _ in range(3):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(name)
            except OSError:
                time.sleep(0.05)
                continue
            return st.peer_uid(probe)
    return None


def _pidfd(pid: int) -> int | None:
    """A pidfd (readable once the process exits), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _guard_event(kind: str, decision: Decision) -> dict[str, Any]:
    return {
        "kind": kind,
        "t": time.time(),
        "line": decision.line,
        "reason": decision.reason,
        "available_gib": round((decision.available or 0) / (1 << 30), 3),
        "threshold_gib": round((decision.threshold or 0) / (1 << 30), 3),
    }


# ---------------------------------------------------------------- the API the CLI and TUI use
# (read, attach, stop, kill, set_guard, change_guard: runtime.server.client, imported above)


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

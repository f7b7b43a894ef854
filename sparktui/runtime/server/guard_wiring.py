"""The memory guard, wired into a supervisor: started on its tree, heard, recorded, changed live.

The guard (runtime/guard/guard.py) runs in its own thread; from here it gets the tree, the lines
and the stop order of several servers, and what it says (a warning, a trip, its report) reaches
the state's events and wakes the supervisor's loop at once. After each sample it writes a
heartbeat (state.beat_path) that the reaper watches: when the beat stops (a frozen or starved
supervisor), the reaper acts on the kill line itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparktui.core.guard_lines import resolve_lines
from sparktui.core.kernel_log import DEFAULT_KERNEL_MODE, KernelEvent
from sparktui.runtime.guard.guard import Guard, TripReport
from sparktui.runtime.guard.stop_order import StopOrder
from sparktui.runtime.host.deadline import Deadline
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.beat import beat_line
from sparktui.runtime.server.reaper import late_after

if TYPE_CHECKING:
    from sparktui.core import pool
    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.guard.guard import Decision
    from sparktui.runtime.host import proc
    from sparktui.runtime.server.reaper import Reaper
    from sparktui.runtime.watch import ServerWatch

# The guard's line in the state file: rewritten when MemAvailable moved this much (or the action,
# the alert or the kernel tripwire changed), never because time passed: how fresh the guard is comes
# from its heartbeat (state.beat_path), and a live answer carries the guard's latest sample (line()),
# so a resting server's file stays still while other programs move memory a little.
GUARD_NEWS_GIB = 0.5
# A move of MemAvailable wakes the loop at most this often (memory swinging 0.5 GiB each second would
# otherwise wake it and rewrite the file at the guard's pace); a new action or alert wakes it at once.
NEWS_EVERY_S = 5.0
BEAT_EVERY_S = 0.25  # the guard's heartbeat (state.beat_path): often enough to see it stall within a second


class GuardWiring:
    def __init__(
        self,
        settings: GuardSettings,
        port: int,
        event: Callable[[dict[str, Any]], None],
        *,
        lock: threading.RLock,
        record: Callable[[], pr.StateRecord],
        save: Callable[[], bool],
        reaper: Callable[[], Reaper | None],
        wake: Callable[..., None],
        say: Callable[[str], None],
    ) -> None:
        self.settings, self.port, self.event = settings, port, event
        self._lock, self._record, self._save, self._reaper = lock, record, save, reaper
        self._wake, self._say = wake, say
        self.lines = settings.guard_lines()
        self.grace_s = self.lines.grace_s  # SIGTERM → SIGKILL, for a stop as for a guard trip
        self.guard: Guard | None = None
        self.tripped = threading.Event()
        self.trip_report: TripReport | None = None
        self.beat_fd: int | None = None  # the guard's heartbeat file (open_beat)
        # the reaper's alarm (host/deadline.py), pushed at each heartbeat to when it would be late:
        # the reaper sleeps on it instead of looking at the heartbeat about once a sample
        self.alarm: Deadline | None = None
        self._beat_at = float("-inf")
        # the line status() last judged (action, GiB, alert) and whether the loop was woken for news
        # since: the guard's thread wakes the loop once for news, so it needs no timer to look
        self._shown: tuple[str, float, bool] | None = None
        self._news_told = False
        self._news_at = float("-inf")  # time.monotonic() of the last wake for news
        # the flight recorder sleeps at rest until a guard sample shows memory moving (_settled)
        self.flight: ServerWatch | None = None

    @property
    def armed(self) -> bool:
        """As the profile has it (the guard is never off unless the user turned it off)."""
        return self.settings.armed is not False

    def start(self, tree: proc.ProcessTree, reservation: pool.Reservation | None) -> None:
        """A guard on this tree (a new one for each run of vLLM), told to the reaper."""
        # Several servers on one machine: stop them in the declared order, only as many as must go.
        order = None if reservation is None else StopOrder(reservation, self.grace_s)
        self.guard = Guard(
            tree,
            self.lines,
            armed=self.armed,
            track_interval=None,  # the loop records the tree's members
            on_warn=self._on_warn,
            on_trip=self._on_trip,
            on_report=self._on_report,
            on_sample=self._sampled,
            on_wait=self._settled,
            defer=None if order is None else self._deferral(order),
            kernel=self.settings.kernel or DEFAULT_KERNEL_MODE,
            on_kernel=self._on_kernel,
        )
        self.guard.start()
        self.tell_reaper()

    def restart(self) -> None:
        """A new run of vLLM: the last run's trip is not this one's."""
        self.tripped.clear()
        self.trip_report = None

    def set_phase(self, phase: str) -> None:
        if self.guard is not None:
            self.guard.set_phase(phase)

    def follow_load(self, phase: str, prefilling: bool, stalled: bool) -> None:
        """After a /metrics scrape: a prefill's pace while one runs, and whether the server is stalled."""
        if self.guard is not None and phase == "ready":
            self.guard.set_phase("prefill" if prefilling else "ready")
        if self.guard is not None:
            self.guard.set_stalled(stalled)

    def end(self, tripped: bool) -> None:
        """The loop ended: after a trip, wait for the guard's stop and record its report; else close it."""
        guard = self.guard
        assert guard is not None  # started before the loop
        if tripped:
            guard.join(self.grace_s + 30)  # the guard is stopping the tree; wait for its report
            report = self.trip_report
            self._record().trip = pr.TripRecord.model_validate(report.to_dict()) if report else None
            if report:
                self._say(report.summary())
        else:
            guard.close()

    # -- heartbeat

    def open_beat(self) -> None:
        """The guard's heartbeat file (state.beat_path), 0600; its fd goes to the reaper too, so a
        deleted state dir does not blind it."""
        try:
            self.beat_fd = os.open(st.beat_path(self.port), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            self._say(f"warning: no guard heartbeat file ({exc}); `status` cannot tell a frozen guard")
            return
        try:
            self.alarm = Deadline()
        except OSError:
            self.alarm = None  # no timerfd: the reaper looks at the heartbeat on a timer instead
        self.beat()

    def _sampled(self) -> None:
        """After each guard sample, on its thread, before a trip is acted on: the heartbeat only."""
        self.beat()

    def _settled(self) -> None:
        """Before the guard sleeps, after a sample that did not trip: the loop woken for news, and the
        flight recorder told MemAvailable and the count of memory stalls the kernel reported (at rest a
        move wakes it). Never between a sample and its trip: a thread woken there would contend with
        the kill for the interpreter, and a trip wakes the loop itself (_on_trip, once signalled)."""
        guard = self.guard
        d = guard.last if guard is not None else None
        if d is None or guard is None:
            return
        if self.flight is not None:
            self.flight.note_sample(d.available, guard.pressure_wakes)
        shown = self._shown
        if shown is None or self._news_told:
            return
        action, available_gib, alert = shown
        now = time.monotonic()
        moved = abs(round((d.available or 0) / (1 << 30), 2) - available_gib) >= GUARD_NEWS_GIB
        if d.action.value != action or d.alert != alert or (moved and now - self._news_at >= NEWS_EVERY_S):
            self._news_told, self._news_at = True, now
            self._wake("guard")

    def beat(self) -> None:
        """After each guard sample: the heartbeat, at most every BEAT_EVERY_S (one pwrite)."""
        now = st.boottime()
        if self.beat_fd is None or now - self._beat_at < BEAT_EVERY_S:
            return
        self._beat_at = now
        # with the gap to the next heartbeat it plans: a guard that samples seldom at rest is not
        # taken for a stopped one (the next write is at most BEAT_EVERY_S after a sample)
        last = self.guard.last if self.guard is not None else None
        plan = max(BEAT_EVERY_S, last.next_interval if last is not None else 0.0)
        # the reaper's alarm is pushed before the heartbeat is written, and the heartbeat says so: the
        # reaper sleeps on the alarm only after a heartbeat that says it was pushed
        alarm = False
        if self.alarm is not None:
            try:
                self.alarm.push(late_after(plan))
                alarm = True
            except OSError:
                pass  # not said: the reaper looks at this heartbeat on a timer
        try:
            os.pwrite(self.beat_fd, beat_line(now, plan, alarm), 0)
        except OSError:
            pass  # a full disk cannot refuse an overwrite in place of a tmpfs page; others: no heartbeat

    def close_beat(self) -> None:
        if self.alarm is not None:
            self.alarm.close()
            self.alarm = None
        if self.beat_fd is not None:
            os.close(self.beat_fd)
            self.beat_fd = None
            try:
                st.beat_path(self.port).unlink(missing_ok=True)
            except OSError:
                pass

    def tell_reaper(self, watching: bool = True) -> None:
        """The reaper acts on the kill line itself when the guard's heartbeat stops (a frozen or
        starved supervisor): it is told the line, and that the guard stands down at the end."""
        reaper = self._reaper()
        if reaper is None:
            return
        guard = self.guard
        kill = self.lines.bytes("kill")
        armed = watching and guard is not None and guard.armed and kill is not None
        reaper.tell_guard(kill if armed else None)

    # -- what the guard says

    def _deferral(self, order: StopOrder) -> Callable[[Decision], str | None]:
        """The stop order, with each new reason to wait recorded once as an event (status shows it)."""
        said: list[str | None] = [None]

        def defer(decision: Decision) -> str | None:
            why = order(decision)
            if why is not None and why != said[0]:
                self.event({**_guard_event("GuardDeferred", decision), "why": why})
                self._say(f"guard: {why}")
                self._wake()  # into the state now, as a warning or a trip is: status shows the wait
            said[0] = why
            return why

        return defer

    def _on_warn(self, decision: Decision) -> None:
        self.event(_guard_event("GuardWarning", decision))
        self._wake()

    def _on_trip(self, decision: Decision) -> None:
        self.event(_guard_event("GuardTrip", decision))
        self.tripped.set()
        self._wake()

    def _on_kernel(self, event: KernelEvent) -> None:
        """An NVRM line the guard recorded (a driver out-of-memory line, or an Xid naming our tree)."""
        self.event({"kind": "KernelLine", "t": time.time(), **event.to_dict()})
        what = "the NVIDIA driver ran out of memory" if event.kind == "no_memory" else f"Xid {event.xid}"
        self._say(f"kernel log: {what}: {event.line}")
        self._wake()

    def _on_report(self, report: TripReport) -> None:
        self.trip_report = report

    # -- the record

    def line(self) -> pr.GuardLast | None:
        """The guard's latest sample as the record's line (None before the first)."""
        d = self.guard.last if self.guard is not None else None
        if d is None:
            return None
        return pr.GuardLast(
            action=d.action.value,
            available_gib=round((d.available or 0) / (1 << 30), 2),
            rate_gib_s=round(-d.rate / (1 << 30), 2),
            interval_s=d.next_interval,
            at=time.time(),
        )

    def status(self) -> bool:
        """Refresh the guard's line in the state (the loop, each time it wakes); True when it changed."""
        guard = self.guard
        assert guard is not None  # set by run() before the loop starts
        # cleared before the sample is read: a sample the guard takes meanwhile wakes the loop again
        self._news_told = False
        d, now = guard.last, self.line()
        if d is None or now is None:
            return False
        g = self._record().guard
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
            events=[pr.KernelEventRecord.of(e) for e in guard.kernel_events],
        )
        kernel_news = g.kernel != kernel
        alert_news = g.alert != d.alert  # the pace changes with it: the line is news too
        g.kernel = kernel
        g.alert = d.alert
        last = g.last
        moved = abs(now.available_gib - last.available_gib) if last else 0.0
        if last and not alert_news and last.action == now.action and moved < GUARD_NEWS_GIB:
            self._shown = (last.action, last.available_gib, d.alert)
            return kernel_news  # the file is rewritten for news, not for every sample nor every few seconds
        g.last = now
        self._shown = (now.action, now.available_gib, d.alert)
        return True

    def change(self, req: pr.GuardRequest) -> list[str]:
        """Move the lines and/or arm or disarm, live. The lines given win; a current line in their
        way is turned off (the notes say which); lines given out of order raise UserError."""
        guard = self.guard
        assert guard is not None
        notes: list[str] = []
        if req.lines is not None:
            lines, notes = resolve_lines(req.lines, self.lines)
            guard.set_lines(lines)
            self.lines = lines
            with self._lock:
                self._record().guard.lines = self.lines
            self.event({"kind": "GuardLines", "t": time.time(), **dict(sorted(req.lines.items()))})
        if req.kernel is not None:
            guard.set_kernel(req.kernel)
            with self._lock:  # the reply shows it at once (the loop fills in the rest)
                record = self._record()
                kernel = record.guard.kernel or pr.KernelRecord()
                kernel.mode = req.kernel
                record.guard.kernel = kernel
            self.event({"kind": "GuardKernel", "t": time.time(), "mode": req.kernel})
        if req.armed is not None:
            guard.arm() if req.armed else guard.disarm()
            self.event({"kind": "GuardArmed" if req.armed else "GuardDisarmed", "t": time.time()})
        self.tell_reaper()
        with self._lock:
            record = self._record()
            record.guard.armed = guard.armed
            if record.guard.state != "tripped":
                record.guard.state = "watching" if guard.armed else "disarmed"
        for note in notes:
            self._say(f"guard: {note}")
        self._save()
        return notes


def _guard_event(kind: str, decision: Decision) -> dict[str, Any]:
    return {
        "kind": kind,
        "t": time.time(),
        "line": decision.line,
        "reason": decision.reason,
        "available_gib": round((decision.available or 0) / (1 << 30), 3),
        "threshold_gib": round((decision.threshold or 0) / (1 << 30), 3),
    }

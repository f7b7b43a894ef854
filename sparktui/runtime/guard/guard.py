"""The memory guard: stop a process tree before unified memory runs out and the machine hangs.

Two parts:
- `GuardDecider`: pure. Fed (time, MemAvailable) samples, it answers what to do now (nothing,
  warn, term, kill) and how long to wait before the next sample. No I/O, no clock: tested by
  feeding it numbers.
- `Guard`: the action part. Reads /proc/meminfo at the pace the decider asks for, records the
  tree's descendants, signals the tree (through `sparktui.runtime.host.proc`) and writes a TripReport.

Why the defaults (DGX Spark, GB10: MemTotal 119.6 or 121.7 GiB by the box, shared by CPU and GPU, and
CUDA's total is the same figure; core/machine.py GB10_CUDA_TOTALS):
- Exhausting the pool does not OOM-kill anything: the box hangs. The seed reports it at risk
  below 2-3 GB free (1.9-2.8 GiB). MemAvailable was seen falling 34 -> 12.7 GiB in ~1.5 s
  (~14 GiB/s) during vLLM start-up.
- kill 3.5 GiB: what still gets allocated after the line is crossed is fall rate x (detection
  + signal delivery). Near the lines the guard samples every 2 ms and trips early on a predicted
  crossing, so ~20 ms x 14 GiB/s ≈ 0.3 GiB: the low point stays above ~3 GiB, clear of the
  2-3 GB danger zone. (The kernel's teardown after SIGKILL releases memory; it does not add any.)
- term 6 GiB: a slow creep (KV cache growth, another program, page-cache pressure) gets vLLM's
  clean shutdown; a fast fall goes from 6 to 3.5 GiB in ~0.2 s and is SIGKILLed at once.
- warn 10 GiB: vLLM at gpu_memory_utilization 0.9 leaves 0.1 x 119.6-121.7 ≈ 12 GiB for
  everything else, so below 10 GiB the margin is gone: tell the user.
- grace 5 s: vLLM's own shutdown on SIGTERM takes a few seconds; memory is short meanwhile,
  and the kill line keeps guarding during the grace period.
- pace: every 100 ms (10 Hz) when idle, down to 2 ms when the headroom to the next action line
  would be used up sooner at the faster of 16 GiB/s (beyond the fastest fall seen) or the fall
  being seen. ~10 µs per sample, but each wake-up costs ~0.25 ms of CPU on a busy VM (cold
  caches): 10 Hz at rest is ~0.25% of a core. Between samples, a PSI trigger on
  /proc/pressure/memory wakes the guard when tasks stall on memory.
- the phase sets the slowest pace: 20 ms while vLLM loads weights, profiles, sizes its KV cache,
  captures CUDA graphs or runs a large prefill (where the fast falls happen); at steady state 1 s,
  or 5 s where a PSI trigger is armed (the kernel wakes the guard on a memory stall: below); 100 ms
  otherwise. Whatever the phase, never slower than the headroom allows (the gap to the nearest
  action line at 16 GiB/s), so resting longer only happens far from the lines.
- fall rate: falling faster than 8 GiB/s with the kill line less than 0.5 s away at that rate
  sends SIGTERM before any line is crossed. vLLM's own start-up falls ~14 GiB/s and stops at
  ~14 GiB on a Spark at utilization 0.9: above the 3.5 + 7 GiB this trips at.
- PSI full: when every non-idle task stalled on memory for 30% of the last second, the kernel is
  thrashing to find pages that MemAvailable still counts (it reports the collapse late): SIGTERM.
- No trigger reads MemFree: the page cache it leaves out is reclaimable, and watchdogs keyed to
  it killed healthy servers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from sparktui.core.guard_lines import GuardLines
from sparktui.core.kernel_log import DEFAULT_KERNEL_MODE, KERNEL_MODES, KernelEvent
from sparktui.core.units import GiB
from sparktui.errors import UserError
from sparktui.runtime.guard.kernel_watch import KernelAccess, KernelWatch
from sparktui.runtime.host.memory import PressureTrigger, PsiTrigger, open_pressure_trigger

MIN_INTERVAL = 0.002  # fastest pace, when close to a line or falling fast
MAX_INTERVAL = 0.1  # slowest pace (10 Hz), when idle with lots of headroom
WORST_RATE = 16 * GiB  # assumed possible fall (B/s) when choosing the pace: above the 14 GiB/s seen
PLAUSIBLE_RATE = 64 * GiB  # a drop faster than this is held for one confirming sample (noise)
WARN_HYSTERESIS = 1 * GiB  # warn again only after climbing this far back above the warn line
RATE_WINDOW = 0.25  # seconds of samples the fall rate is measured over
PSI_WINDOW = 1.0  # seconds the PSI full share is measured over
PSI_EVERY = 0.05  # read /proc/pressure/memory at most this often (~25 µs a read)
BUSY_PHASES = ("loading_weights", "profiling", "kv_cache", "cuda_graphs", "prefill")
BUSY_INTERVAL = 0.02  # slowest pace in a busy phase
# Slowest pace at steady state ("ready", no large prefill). Never slower than the headroom allows
# (_interval: the gap to the nearest line at WORST_RATE): far from the lines a sample a second is
# enough (issue 25: the supervisor at rest costs ≤ 0.1% of a core). Where the kernel wakes the guard
# on a memory stall (an armed PSI trigger), the PSI-full line needs no timer, and the pace rests
# longer: STEADY_EVENT_INTERVAL, still never slower than the headroom allows. After the trigger
# fires the guard samples every PSI_EVERY for PSI_WINDOW, so the stall's share is judged over a
# full window of dense samples, as at the 1 s pace.
STEADY_INTERVAL = 1.0
STEADY_EVENT_INTERVAL = 5.0
# The kernel tripwire (kernel_watch.py; modes in core/kernel_log.py). The host freezes ~5 s after a
# burst of NV_ERR_NO_MEMORY (GB10), so its stop is SIGTERM with a short grace, then SIGKILL.
KERNEL_GRACE_S = 0.5
KERNEL_EVENTS_KEPT = 20
# An engine stall (/metrics: prefill and decode frozen with requests running) together with a fall
# of MemAvailable is how a driver failure looks from outside before the host freezes: the guard
# then samples at ALERT_INTERVAL at most, trips on half the fall rate looking twice as far ahead,
# and gives SIGTERM ALERT_GRACE_S.
ALERT_FALL = int(0.5 * GiB)  # over the last ALERT_WINDOW_S
ALERT_WINDOW_S = 10.0  # a few /metrics scrapes: the stall is seen every 2 s at best
ALERT_RECORD_S = 0.25  # the coarse record alert judges the fall over: its own pace, not the steady one
ALERT_INTERVAL = 0.01
ALERT_GRACE_S = 1.0
# Between samples the kernel wakes the guard when tasks stall on memory (PSI) for 15% of a second
# (unprivileged, or where the kernel refuses a 1 s window even to root: 300 ms of 2 s, the same share).
PRESSURE_TRIGGER = PsiTrigger("some", 150_000, 1_000_000)
DEFAULT_LINES = GuardLines()  # frozen: one default shared by every guard


class GuardAction(StrEnum):
    NONE = "none"
    WARN = "warn"
    TERM = "term"
    KILL = "kill"


@dataclass(frozen=True)
class Decision:
    action: GuardAction
    next_interval: float  # seconds until the next sample
    line: str | None = None  # "warn" | "term" | "kill"
    reason: str | None = (
        None  # "below" | "predicted" | "fall rate" | "psi full" | "… kill line during grace" | "grace expired"
    )
    threshold: int | None = None  # bytes
    available: int | None = None  # bytes, the sample that decided
    rate: float = 0.0  # bytes/s, negative when falling
    held: bool = False  # the sample looked like noise: held back until the next one confirms it
    psi_full_pct: float | None = None  # share of the last second all tasks stalled on memory
    alert: bool = False  # decided on alert (engine stall + fall): the pace and patience of GuardDecider.alert


class GuardDecider:
    """Pure decision part. States: watching -> terminating (SIGTERM sent) -> killing."""

    def __init__(
        self,
        lines: GuardLines = DEFAULT_LINES,
        *,
        armed: bool = True,
        min_interval: float = MIN_INTERVAL,
        max_interval: float = MAX_INTERVAL,
        worst_rate: float = WORST_RATE,
        plausible_rate: float = PLAUSIBLE_RATE,
        history: int = 64,
    ) -> None:
        self.lines = lines
        self.armed = armed
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.worst_rate = worst_rate
        self.plausible_rate = plausible_rate
        self.samples: deque[tuple[float, int]] = deque(maxlen=history)  # accepted samples
        self.pressure: deque[tuple[float, int]] = deque()  # (t, PSI full total µs) over PSI_WINDOW
        self.phase = "starting"
        self.state = "watching"
        self.warned = False
        self.term_at: float | None = None
        self.low_water: int | None = None
        self.noise_dropped = 0
        self.stalled = False  # the engine makes no progress with requests running (set_stalled)
        self.kernel_wakes = False  # a PSI trigger wakes the sampler on a memory stall (Guard sets it)
        self._recent: deque[tuple[float, int]] = deque()  # (t, MemAvailable) every ~0.25 s over ALERT_WINDOW_S
        self._held: tuple[float, int] | None = None
        self._warn = lines.bytes("warn")
        self._term = lines.bytes("term")
        self._kill = lines.bytes("kill")

    # -- helpers --

    def rate(self) -> float:
        """Bytes/s over the last RATE_WINDOW of accepted samples. At the steady-state pace (250 ms)
        two samples can be just further apart than the window: the last pair still counts when it
        is less than twice the window apart, so the first sample of a fall carries its rate; an older pair
        says nothing about now (0, as with fewer than two samples)."""
        if len(self.samples) < 2:
            return 0.0
        t1, a1 = self.samples[-1]
        t0, a0 = self.samples[-2]
        if t1 - t0 >= 2 * RATE_WINDOW:
            return 0.0
        for t, a in itertools.islice(reversed(self.samples), 2, None):
            if t1 - t > RATE_WINDOW:
                break
            t0, a0 = t, a
        return (a1 - a0) / (t1 - t0) if t1 > t0 else 0.0

    def _action_lines(self) -> list[tuple[str, int]]:
        out = []
        if self._kill is not None:
            out.append(("kill", self._kill))
        if self._term is not None and self.state == "watching":
            out.append(("term", self._term))
        return out

    def _would_act(self, available: int) -> bool:
        if self.state == "killing":
            return False
        if any(available < v for _, v in self._action_lines()):
            return True
        return self._warn is not None and not self.warned and self.state == "watching" and available < self._warn

    @property
    def alert(self) -> bool:
        """The engine stalls and MemAvailable fell (over the samples kept): a driver failure may be
        under way, so sample faster and be less patient."""
        if not self.stalled or len(self._recent) < 2 or not self.samples:
            return False
        return max(a for _, a in self._recent) - self.samples[-1][1] >= ALERT_FALL

    def set_stalled(self, stalled: bool) -> None:
        """From /metrics: prefill and decode both frozen with requests running (an attribute write)."""
        self.stalled = stalled

    def grace(self) -> float:
        """SIGTERM → SIGKILL: the lines' grace period, shorter on alert."""
        return min(self.lines.grace_s, ALERT_GRACE_S) if self.alert else self.lines.grace_s

    def _slowest(self) -> float:
        if self.alert:
            return min(self.max_interval, ALERT_INTERVAL)
        if self.phase in BUSY_PHASES:
            return min(self.max_interval, BUSY_INTERVAL)
        if self.phase == "ready":
            return max(self.max_interval, STEADY_EVENT_INTERVAL if self.kernel_wakes else STEADY_INTERVAL)
        return self.max_interval

    def set_phase(self, phase: str) -> None:
        """The server's phase (vLLM's start-up phases, "ready", or "prefill"): sets the pace."""
        self.phase = phase

    def _interval(self, available: int, rate: float) -> float:
        below = [v for _, v in self._action_lines() if v < available]
        if not below:
            return self.min_interval
        speed = max(self.worst_rate, -rate)
        return min(self._slowest(), max(self.min_interval, (available - max(below)) / speed))

    def _psi_share(self, t: float, full_total_us: int | None) -> float | None:
        """% of the last PSI_WINDOW that every non-idle task stalled on memory."""
        if full_total_us is None:
            return None
        self.pressure.append((t, full_total_us))
        while len(self.pressure) > 2 and t - self.pressure[1][0] >= PSI_WINDOW:
            self.pressure.popleft()
        t0, us0 = self.pressure[0]
        if t - t0 < PSI_WINDOW / 2:
            return None  # too short a window to judge
        return 100.0 * (full_total_us - us0) / 1e6 / (t - t0)

    def _fast_fall(self, available: int, rate: float) -> bool:
        """Falling faster than the fall-rate line with the kill (else term) line close at that rate."""
        fall_rate, lookahead = self.lines.fall_rate_gib_s, self.lines.fall_lookahead_s
        if fall_rate and self.alert:  # less patient: half the rate, twice the look ahead
            fall_rate, lookahead = fall_rate / 2, lookahead * 2
        if not fall_rate or -rate < fall_rate * GiB:  # None or 0: off
            return False
        line = self._kill if self._kill is not None else self._term
        if line is None:
            return False
        return available + rate * lookahead < line

    # -- the decision --

    def arm(self) -> None:
        self.armed = True

    def disarm(self) -> None:
        self.armed = False
        self._held = None

    def set_lines(self, lines: GuardLines) -> None:
        """Watch new lines from the next sample on (GuardLines has checked their order)."""
        self.lines = lines
        self._warn, self._term, self._kill = lines.bytes("warn"), lines.bytes("term"), lines.bytes("kill")
        self._held = None
        if self.warned and (self._warn is None or (self.samples and self.samples[-1][1] > self._warn)):
            self.warned = False  # a line moved below us may warn again when it is crossed

    def stand_down(self) -> None:
        """Undo a TERM/KILL decision that was not acted on (another server goes first): watch again,
        so the line trips anew if memory is still short after the other one has gone."""
        if self.state != "watching":
            self.state, self.term_at = "watching", None

    def feed(self, t: float, available: int, psi_full_total_us: int | None = None) -> Decision:
        d = self._feed(t, available, psi_full_total_us)
        return dataclasses.replace(d, alert=True) if self.alert else d

    def _feed(self, t: float, available: int, psi_full_total_us: int | None = None) -> Decision:
        psi = self._psi_share(t, psi_full_total_us)
        if not self.armed:
            self._accept(t, available)
            return Decision(GuardAction.NONE, self._slowest(), available=available, rate=self.rate(), psi_full_pct=psi)

        # Debounce: a sample that would act after a drop faster than any real allocation is held
        # for one more (immediate) sample. A real fall is never held: it is plausible, sample by sample.
        if self._held is not None:
            held, self._held = self._held, None
            if self._would_act(available):
                self._accept(*held)
            else:
                self.noise_dropped += 1
        elif self.samples and self._would_act(available):
            pt, pa = self.samples[-1]
            if pa - available > self.plausible_rate * max(t - pt, self.min_interval):
                self._held = (t, available)
                return Decision(GuardAction.NONE, 0.0, available=available, rate=self.rate(), held=True)
        prev_t = self.samples[-1][0] if self.samples else None
        self._accept(t, available)
        rate = self.rate()
        interval = self._interval(available, rate)
        # Predict over the longer of the planned wait and the last real gap (a busy machine wakes late).
        horizon = max(interval, t - prev_t if prev_t is not None else 0.0)
        predicted = available + rate * horizon if rate < 0 else available

        def decide(action: GuardAction, line: str, reason: str, threshold: int) -> Decision:
            return Decision(action, interval, line, reason, threshold, available, rate, psi_full_pct=psi)

        if self.state == "killing":
            return Decision(GuardAction.NONE, interval, available=available, rate=rate, psi_full_pct=psi)
        if self._kill is not None and (available < self._kill or predicted < self._kill):
            reason = "below" if available < self._kill else "predicted"
            if self.state == "terminating":
                reason = f"{reason} kill line during grace"
            self.state = "killing"
            return decide(GuardAction.KILL, "kill", reason, self._kill)
        if self.state == "terminating":
            if self.term_at is not None and t - self.term_at >= self.grace():
                self.state = "killing"
                return decide(GuardAction.KILL, "term", "grace expired", self._term or 0)
            return Decision(GuardAction.NONE, interval, available=available, rate=rate, psi_full_pct=psi)
        if self._term is not None and (available < self._term or predicted < self._term):
            self.state = "terminating"
            self.term_at = t
            return decide(GuardAction.TERM, "term", "below" if available < self._term else "predicted", self._term)
        if self._fast_fall(available, rate):
            self.state = "terminating"
            self.term_at = t
            line = self._kill if self._kill is not None else self._term
            return decide(GuardAction.TERM, "fall", "fall rate", line or 0)
        if self.lines.psi_full_pct and psi is not None and psi >= self.lines.psi_full_pct:  # None or 0: off
            self.state = "terminating"
            self.term_at = t
            return decide(GuardAction.TERM, "psi", "psi full", self._term or self._kill or 0)
        if self._warn is not None:
            if not self.warned and available < self._warn:
                self.warned = True
                return decide(GuardAction.WARN, "warn", "below", self._warn)
            if self.warned and available > self._warn + WARN_HYSTERESIS:
                self.warned = False
        return Decision(GuardAction.NONE, interval, available=available, rate=rate, psi_full_pct=psi)

    def _accept(self, t: float, available: int) -> None:
        self.samples.append((t, available))
        if not self._recent or t - self._recent[-1][0] >= ALERT_RECORD_S:  # a coarse record for alert
            self._recent.append((t, available))
            while t - self._recent[0][0] > ALERT_WINDOW_S:
                self._recent.popleft()
        if self.low_water is None or available < self.low_water:
            self.low_water = available


# --- the action part ---------------------------------------------------------------------------


@dataclass
class TripReport:
    line: str  # the line that tripped: "term" or "kill"
    reason: str  # "below" | "predicted"
    threshold_gib: float
    mem_available_gib: float  # at the trip
    low_water_gib: float  # lowest MemAvailable seen, the trip and the teardown included
    fall_rate_gib_s: float  # positive = falling
    last_samples: list[list[float]]  # [seconds relative to the trip, GiB], oldest first
    signalled: list[dict[str, Any]]  # {"target", "signal", "at_s"} from the trip
    escalated: bool  # SIGTERM was followed by SIGKILL
    escalation: str | None  # why: "below kill line during grace" | "grace expired"
    gone: bool
    gone_after_s: float | None  # from the trip until no process of the tree was left
    shm_removed: list[str]
    tripped_at: float  # wall-clock time
    survivors: list[int] = field(default_factory=list)
    kernel_line: str | None = None  # line "kernel": the driver's line that tripped it, as logged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        sig = (
            ", ".join(f"{s['signal']} {s['target']} (+{s['at_s'] * 1000:.0f} ms)" for s in self.signalled) or "nothing"
        )
        trend = f"falling {self.fall_rate_gib_s:.2f} GiB/s" if self.fall_rate_gib_s >= 0.005 else "not falling"
        available, line = gib_pair(self.mem_available_gib, self.threshold_gib)
        if self.kernel_line is not None:
            head = (
                f"memory guard tripped: kernel tripwire: the NVIDIA driver ran out of memory ({self.reason}) "
                f"with MemAvailable at {self.mem_available_gib:.2f} GiB: {self.kernel_line!r}"
            )
        elif self.line == "psi":  # a trigger, not a line: the threshold it carries is not what tripped
            head = (
                f"memory guard tripped: memory pressure (PSI full: every task stalled on memory): "
                f"MemAvailable {available} GiB, {trend}"
            )
        else:
            head = (
                f"memory guard tripped: {self.line} line ({self.reason}): MemAvailable {available} GiB"
                f" vs line {line} GiB, {trend}"
            )
        lines = [head, f"  signalled: {sig}"]
        if self.escalated:
            lines.append(f"  escalated to SIGKILL: {self.escalation}")
        gone = (
            f"gone after {self.gone_after_s * 1000:.0f} ms"
            if self.gone and self.gone_after_s is not None
            else f"NOT gone (survivors: {self.survivors})"
        )
        lines.append(f"  process tree {gone}; lowest MemAvailable {self.low_water_gib:.2f} GiB")
        if self.shm_removed:
            lines.append(f"  removed from /dev/shm: {', '.join(self.shm_removed)}")
        return "\n".join(lines)


def gib_pair(a: float, b: float) -> tuple[str, str]:
    """Two GiB figures with enough decimals to tell them apart (never "18.50 vs 18.50")."""
    for digits in (2, 3, 4):
        first, second = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if first != second:
            return first, second
    return f"{a:.2f}", f"{b:.2f}"


def _read_mem_available() -> int:
    from sparktui.runtime.host.memory import read_mem_available

    return read_mem_available()


def _read_psi_full() -> int | None:
    from sparktui.runtime.host.memory import read_psi_full_total

    return read_psi_full_total()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except BlockingIOError:
        pass


class Guard:
    """Watch MemAvailable and stop `tree` (a sparktui.runtime.host.proc.ProcessTree) when a line is crossed.

    `run()` blocks until the tree has tripped and is gone, the tree's root has exited, or
    `close()`; `start()` runs it in a daemon thread. Callbacks run on the guard's thread:
    on_warn(Decision), on_trip(Decision) right after the first signal, on_report(TripReport)
    once the tree is gone.
    """

    def __init__(
        self,
        tree: Any,
        lines: GuardLines = DEFAULT_LINES,
        *,
        armed: bool = True,
        read_available: Callable[[], int] = _read_mem_available,
        read_pressure: Callable[[], int | None] | None = _read_psi_full,
        on_warn: Callable[[Decision], None] | None = None,
        on_trip: Callable[[Decision], None] | None = None,
        on_report: Callable[[TripReport], None] | None = None,
        on_track: Callable[[], None] | None = None,
        on_sample: Callable[[], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        defer: Callable[[Decision], str | None] | None = None,
        track_interval: float | None = 2.0,
        clock: Callable[[], float] = time.monotonic,
        pressure: PsiTrigger | None = PRESSURE_TRIGGER,
        kernel: str = DEFAULT_KERNEL_MODE,
        on_kernel: Callable[[KernelEvent], None] | None = None,
        **decider_options: Any,
    ) -> None:
        if kernel not in KERNEL_MODES:
            raise UserError(f"guard kernel = {kernel!r}: expected one of {', '.join(KERNEL_MODES)}")
        self.tree = tree
        self.lines = lines
        self.decider = GuardDecider(lines, armed=armed, **decider_options)
        self.read_available = read_available
        self.read_pressure = read_pressure
        self.on_warn, self.on_trip, self.on_report = on_warn, on_trip, on_report
        self.on_track = on_track  # after each recording of the tree's members (e.g. to tell a reaper)
        self.on_sample = on_sample  # after each sample, on the guard's thread (a heartbeat: must be cheap)
        self.on_wait = on_wait  # before each sleep: after a sample that did not trip, so never in a trip's way
        self.sampled_at: float | None = None  # clock() of the last sample: how stale the guard's view is
        self.defer = defer  # with several servers: why another must be stopped first, or None to act
        self.deferring: str | None = None
        self.track_interval = track_interval  # None: the caller records the tree's members
        self.clock = clock
        self.report: TripReport | None = None
        self.last: Decision | None = None
        self.pressure_wanted = pressure
        self.pressure: PsiTrigger | None = None  # the PSI trigger armed while running (None: none)
        self.pressure_error: str | None = None  # why none could be armed
        self.pressure_wakes = 0  # samples taken early because the kernel reported a memory stall
        self.samples_taken = 0
        self.kernel_mode = kernel
        self.on_kernel = on_kernel  # every NVRM line recorded (no_memory, or an Xid naming the tree)
        self.kernel_access: KernelAccess | None = None  # where the tripwire reads, once running
        self.kernel_events: deque[KernelEvent] = deque(maxlen=KERNEL_EVENTS_KEPT)
        self._kernel_trip: KernelEvent | None = None
        self._kernel_watch: KernelWatch | None = None
        self._kernel_lock = threading.Lock()
        self._running = False
        self._closed = threading.Event()
        self._stop_requested = False  # set by request_stop(), safe inside a signal handler
        self._dense_until = -math.inf  # after a PSI trigger fired: sample every PSI_EVERY until then
        self._thread: threading.Thread | None = None
        # close() from another thread wakes the sleeping loop at once through this pipe.
        self._wake_lock = threading.Lock()
        self._wake_w: int | None = None

    @property
    def armed(self) -> bool:
        return self.decider.armed

    def arm(self) -> None:
        self.decider.arm()
        self._poke()  # judged at once, not after a resting pace's sleep

    def disarm(self) -> None:
        self.decider.disarm()

    def set_phase(self, phase: str) -> None:
        """Tell the guard what the server is doing: it samples faster in the phases where memory
        falls fast. A new phase is sampled at once (the pace at rest may be seconds long)."""
        changed = phase != self.decider.phase
        self.decider.set_phase(phase)
        if changed:
            self._poke()

    def set_lines(self, lines: GuardLines) -> None:
        """Apply new lines live: a sample is taken at once and judged against them."""
        self.lines = lines
        self.decider.set_lines(lines)
        self._poke()

    def set_kernel(self, mode: str) -> None:
        """Set the kernel tripwire's mode (live): the kernel log is followed while the guard runs and
        the mode is not "off"."""
        if mode not in KERNEL_MODES:
            raise UserError(f"guard kernel = {mode!r}: expected one of {', '.join(KERNEL_MODES)}")
        with self._kernel_lock:
            self.kernel_mode = mode
            wanted = self._running and mode != "off"
            if wanted and self._kernel_watch is None:
                self._kernel_watch = KernelWatch(self._on_kernel_event)
                self.kernel_access = self._kernel_watch.start()
            elif not wanted and self._kernel_watch is not None:
                self._kernel_watch.close()
                self._kernel_watch = None
                if mode == "off":
                    self.kernel_access = None

    def set_stalled(self, stalled: bool) -> None:
        """The engine stalls (/metrics): with a fall of MemAvailable the guard samples faster and
        is less patient (GuardDecider.alert); a new stall is judged at once (a sample now)."""
        was = self.decider.stalled
        self.decider.set_stalled(stalled)
        if stalled and not was:
            self._poke()

    def close(self) -> None:
        """Stop watching (the tree is left alone). From another thread; in a signal handler use
        request_stop(): Event.set() there can deadlock on the lock the interrupted code holds."""
        self._closed.set()
        self._poke()

    def _poke(self) -> None:
        """Wake the loop from its sleep (any thread)."""
        with self._wake_lock:
            if self._wake_w is not None:
                try:
                    os.write(self._wake_w, b"x")
                except BlockingIOError:
                    pass  # already woken

    def request_stop(self) -> None:
        """Signal-handler-safe close(): no locks; the loop notices within one interval (≤ 0.1 s)."""
        self._stop_requested = True

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="sparktui-guard", daemon=True)
        self._thread.start()
        return self._thread

    @property
    def running(self) -> bool:
        """Its thread still samples (started and not ended)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> TripReport | None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with self._wake_lock:
            self._wake_w = wake_w
        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        pressure = self._arm_pressure()
        if pressure is not None:
            poller.register(pressure.fileno(), select.POLLPRI)
        self._running = True
        self.set_kernel(self.kernel_mode)
        try:
            return self._watch(poller, wake_r, pressure)
        finally:
            self._running = False
            self.set_kernel(self.kernel_mode)
            with self._wake_lock:
                self._wake_w = None
                os.close(wake_w)
            os.close(wake_r)
            if pressure is not None:
                pressure.close()

    def _arm_pressure(self) -> PressureTrigger | None:
        if self.pressure_wanted is None:
            return None
        try:
            trigger = open_pressure_trigger(self.pressure_wanted)
        except OSError as exc:  # no PSI here (old kernel, or a container that hides it): samples alone
            self.pressure_error = str(exc)
            return None
        self.pressure = trigger.trigger
        self.decider.kernel_wakes = True  # the PSI-full line needs no timer: the pace may rest longer
        return trigger

    def _on_kernel_event(self, event: KernelEvent) -> None:
        """On the kernel log's thread: record what concerns this tree; a driver out-of-memory line
        stops it (mode "stop", armed): the loop is woken to trip at once."""
        if event.kind == "xid":
            pids = {self.tree.pid} | {i.pid for i in self.tree.recorded}
            if event.pid not in pids:
                return  # another program's GPU error
        self.kernel_events.append(event)
        if self.on_kernel is not None:
            self.on_kernel(event)
        if event.kind == "no_memory" and self.kernel_mode == "stop" and self.armed and self._kernel_trip is None:
            self._kernel_trip = event
            self._poke()

    def _watch(self, poller: select.poll, wake_r: int, pressure: PressureTrigger | None) -> TripReport | None:
        next_track = 0.0
        last_pressure = -PSI_EVERY
        while not self._closed.is_set() and not self._stop_requested:
            if self._kernel_trip is not None:
                return self._trip_kernel(self._kernel_trip)
            t = self.clock()
            stall_us = None
            if self.read_pressure is not None and t - last_pressure >= PSI_EVERY:
                stall_us, last_pressure = self.read_pressure(), t  # the share is taken over 1 s: 20 Hz is plenty
            d = self.decider.feed(t, self.read_available(), stall_us)
            self.samples_taken += 1
            self.last, self.sampled_at = d, t
            if self.on_sample is not None:
                self.on_sample()
            if d.action in (GuardAction.TERM, GuardAction.KILL):
                self.deferring = None if self.defer is None else self.defer(d)
                if self.deferring is None:
                    return self._trip(d)
                self.decider.stand_down()
            if d.action is GuardAction.WARN and self.on_warn is not None:
                self.on_warn(d)
            if self.track_interval is not None and t >= next_track:
                # Record descendants while they live (a /proc scan: ~2 ms per 100 processes, made
                # for a tree of ours only when some process was created since the last one).
                if self.tree.popen is not None:
                    self.tree.track()
                elif not self.tree.refresh():
                    return None  # an attached tree (no child of ours) that is gone
                if self.on_track is not None:
                    self.on_track()
                next_track = t + self.track_interval
            if self.tree.returncode() is not None:
                return None  # the command ended by itself
            if self.on_wait is not None:
                self.on_wait()
            if d.next_interval > 0:
                # Sleep until the next planned sample, a memory stall (PSI) or close(), whichever first.
                for fd, events in poller.poll(self._wait_after(d, t) * 1000):
                    if fd == wake_r:
                        _drain(wake_r)
                    elif pressure is not None and events & (select.POLLERR | select.POLLNVAL):
                        poller.unregister(fd)  # the kernel dropped the trigger: samples alone from now
                        self.pressure_error = "the PSI trigger was dropped by the kernel"
                        self.decider.kernel_wakes = False  # and the steady pace goes back to its timer
                    elif events & select.POLLPRI:
                        self._on_pressure()
        return None

    def _on_pressure(self) -> None:
        """The PSI trigger fired (tasks stall on memory): sample now, then every PSI_EVERY for
        PSI_WINDOW, so the stall's share is judged over a window of dense samples, not against a
        baseline from a resting pace's last sample seconds ago."""
        self.pressure_wakes += 1
        self._dense_until = self.clock() + PSI_WINDOW

    def _wait_after(self, d: Decision, t: float) -> float:
        """Seconds to sleep after the sample taken at `t` that decided `d`."""
        return min(d.next_interval, PSI_EVERY) if t < self._dense_until else d.next_interval

    def _poll_during_stop(self) -> bool:
        """Called every ~2 ms while the tree is being stopped: keep sampling (low-water mark),
        and escalate to SIGKILL when the decider says so."""
        d = self.decider.feed(self.clock(), self.read_available())
        if d.action is GuardAction.KILL:
            self._escalation = d.reason
            return True
        return False

    def _trip_kernel(self, event: KernelEvent) -> TripReport:
        """The driver ran out of memory: SIGTERM the tree now, SIGKILL after KERNEL_GRACE_S. Not
        deferred to a stop order: the whole host is about to freeze, not one server's share."""
        available = self.read_available()
        self.decider.state, self.decider.term_at = "terminating", self.clock()
        d = Decision(GuardAction.TERM, 0.0, "kernel", "NV_ERR_NO_MEMORY", 0, available)
        self.last = d
        return self._trip(d, grace=KERNEL_GRACE_S, kernel_line=event.line)

    def _trip(self, d: Decision, *, grace: float | None = None, kernel_line: str | None = None) -> TripReport:
        trip_t = self.clock()
        tripped_at = time.time()
        self._escalation = None
        samples = list(self.decider.samples)[-20:]
        on_trip = self.on_trip
        signalled = None if on_trip is None else (lambda: on_trip(d))
        if d.action is GuardAction.KILL:
            stop = self.tree.kill(on_poll=self._poll_during_stop, on_signalled=signalled)
        else:
            grace = self.decider.grace() if grace is None else grace
            stop = self.tree.stop(grace, on_poll=self._poll_during_stop, on_signalled=signalled)
        escalation = self._escalation or ("grace expired" if stop.escalated else None)
        low = self.decider.low_water if self.decider.low_water is not None else (d.available or 0)
        self.report = TripReport(
            line=d.line or "kill",
            reason=d.reason or "below",
            threshold_gib=round((d.threshold or 0) / GiB, 3),
            mem_available_gib=round((d.available or 0) / GiB, 3),
            low_water_gib=round(low / GiB, 3),
            fall_rate_gib_s=round(-d.rate / GiB, 3),
            last_samples=[[round(t - trip_t, 4), round(a / GiB, 3)] for t, a in samples],
            signalled=stop.signals,
            escalated=stop.escalated,
            escalation=escalation if stop.escalated else None,
            gone=stop.gone,
            gone_after_s=None if stop.gone_after_s is None else round(stop.gone_after_s, 4),
            shm_removed=stop.shm_removed,
            tripped_at=tripped_at,
            survivors=stop.survivors,
            kernel_line=kernel_line,
        )
        if self.on_report is not None:
            self.on_report(self.report)
        return self.report

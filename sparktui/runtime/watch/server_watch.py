"""The supervisor's side of watching: the completion probe, GPU evidence, and ServerWatch, which runs the wedge
detector, the breaker and the flight recorder for one server."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.runtime.watch.crash_loop import BreakerFailure, BreakerVerdict, CrashLoopBreaker
from sparktui.runtime.watch.flight import LOG_LINE_CHARS, LOG_LINES, FlightHeader, FlightRecord, FlightRecorder
from sparktui.runtime.watch.wedge import EngineCounters, WedgeDetector, WedgeState, WedgeView

# While anything moves the flight recorder writes a record every MOVING_RECORD_S. At rest (ready,
# no request running, MemAvailable within REST_DRIFT of the last record, no new memory stall) it
# sleeps until something moves, with REST_RECORD_S as a backstop: the guard's thread, which samples
# MemAvailable anyway, wakes it when a sample is REST_DRIFT from the last record or the kernel
# reported a memory stall (note_sample); so do a log line and a request seen on /metrics. A move is
# recorded within one guard sample (at most a second at rest) instead of at the next timed record,
# and a resting server is not woken for records that say nothing new (issue 25: the rest cost).
MOVING_RECORD_S = 1.0
REST_RECORD_S = 30.0
REST_DRIFT = 256 << 20


def at_rest(before: FlightRecord | None, now: FlightRecord | None) -> bool:
    """Whether nothing moved between two records (see REST_RECORD_S). PSI's avg10 falling back after
    a stall is the past decaying, not a new stall: only a rise counts as movement. The first record
    of a new phase or status is movement (the next one, a moment later, shows whether it settled)."""
    if before is None or now is None or now.phase != "ready" or now.status != "running":
        return False
    if (before.phase, before.status) != (now.phase, now.status):
        return False
    if now.running or now.prefilling or (now.psi_some or 0.0) > (before.psi_some or 0.0):
        return False
    return abs(now.avail - before.avail) < REST_DRIFT


if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    from sparktui.core.metrics import MetricsSnapshot


@dataclass(frozen=True)
class ProbeResult:
    answered: bool  # a token came back
    conclusive: bool  # False: the probe could not be made (a 4xx: wrong model name, no key)
    detail: str
    seconds: float


def probe_completion(url: str, api_key: str | None, model: str, timeout: float) -> ProbeResult:
    """Ask for one token, with its own timeout. The API server answers /health and /v1/models by
    itself; only a completion needs the engine to step."""
    import httpx

    started = time.monotonic()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers, trust_env=False) as client:
            try:
                listed = client.get(url + "/v1/models").json().get("data") or []
                model = str(listed[0]["id"]) if listed else model
            except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError):
                pass
            remaining = max(0.5, timeout - (time.monotonic() - started))
            reply = client.post(
                url + "/v1/completions",
                json={"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0},
                timeout=remaining,
            )
    except httpx.TimeoutException:
        return ProbeResult(False, True, f"no token within {timeout:g} s", time.monotonic() - started)
    except httpx.HTTPError as exc:
        return ProbeResult(False, True, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
    seconds = time.monotonic() - started
    if reply.status_code == 200:
        return ProbeResult(True, True, f"answered in {seconds:.2f} s", seconds)
    conclusive = reply.status_code >= 500
    return ProbeResult(False, conclusive, f"HTTP {reply.status_code}", seconds)


def gpu_evidence() -> str:
    """GPU utilization and power, where NVML gives them: an idle GPU under running requests
    supports a wedge; a busy one says a kernel is spinning."""
    from sparktui.runtime.host.memory import read_gpu

    report = read_gpu(processes=False)
    if not report.available:
        return f"GPU figures unavailable ({report.reason})"
    parts = []
    for g in report.gpus:
        util = "n/a" if g.utilization_pct is None else f"{g.utilization_pct}%"
        power = "n/a" if g.power_w is None else f"{g.power_w:.0f} W"
        parts.append(f"GPU {g.index}: utilization {util}, power {power}")
    return "; ".join(parts)


class ServerWatch:
    """What the supervisor hooks in: wedge detection and its probe, the restart breaker, the
    flight recorder. Thread-safe where the supervisor calls it from several threads."""

    def __init__(
        self,
        settings: Any,  # core.profiles.WatchSettings
        *,
        url: str,
        api_key: str | None,
        model: str,
        say: Callable[[str], None],
        evidence: Callable[[], str] = gpu_evidence,
    ) -> None:
        import threading
        from collections import deque

        self.settings = settings
        self.url, self.api_key, self.model = url, api_key, model
        self.say = say
        self.evidence = evidence
        self.detector = WedgeDetector(float(settings.wedge_after_s))
        self.breaker = CrashLoopBreaker(int(settings.max_failures), float(settings.failure_window_s))
        self.view: WedgeView | None = None
        self.wedged_since: float | None = None  # wall-clock time the engine last made progress
        self.probes = 0
        self.last_probe: ProbeResult | None = None
        self.restart_wanted = threading.Event()
        self.restarts: list[dict[str, Any]] = []
        self.log_lines: deque[str] = deque(maxlen=LOG_LINES)
        self.recorder: FlightRecorder | None = None
        self._lock = threading.Lock()
        self._probing: threading.Thread | None = None
        self._stop = threading.Event()
        self._recording: threading.Thread | None = None
        self._nudge = threading.Event()  # wakes the resting recorder: something moved
        self._resting = False  # the recorder sleeps until a nudge or REST_RECORD_S
        self._stalls = 0  # the guard's count of kernel-reported memory stalls, as last seen
        self.record_cost_s = 0.0  # total time spent making and writing records
        self.last_record: FlightRecord | None = None
        self.records = 0

    # -- wedge

    def on_line(self, line: str) -> None:
        self.log_lines.append(line.rstrip()[:LOG_LINE_CHARS])
        if self._resting:  # a record carries the last lines: a new one is news
            self._wake_recorder()

    def note_sample(self, available: int | None, stalls: int) -> None:
        """After each guard sample, on the guard's thread (a flag test while the recorder is not at
        rest): MemAvailable REST_DRIFT from the last record, or a new memory stall the kernel reported
        (the guard's PSI trigger fired), wakes the resting recorder."""
        if not self._resting:
            self._stalls = stalls
            return
        last = self.last_record
        moved = available is not None and last is not None and abs(available - last.avail) >= REST_DRIFT
        if moved or stalls != self._stalls:
            self._stalls = stalls
            self._wake_recorder()

    def _wake_recorder(self) -> None:
        self._resting = False
        self._nudge.set()

    def on_metrics(self, snapshot: MetricsSnapshot) -> bool:
        """Feed one /metrics snapshot; True when the wedge state changed (save the state)."""
        with self._lock:
            before = self.view.state if self.view else None
            view = self.detector.observe(EngineCounters.from_snapshot(snapshot))
            self.view = view
            if self._resting and (view.running or view.prefilling):
                self._wake_recorder()
            if view.state not in (WedgeState.WEDGED, WedgeState.SUSPECT):
                self.wedged_since = None
            if view.state is WedgeState.SUSPECT and (self._probing is None or not self._probing.is_alive()):
                import threading

                self._probing = threading.Thread(target=self._probe, name="sparktui-wedge-probe", daemon=True)
                self._probing.start()
            if before is WedgeState.WEDGED and view.state is not WedgeState.WEDGED:
                self.say("the engine moves again: no longer wedged")
            return before != view.state

    def _probe(self) -> None:
        with self._lock:
            view = self.view
        self.say(
            f"suspect: {view.running if view else 0:.0f} request(s) running and no progress for "
            f"{view.stalled_s if view else 0:.0f} s; probing with a 1-token request"
        )
        result = probe_completion(self.url, self.api_key, self.model, float(self.settings.probe_timeout_s))
        self.probes += 1
        self.last_probe = result
        now = time.monotonic()
        with self._lock:
            if result.answered:
                self.detector.probe_answered(now)
                self.say(f"probe {result.detail}: not wedged")
            elif not result.conclusive:
                self.detector.probe_answered(now)  # cannot tell: wait a full period before asking again
                self.say(f"probe inconclusive ({result.detail}); not calling it a wedge")
            else:
                evidence = f"probe: {result.detail}; {self.evidence()}"
                self.detector.confirm(now, evidence)
                progress_at = self.detector.progress_at if self.detector.progress_at is not None else now
                self.wedged_since = time.time() - (now - progress_at)
                self.view = WedgeView(
                    WedgeState.WEDGED,
                    now - progress_at,
                    view.running if view else 0,
                    view.decoding if view else 0,
                    view.prefilling if view else 0,
                    evidence,
                )
                since = time.strftime("%H:%M:%S", time.localtime(self.wedged_since))
                self.say(f"WEDGED since {since}: {evidence}")
                if "wedge" in self.settings.restart_on:
                    self.restart_wanted.set()

    @property
    def prefilling(self) -> bool:
        view = self.view
        return view is not None and view.prefilling > 0

    @property
    def stalled(self) -> bool:
        """Requests run and neither prefill nor decode moved since the last scrape (the guard, with a
        fall of MemAvailable, takes it for a driver failure under way: runtime/guard/guard.py ALERT_*)."""
        view = self.view
        return view is not None and view.running > 0 and view.stalled_s > 0

    # -- restarts

    def may_restart(self, kind: str, phase: str, detail: str) -> BreakerVerdict | None:
        """After a failure of `kind` ("wedge" | "crash"): None when the profile does not ask for a
        restart; else the breaker's verdict."""
        if kind not in self.settings.restart_on:
            return None
        verdict = self.breaker.record(BreakerFailure(time.time(), phase, kind, detail))
        if verdict.restart:
            self.restarts.append({"at": time.time(), "kind": kind, "phase": phase, "detail": detail})
        return verdict

    def reset_for_restart(self) -> None:
        with self._lock:
            self.detector = WedgeDetector(float(self.settings.wedge_after_s))
            self.view, self.wedged_since = None, None
            self.restart_wanted.clear()

    # -- flight recorder

    def start_recording(
        self, folder: Path, header: FlightHeader, context: Callable[[], tuple[str, str, list[int]]]
    ) -> None:
        """Append a record from a thread, every MOVING_RECORD_S while anything moves (start-up,
        requests, MemAvailable or PSI changing); at rest when something moves (note_sample, on_line,
        on_metrics) or after REST_RECORD_S; context() gives (phase, status, pids)."""
        import threading

        if not self.settings.flight_recorder:
            return
        recorder = FlightRecorder(folder, header)
        try:
            recorder.open()
        except OSError as exc:
            self.say(f"flight recorder off: {exc}")
            return
        self.recorder = recorder

        def loop() -> None:
            next_at = time.monotonic()
            while True:
                nudged = self._nudge.wait(max(0.0, next_at - time.monotonic()))
                if self._stop.is_set():
                    return
                self._nudge.clear()
                due = time.monotonic() if nudged else next_at  # the timed pace keeps its own clock
                before = self.last_record
                try:
                    self.record_once(context)
                except OSError:
                    pass  # a full disk must not take the supervisor down
                resting = at_rest(before, self.last_record)
                next_at = due + (REST_RECORD_S if resting else MOVING_RECORD_S)
                self._resting = resting

        self._recording = threading.Thread(target=loop, name="sparktui-flight", daemon=True)
        self._recording.start()

    def record_once(self, context: Callable[[], tuple[str, str, list[int]]], now: float | None = None) -> None:
        from sparktui.runtime.host.memory import read_memory, rss_bytes

        if self.recorder is None:
            return
        started = time.perf_counter()
        phase, status, pids = context()
        mem = read_memory(psi=True)
        rss = [rss_bytes(pid) for pid in pids]
        view = self.view
        record = FlightRecord(
            seq=self.recorder.next_seq(),
            t=time.time(),
            avail=mem.mem_available,
            total=mem.mem_total,
            psi_some=mem.psi_some_avg10,
            psi_full=mem.psi_full_avg10,
            phase=phase,
            status=status,
            tree_rss=sum(r for r in rss if r is not None) if pids else None,
            running=view.running if view else None,
            prefilling=view.prefilling if view else None,
            wedge=view.state.value if view else None,
            log=list(self.log_lines),
        )
        self.recorder.append(record, now)
        self.last_record = record
        self.record_cost_s += time.perf_counter() - started
        self.records += 1

    def close(self, *, clean: bool) -> None:
        self._stop.set()
        self._nudge.set()
        if self._recording is not None:
            self._recording.join(2.0)
        if self.recorder is not None:
            try:
                self.recorder.close(clean=clean)
            except OSError:
                pass

    # -- state

    def to_state(self) -> dict[str, Any]:
        view = self.view
        breaker = self.breaker.tripped
        return {
            "wedge": {
                "state": view.state.value if view else "idle",
                "since": self.wedged_since,
                "stalled_s": round(view.stalled_s, 1) if view else 0.0,
                "running": view.running if view else None,
                "prefilling": view.prefilling if view else None,
                "evidence": view.evidence if view else None,
                "after_s": self.settings.wedge_after_s,
                "probes": self.probes,
            },
            "restarts": list(self.restarts),
            "breaker": None
            if breaker is None
            else {"reason": breaker.reason, "failures": [asdict(f) for f in breaker.failures]},
            "flight_recorder": str(self.recorder.ring_path) if self.recorder else None,
        }

"""vLLM's log, read into the supervisor: phases, events, failures, and whether the server is busy.

Each line the tail reads goes to the watch (wedge, flight recorder) and to core.vllm_log's
summary; a phase change moves the guard's pace, an event joins the state's recent events, and a
line other than a probe's once the server is healthy counts as load (metrics_pace.py).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.core import vllm_log
from sparktui.errors import UserError
from sparktui.runtime.host.memory import read_memory

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile
    from sparktui.runtime.records import protocol as pr

PROBE_LINES = ('"GET /metrics', '"GET /health')  # access-log lines of probes: not activity


def say(text: str) -> None:
    """One line of progress on stderr (the terminal, or the journal under systemd)."""
    try:
        print(f"sparktui: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # a full disk under the detached supervisor's log: the guard matters, not the words


def event_dict(event: vllm_log.Event) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": vllm_log.event_kind(event), "t": time.time()}
    out.update(dataclasses.asdict(event))
    return out


class LogIngest:
    def __init__(
        self,
        profile: Profile,
        serve: ServeConfig,
        event: Callable[[dict[str, Any]], None],
        *,
        record: Callable[[], pr.StateRecord],
        on_line: Callable[[str], None],
        healthy: Callable[[], bool],
        on_activity: Callable[[], None],
        on_phase: Callable[[str], None],
        cluster_ready: Callable[[], bool],
        say: Callable[[str], None],
    ) -> None:
        self.profile, self.serve, self.event = profile, serve, event
        self._record, self._on_line, self._healthy = record, on_line, healthy
        self._on_activity, self._on_phase, self._cluster_ready, self._say = on_activity, on_phase, cluster_ready, say
        self.summary = vllm_log.LogSummary()
        self._calibration_kept = False  # this launch's start-up figures went to runtime/calibrations.py

    def feed(self, lines: list[str]) -> bool:
        """Read these lines; True when the state changed (a phase, an event)."""
        changed = False
        for line in lines:
            self._on_line(line)
            if self._healthy() and not any(probe in line for probe in PROBE_LINES):
                self._on_activity()  # requests, stats: start-up lines are not load
            for event in self.summary.feed(line):
                if isinstance(event, vllm_log.PhaseChanged):
                    changed = True
                    self._say(f"phase: {event.phase}")
                    if not self._cluster_ready():
                        self._on_phase(event.phase)
                    continue
                if isinstance(event, vllm_log.KVCacheSize):
                    self._say(f"{event.device} KV cache: {event.tokens:,} tokens")
                    self._keep_calibration()
                self.event(event_dict(event))
                changed = True
        if changed:
            self._record().phase = "ready" if self._cluster_ready() else self.summary.phase
        return changed

    def finish(self, returncode: int | None) -> None:
        """vLLM exited by itself: the summary's last word (a failure, if it left one) joins the events."""
        for event in self.summary.finish(returncode):
            if not isinstance(event, vllm_log.PhaseChanged):
                self.event(event_dict(event))

    def restart(self) -> None:
        """A new run of vLLM: its log is read from its own start."""
        self.summary = vllm_log.LogSummary()

    def _keep_calibration(self) -> None:
        """Keep vLLM's own figures of this start-up for the next fit of the same key
        (runtime/calibrations.py), once per launch; a failure here never touches the server."""
        if self._calibration_kept:
            return
        self._calibration_kept = True
        from sparktui.runtime import calibrations

        record = self._record()
        try:
            mem = read_memory(psi=False)
            text = Path(record.log_path or "").read_text(errors="replace")
            kept = calibrations.record_launch(
                self.profile, self.serve, text, record.log_path or "", mem.mem_total, mem.mem_available
            )
            self._say(f"start-up figures kept for the next fit: {kept.describe()}")
        except (UserError, OSError, ValueError) as exc:
            self._say(f"start-up figures not kept: {exc}")

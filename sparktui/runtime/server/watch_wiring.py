"""The server watch (runtime/watch/), wired into a supervisor: what the guard cannot see.

The watch reads every log line and each /metrics scrape (a wedge: requests running, nothing
moving, a probe unanswered), keeps the flight recorder's ring file while the server runs, and
holds the crash-loop breaker (restarts.py). What it says reaches stderr and the state's events;
a restart it wants wakes the supervisor's loop.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparktui.runtime.records import state as st
from sparktui.runtime.records.endpoint import base_url
from sparktui.runtime.watch import FlightHeader, ServerWatch, current_boot_id, flight_dir

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.metrics import MetricsSnapshot
    from sparktui.core.profiles import Profile


class WatchWiring:
    def __init__(
        self,
        profile: Profile,
        serve: ServeConfig,
        event: Callable[[dict[str, Any]], None],
        *,
        lock: threading.RLock,
        recording: Callable[[], bool],
        save: Callable[[], bool],
        wake: Callable[[], None],
        say: Callable[[str], None],
    ) -> None:
        self.profile, self.serve, self.event = profile, serve, event
        self._lock, self._recording, self._save, self._wake, self._say = lock, recording, save, wake, say
        self.watch = ServerWatch(
            profile.watch,
            url=base_url(serve.host, serve.port),
            api_key=serve.api_key,
            model=serve.served_model_name or serve.model,
            say=self._said,
        )

    def _said(self, text: str) -> None:
        self._say(text)
        with self._lock:
            if not self._recording():  # before run() made the record: words only
                return
            self.event({"kind": "Watch", "t": time.time(), "text": text})
        self._save()
        if self.watch.restart_wanted.is_set():
            self._wake()  # the loop sleeps until an event: a restart is one

    def start_recording(self, started_at: float | None, context: Callable[[], tuple[str, str, list[int]]]) -> None:
        """The flight recorder's ring file for this server (context: phase, status, the tree's pids)."""
        header = FlightHeader(
            port=self.serve.port,
            profile=self.profile.name,
            model=self.serve.model,
            boot_id=current_boot_id(),
            started_at=started_at or time.time(),
            supervisor_pid=os.getpid(),
        )
        self.watch.start_recording(flight_dir(st.state_dir()), header, context)

    def on_metrics(self, snapshot: MetricsSnapshot) -> None:
        if self.watch.on_metrics(snapshot):
            self.event({"kind": "Wedge", "t": time.time(), **self.watch.to_state()["wedge"]})

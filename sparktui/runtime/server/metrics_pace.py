"""/metrics on demand: the supervisor scrapes vLLM's /metrics only as often as someone needs it.

Every METRICS_EVERY_S while a client asked within METRICS_WANTED_S (`status`, the TUI), or while
the server is busy (requests running or waiting, or log lines other than probes within
METRICS_BUSY_S); otherwise every METRICS_IDLE_MAX_S at once (issue 25: a scrape parses ~60 KB of
vLLM's /metrics and rewrites the state file, ~15-20 ms of CPU, and is an access-log line in the
server's log; at rest nobody reads the figures, and a reader gets a fresh scrape on asking). A
server whose logs are silent (no access log, no stats lines) is still scraped every
METRICS_IDLE_MAX_S, so its load is seen. All times are monotonic and kept under the supervisor's
lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktui.core.metrics import MetricsSnapshot
    from sparktui.runtime.records.endpoint import Endpoint

METRICS_EVERY_S = 2.0
METRICS_WANTED_S = 30.0
METRICS_BUSY_S = 30.0
METRICS_IDLE_MAX_S = 120.0
METRICS_WAIT_S = 2.0  # a status request waits this long at most for a fresh scrape


class MetricsOnDemand:
    def __init__(self, lock: threading.RLock, wake: Callable[[], None], healthy: Callable[[], bool]) -> None:
        self._lock, self._wake, self._healthy = lock, wake, healthy
        self._wanted_until = 0.0
        self._at: float | None = None  # the last scrape
        self.next_at = 0.0  # the next scrape is due (the loop's timer)
        self._done = threading.Condition(lock)
        self.count = 0  # scrapes so far (`status` shows it)
        self._last_activity = float("-inf")  # the last log line that was load, not a probe
        self._last: MetricsSnapshot | None = None  # the previous /metrics snapshot, for rates

    def want(self) -> None:
        """A client reads the state: scrape /metrics every METRICS_EVERY_S for METRICS_WANTED_S, and
        give this one a scrape at most METRICS_EVERY_S old (waiting up to METRICS_WAIT_S for it)."""
        with self._lock:
            now = time.monotonic()
            self._wanted_until = now + METRICS_WANTED_S
            if not self._healthy():
                return
            if self._at is not None and now - self._at < METRICS_EVERY_S:
                self.next_at = min(self.next_at, self._at + METRICS_EVERY_S)
                return
            self.next_at = now
            seen = self.count
            self._wake()
            self._done.wait_for(lambda: self.count != seen, METRICS_WAIT_S)

    def note_activity(self) -> None:
        """The server did something (a log line that is not a probe's): scrape at the busy pace."""
        with self._lock:
            self._last_activity = time.monotonic()
            if self._at is not None:
                self.next_at = min(self.next_at, self._at + METRICS_EVERY_S)

    def forget(self) -> None:
        """A new run of vLLM (a restart): its counters start again, no rate against the last run's."""
        self._last = None

    def poll(
        self,
        endpoint: Endpoint,
        seen: Callable[[MetricsSnapshot], None],
        store: Callable[[dict[str, Any]], None],
    ) -> None:
        """One scrape: `seen` gets the snapshot (the watch, the guard's phase), `store` the record's
        figures (under the lock); then the next scrape is timed."""
        from sparktui.core import metrics as m

        fetched = endpoint.metrics()
        busy = False
        if fetched.snapshot is None:
            metrics: dict[str, Any] = {"error": fetched.error, "at": time.time()}
        else:
            snapshot = fetched.snapshot
            seen(snapshot)
            stats = m.derive(snapshot, self._last)
            self._last = snapshot
            busy = bool(stats.running or stats.waiting)
            metrics = {
                **stats.to_dict(),
                "prompt_tokens_total": snapshot.total(m.PROMPT_TOKENS),
                "generation_tokens_total": snapshot.total(m.GENERATION_TOKENS),
                "at": time.time(),
            }
        with self._lock:
            store(metrics)
            now = time.monotonic()
            self._at = now
            wanted = now < self._wanted_until or now - self._last_activity < METRICS_BUSY_S or busy
            # nobody reads them and nothing happens: the idle pace at once
            self.next_at = now + (METRICS_EVERY_S if wanted else METRICS_IDLE_MAX_S)
            self.count += 1
            self._done.notify_all()

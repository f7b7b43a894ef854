"""Restarts after a crash or a wedge, when the profile asks for them ([watch] restart): each one
weighed by the crash-loop breaker (runtime/watch/crash_loop.py), which stops them after N failures
in the same phase; a stop, a kill or a guard trip is never undone by a restart."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.runtime.records import state as st

if TYPE_CHECKING:
    from sparktui.runtime.records import protocol as pr
    from sparktui.runtime.watch import ServerWatch


class Restarts:
    def __init__(
        self,
        watch: ServerWatch,
        profile_name: str,
        port: int,
        events: collections.deque[dict[str, Any]],
        *,
        lock: threading.RLock,
        save: Callable[[], bool],
        say: Callable[[str], None],
    ) -> None:
        self.watch, self.profile_name, self.port, self.events = watch, profile_name, port, events
        self._lock, self._save, self._say = lock, save, say

    def log_path(self, exit_: pr.ExitRecord | None, requested: str | None, reached: str) -> Path | None:
        """After the server ended: a new log path when the profile asks for a restart and the
        crash-loop breaker allows one; None to finish. `reached`: the furthest start-up phase."""
        if exit_ is None or requested or exit_.reason in ("stopped", "killed", "guard"):
            return None
        kind = "wedge" if exit_.reason == "wedged" else "crash"
        failure = exit_.failure or {}
        detail = (
            (self.watch.to_state()["wedge"].get("evidence") or "wedged")
            if kind == "wedge"
            else str(failure.get("message") or f"exit status {exit_.returncode}")
        )
        verdict = self.watch.may_restart(kind, reached, detail)
        if verdict is None:
            return None
        if not verdict.restart:
            self._say(f"{verdict.reason}:")
            for f in verdict.failures:
                self._say(f"  {f.line()}")
            self.events.append({"kind": "CrashLoop", "t": time.time(), "reason": verdict.reason})
            with self._lock:
                exit_.breaker = self.watch.to_state()["breaker"]
            self._save()
            return None
        attempt = len(self.watch.restarts)
        self._say(f"restarting after a {kind} in phase {reached} (restart {attempt}): {detail}")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return st.state_dir() / "logs" / f"{st.safe_name(self.profile_name)}-{self.port}-{stamp}-r{attempt}.log"

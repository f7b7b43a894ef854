"""Restarts after a crash or a wedge, when the profile asks for them ([watch] restart): each one
weighed by the crash-loop breaker (runtime/watch/crash_loop.py), which stops them after N failures
in the same phase; a stop, a kill or a guard trip is never undone by a restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError
from sparktui.runtime.guard import leakgate
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st

if TYPE_CHECKING:
    from sparktui.runtime.watch import ServerWatch


class Restarts:
    def __init__(
        self,
        watch: ServerWatch,
        profile_name: str,
        port: int,
        event: Callable[[dict[str, Any]], None],
        *,
        lock: threading.RLock,
        save: Callable[[], bool],
        say: Callable[[str], None],
    ) -> None:
        self.watch, self.profile_name, self.port, self.event = watch, profile_name, port, event
        self._lock, self._save, self._say = lock, save, say

    def log_path(self, exit_: pr.ExitRecord | None, requested: str | None, reached: str) -> Path | None:
        """After the server ended: a new log path when the profile asks for a restart and the
        crash-loop breaker allows one; None to finish. `reached`: the furthest start-up phase."""
        if exit_ is None or requested or exit_.reason in ("stopped", "killed", "guard"):
            return None
        kind = "wedge" if exit_.reason == "wedged" else "crash"
        failure = exit_.failure
        detail = (
            (self.watch.to_state()["wedge"].get("evidence") or "wedged")
            if kind == "wedge"
            else ((failure.message if failure is not None else "") or f"exit status {exit_.returncode}")
        )
        verdict = self.watch.may_restart(kind, reached, detail)
        if verdict is None:
            return None
        if not verdict.restart:
            self._say(f"{verdict.reason}:")
            for f in verdict.failures:
                self._say(f"  {f.line()}")
            self.event({"kind": "CrashLoop", "t": time.time(), "reason": verdict.reason})
            with self._lock:
                exit_.breaker = pr.BreakerRecord.model_validate(self.watch.to_state()["breaker"])
            self._save()
            return None
        if exit_.leak is not None:
            try:  # the same gate as a launch: never restart into memory the last run left held
                leakgate.gate([(self.port, exit_.leak)])
            except UserError as exc:
                self._say(f"not restarting: {exc}")
                self.event({"kind": "CrashLoop", "t": time.time(), "reason": f"leak gate: {exc}"})
                with self._lock:
                    exit_.breaker = pr.BreakerRecord(reason=f"leak gate: {exc}")
                self._save()
                return None
        attempt = len(self.watch.restarts)
        self._say(f"restarting after a {kind} in phase {reached} (restart {attempt}): {detail}")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return st.state_dir() / "logs" / f"{st.safe_name(self.profile_name)}-{self.port}-{stamp}-r{attempt}.log"

"""The leak gate at a supervisor's end (runtime/guard/leakgate.py): the machine is read before
each run of vLLM, and once its tree is gone the memory it took must come back; how much did not,
and what holds it, goes into the end record (the next launch here is refused until it is back)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparktui.core.leak import MEMORY_BACK_TIMEOUT_S
from sparktui.runtime.guard import leakgate

if TYPE_CHECKING:
    from sparktui.runtime.host import proc
    from sparktui.runtime.records import protocol as pr


class LeakCheck:
    def __init__(
        self,
        wait_s: float | None,
        *,
        lock: threading.RLock,
        event: Callable[[dict[str, Any]], None],
        save: Callable[[], bool],
        say: Callable[[str], None],
    ) -> None:
        self.wait_s = MEMORY_BACK_TIMEOUT_S if wait_s is None else wait_s  # [guard] leak-wait-s
        self._lock, self._event, self._save, self._say = lock, event, save, say
        self.baseline: leakgate.Baseline | None = None  # the machine before this run (the leak gate)

    def before(self) -> None:
        self.baseline = leakgate.take_baseline()

    def after(self, tree: proc.ProcessTree | None, exit_: pr.ExitRecord | None) -> None:
        """The tree is gone: wait (up to wait_s) for its memory to come back, and record in the end
        record how much did not and what holds it."""
        baseline = self.baseline
        if tree is None or baseline is None or exit_ is None:
            return
        ran = leakgate.with_tree(
            baseline, [(i.pid, i.start_time) for i in tree.recorded], tree.to_record().get("cgroup"), tree.shm_held
        )
        back = leakgate.wait_for_memory_back(ran, self.wait_s)
        record = back.record(ran)
        with self._lock:
            exit_.leak = record
        if not back.back:
            self._say(f"warning: leak gate: {record.summary()}")
            self._event({"kind": "Leak", "t": time.time(), "leaked_bytes": record.leaked_bytes})
        self._save()

"""One guard for the machine: with several servers on one pool, memory that runs out is freed in a
declared order (core.pool.stop_order: the lowest [guard] priority first, then the largest), and
only as many servers are stopped as must be.

Every server's guard sees the same MemAvailable cross its lines. Each asks this policy before it
acts; a server that comes later in the order stands down while one before it is still alive and
guarded, so the first one's stop is given the chance to free enough. The wait is bounded (the
guard must never be silently off): at the kill line a short moment, at the term line the grace
period and a margin, counted from when the first one began stopping (its own guard may sample
the fall later than this one on a loaded box), or from this guard's first wait while it has not
begun; so never more than twice that in all. Then every guard acts on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparktui.core import pool
from sparktui.runtime.guard.guard import Decision, GuardAction
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st

KILL_WAIT_S = 1.0  # at the kill line the box is close to hanging: wait only this long for others
TERM_MARGIN_S = 2.0  # past the other server's grace, for its tree to be gone and memory back
REREAD_S = 0.05  # the guard samples at up to 500 Hz while it waits: read the state files less often


class StopOrder:
    def __init__(
        self,
        me: pool.Reservation,
        grace_s: float,
        *,
        list_states: Callable[[], list[pr.StateRecord]] = st.list_states,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.me = me
        self.grace_s = grace_s
        self.list_states = list_states
        self.clock = clock
        self._since: float | None = None
        self._read_at = -1.0
        self._ahead: list[pool.Reservation] = []
        self._stopping: dict[int, float] = {}  # port -> when this guard first saw it stopping

    def ahead(self) -> list[pool.Reservation]:
        """The servers that come before this one in the stop order and can still free memory:
        alive, running, guarded (a disarmed guard will never stop its server)."""
        now = self.clock()
        if now - self._read_at >= REREAD_S:
            self._read_at = now
            live = [
                s
                for s in self.list_states()
                if s.port != self.me.port and s.alive and s.running and s.guard.armed and s.reservation
            ]
            for s in live:
                if s.status == "stopping":
                    self._stopping.setdefault(s.port, now)
            others = [reservation_of(s) for s in live]
            order = pool.stop_order([*others, self.me])
            self._ahead = order[: order.index(self.me)]
        return self._ahead

    def __call__(self, decision: Decision) -> str | None:
        """None: act now. Else why this guard stands down for the moment."""
        first = next(iter(self.ahead()), None)
        if first is None:
            self._since = None
            return None
        now = self.clock()
        if self._since is None:
            self._since = now
        if decision.action is GuardAction.KILL:
            limit, waited = KILL_WAIT_S, now - self._since
        else:
            limit = self.grace_s + TERM_MARGIN_S
            # from when the first one began stopping, once it has (seen stopping only after this
            # guard's own wait ran out, it is too late: this guard has acted by then)
            waited = now - self._stopping.get(first.port, self._since)
        if waited > limit:
            return None  # the others did not free enough in time: this guard acts too
        return (
            f"port {first.port} ({first.name}, priority {first.priority}, {first.bytes / 2**30:.1f} GiB) "
            f"is stopped first; this server (priority {self.me.priority}) waits up to {limit:g} s"
        )


def reservation_of(state: pr.StateRecord) -> pool.Reservation:
    r = state.reservation
    assert r is not None  # filtered by the caller
    return pool.Reservation(state.port, state.profile or "?", r.bytes, r.basis, r.priority)

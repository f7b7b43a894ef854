"""One guard for the machine: the stop order between several servers' guards (fast: no processes)."""

from __future__ import annotations

from sparktui.core.guard_lines import GuardLines
from sparktui.core.pool import Reservation
from sparktui.core.units import GiB
from sparktui.runtime.guard.guard import Decision, Guard, GuardAction
from sparktui.runtime.guard.stop_order import KILL_WAIT_S, StopOrder
from sparktui.runtime.records import protocol as pr


def record(port: int, priority: int, gib: float, *, armed: bool = True, alive: bool = True) -> pr.StateRecord:
    return pr.StateRecord(
        status="running",
        port=port,
        profile=f"p{port}",
        supervisor=pr.ProcessRef(pid=1, start_time=1),
        guard=pr.GuardRecord(armed=armed, lines=GuardLines(None, None, None)),
        reservation=pr.ReservationRecord(bytes=int(gib * GiB), basis="test", priority=priority),
        alive=alive,
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


TERM = Decision(GuardAction.TERM, 0.002, "term", "below", 6 * GiB, 5 * GiB, 0.0)
KILL = Decision(GuardAction.KILL, 0.002, "kill", "below", 3 * GiB, 2 * GiB, 0.0)


def test_the_lower_priority_server_goes_first_and_the_other_waits_a_bounded_time():
    me = Reservation(8002, "p8002", 40 * GiB, "test", priority=10)
    clock = Clock()
    states = [record(8001, 0, 10)]
    order = StopOrder(me, grace_s=5.0, list_states=lambda: states, clock=clock)
    why = order(TERM)
    assert why is not None and "port 8001" in why and "first" in why
    clock.t = 5.0 + 1.0
    assert order(TERM) is not None  # still within grace + margin
    clock.t = 5.0 + 2.5
    assert order(TERM) is None  # the other one did not free enough in time: act
    # at the kill line the wait is short
    order = StopOrder(me, grace_s=5.0, list_states=lambda: states, clock=clock)
    assert order(KILL) is not None
    clock.t += KILL_WAIT_S + 0.1
    assert order(KILL) is None


def test_first_in_order_acts_at_once_and_a_gone_or_unguarded_server_is_not_waited_for():
    first = Reservation(8001, "p8001", 10 * GiB, "test", priority=0)
    assert StopOrder(first, 5.0, list_states=lambda: [record(8002, 10, 40)])(TERM) is None
    me = Reservation(8002, "p8002", 40 * GiB, "test", priority=10)
    for other in (record(8001, 0, 10, armed=False), record(8001, 0, 10, alive=False)):
        assert StopOrder(me, 5.0, list_states=lambda other=other: [other])(TERM) is None
    # same priority: the largest goes first
    big = Reservation(8003, "p8003", 60 * GiB, "test", priority=0)
    assert StopOrder(big, 5.0, list_states=lambda: [record(8001, 0, 10)])(TERM) is None


class NoTree:
    popen = None

    def refresh(self) -> bool:
        return True

    def returncode(self) -> int | None:
        return None


def test_a_deferring_guard_stands_down_then_trips_when_memory_is_still_short():
    readings = iter([5 * GiB] * 10_000)  # steady below the term line, above the kill line
    answers = iter(["port 8001 goes first"] * 3)
    asked: list[GuardAction] = []

    def defer(decision: Decision) -> str | None:
        asked.append(decision.action)
        return next(answers, None)

    trips: list[Decision] = []
    guard = Guard(NoTree(), GuardLines(10, 6, 3), read_available=lambda: next(readings), defer=defer)
    guard._trip = lambda d: trips.append(d)  # type: ignore[method-assign,assignment,return-value]
    guard.run()
    # asked three times (standing down each time, so the term line tripped anew), then acted
    assert asked[:4] == [GuardAction.TERM] * 4 and len(trips) == 1 and trips[0].action is GuardAction.TERM


def test_the_term_wait_counts_from_when_the_first_server_began_stopping():
    """On a loaded box the first server's guard can sample the fall later than this one: its grace
    period starts then, and this guard waits for it (bounded: had it not begun within this guard's
    own wait, this guard would have acted)."""
    me = Reservation(8002, "p8002", 40 * GiB, "test", priority=10)
    clock = Clock()
    first = record(8001, 0, 10)
    states = [first]
    order = StopOrder(me, grace_s=2.0, list_states=lambda: states, clock=clock)
    assert order(TERM) is not None  # t = 0: this guard waits for port 8001
    clock.t = 3.0
    states[0] = first.model_copy(update={"status": "stopping"})  # its guard acted 3 s later
    assert order(TERM) is not None
    clock.t = 3.0 + 2.0 + 1.5  # past this guard's own 4 s, within the first one's grace + margin
    assert order(TERM) is not None
    clock.t = 3.0 + 2.0 + 2.1  # its grace + margin are over and memory is still short: act
    assert order(TERM) is None
    # a first server that never begins stopping is waited for grace + margin from this guard's wait
    clock = Clock()
    never = StopOrder(me, grace_s=2.0, list_states=lambda: [record(8001, 0, 10)], clock=clock)
    assert never(TERM) is not None
    clock.t = 4.1
    assert never(TERM) is None

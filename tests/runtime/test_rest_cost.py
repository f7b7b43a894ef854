"""What lets the supervisor sleep at rest (issue 25): the guard's heartbeat says the gap it planned,
so a guard that samples once a second is not taken for a stopped one (by the reaper, or by a
status read from the heartbeat file), and the flight recorder writes seldom while nothing moves."""

from __future__ import annotations

import os
import time

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.server import reaper
from sparktui.runtime.watch.flight import FlightRecord
from sparktui.runtime.watch.server_watch import REST_DRIFT, at_rest


def beat_fd(tmp_path, line: bytes) -> int:
    path = tmp_path / "beat"
    path.write_bytes(line.ljust(32))
    return os.open(path, os.O_RDONLY)


def test_the_heartbeat_carries_the_planned_gap_and_an_old_one_still_reads(tmp_path):
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    fd = beat_fd(tmp_path, f"{now - 1.5:.3f} 1.000\n".encode())
    age, plan = reaper._beat_age(fd)
    assert age == pytest.approx(1.5, abs=0.1) and plan == 1.0
    assert st.read_beat_plan(fd) == (pytest.approx(now - 1.5, abs=0.01), 1.0)
    assert st.read_beat(fd) == pytest.approx(now - 1.5, abs=0.01)
    old = beat_fd(tmp_path, f"{now - 1.5:.3f}\n".encode())  # a supervisor from before: no plan
    assert reaper._beat_age(old)[1] == 0.25 and st.read_beat_plan(old)[1] == st.BEAT_PLAN_S
    os.close(fd)
    os.close(old)


def test_a_guard_that_planned_a_second_is_not_stale_after_a_second_and_a_half():
    quiet = pr.GuardRecord(armed=True, lines=GuardLines(None, None, None))
    quiet.set_age(2.5, planned_s=1.0)  # 2.0 s beyond the 0.25 s pace, + 0.75 s planned
    assert quiet.stale is False
    quiet.set_age(2.9, planned_s=1.0)
    assert quiet.stale is True
    fast = pr.GuardRecord(armed=True, lines=GuardLines(None, None, None))
    fast.set_age(2.5, planned_s=0.002)  # sampling fast near a line: stale as soon as before
    assert fast.stale is True


def record(avail_gib: float, **kw) -> FlightRecord:
    base = dict(seq=1, t=0.0, avail=int(avail_gib * 2**30), total=0, psi_some=0.0, psi_full=0.0, phase="ready")
    return FlightRecord(**{**base, "status": "running", "tree_rss": 0, **kw})


def test_the_flight_recorder_rests_only_while_nothing_moves():
    assert at_rest(record(20), record(20.1))
    assert not at_rest(None, record(20))
    assert not at_rest(record(20), record(20 - (REST_DRIFT + 1) / 2**30))  # memory moved
    assert not at_rest(record(20), record(20, running=1.0))  # a request running
    assert not at_rest(record(20), record(20, psi_some=0.5))  # tasks stalled on memory
    assert not at_rest(record(20), record(20, phase="loading_weights"))

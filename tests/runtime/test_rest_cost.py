"""What lets the supervisor sleep at rest (issue 25): the guard's heartbeat says the gap it planned,
so a guard that samples once a second is not taken for a stopped one (by the reaper, or by a
status read from the heartbeat file), and the flight recorder writes seldom while nothing moves."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.beat import MAX_PLAN_S, UNSAID_PLAN_S
from sparktui.runtime.server import reaper
from sparktui.runtime.server.guard_wiring import BEAT_EVERY_S
from sparktui.runtime.watch.flight import FlightRecord
from sparktui.runtime.watch.server_watch import REST_DRIFT, at_rest
from tests.support import wait_for


def beat_fd(tmp_path, line: bytes) -> int:
    path = tmp_path / "beat"
    path.write_bytes(line.ljust(32))
    return os.open(path, os.O_RDONLY)


def test_the_heartbeat_carries_the_planned_gap_and_an_old_one_still_reads(tmp_path):
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    fd = beat_fd(tmp_path, f"{now - 1.5:.3f} 1.000\n".encode())
    stamp, plan, alarmed = reaper._beat(fd)
    assert stamp == pytest.approx(now - 1.5, abs=0.01) and plan == 1.0 and not alarmed
    assert st.read_beat_plan(fd) == (pytest.approx(now - 1.5, abs=0.01), 1.0)
    assert st.read_beat(fd) == pytest.approx(now - 1.5, abs=0.01)
    old = beat_fd(tmp_path, f"{now - 1.5:.3f}\n".encode())  # a supervisor from before: no plan
    assert reaper._beat(old)[1] == 0.25 and st.read_beat_plan(old)[1] == UNSAID_PLAN_S
    os.close(fd)
    os.close(old)


@pytest.mark.parametrize(
    "line, plan",
    [
        (b"100.000 1000.000", MAX_PLAN_S),
        (b"100.000 -3.000", 0.0),
        (b"100.000 nan", MAX_PLAN_S),
        (b"100.000 2.500 alarm", 2.5),
    ],
)
def test_the_reaper_and_a_state_reader_read_a_damaged_plan_alike(tmp_path, line, plan):
    # one parse (records/beat.py): the panel must not call a guard watching for an hour while the
    # reaper already stands in for it after a minute
    fd = beat_fd(tmp_path, line + b"\n")
    try:
        assert reaper._beat(fd)[:2] == (100.0, plan)
        assert st.read_beat_plan(fd) == (100.0, plan)
        assert st.read_beat_plan(tmp_path / "beat") == (100.0, plan)
    finally:
        os.close(fd)


@pytest.mark.parametrize("line", [b"inf 1.000", b"nan 1.000", b"", b"x 1.0"])
def test_a_heartbeat_without_a_finite_stamp_is_no_heartbeat(tmp_path, line):
    fd = beat_fd(tmp_path, line + b"\n")
    try:
        assert reaper._beat(fd) == (None, UNSAID_PLAN_S, False)
        assert st.read_beat_plan(fd) == (None, UNSAID_PLAN_S)
    finally:
        os.close(fd)


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
    assert not at_rest(record(20, psi_some=0.2), record(20, psi_some=0.5))  # and stall again
    # avg10 decaying after a stall is no new stall: a box whose memory stalled a minute ago rests
    assert at_rest(record(20, psi_some=0.5), record(20, psi_some=0.3))
    assert not at_rest(record(20), record(20, phase="loading_weights"))
    assert not at_rest(record(20, phase="cuda_graphs"), record(20))  # just ready: one more record at the pace
    assert not at_rest(record(20, status="starting"), record(20))


def reaper_wakes(pid: int) -> int:
    """How often the reaper's process has gone to sleep and been woken (it has one thread)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))


@pytest.fixture
def child_tree(isolated):
    """A real tree for the reaper to guard (a child `sleep`), killed afterwards if still there."""
    from sparktui.runtime.host import proc

    tree = proc.spawn(["sleep", "120"], isolated / "child.log", contain=False)
    yield tree
    if not tree.is_gone():
        tree.kill()


@pytest.mark.slow  # a reaper process and a child
def test_the_reaper_sleeps_while_the_guard_beats_and_kills_once_the_beats_stop(isolated, child_tree):
    """Issue 25: the guard pushes the reaper's alarm (a timerfd) at each heartbeat; the reaper sleeps on
    it, so a resting guard does not wake it, and when the heartbeat stops (a stopped supervisor) the
    alarm rings and the reaper stands in: here at a kill line above MemAvailable, so it kills at once."""
    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.server.guard_wiring import GuardWiring

    wiring = GuardWiring(
        GuardSettings(), 8125, lambda _: None, lock=threading.RLock(), record=lambda: None,  # type: ignore[arg-type,return-value]
        save=lambda: True, reaper=lambda: None, wake=lambda *_: None, say=lambda _: None,
    )  # fmt: skip
    wiring.open_beat()
    assert wiring.beat_fd is not None and wiring.alarm is not None and wiring.alarm.fd is not None
    keeper = reaper.Reaper(beat_fd=wiring.beat_fd, alarm_fd=wiring.alarm.fd)
    try:
        keeper.tell(child_tree.to_record())
        keeper.tell_guard(1 << 60)  # every MemAvailable is below it: a stand-in kills at once
        time.sleep(0.5)  # the reaper has read what it was told
        wakes = reaper_wakes(keeper.pid)
        for _ in range(10):  # the guard's heartbeats, 0.3 s apart (it is late 1 s after one)
            last = time.monotonic()  # at or before the last heartbeat pushed the alarm
            wiring.beat()
            time.sleep(0.3)
        assert not child_tree.is_gone(), "the reaper stood in while the guard was beating"
        assert reaper_wakes(keeper.pid) - wakes <= 1  # asleep through 3 s of heartbeats
        wait_for(child_tree.is_gone, 10, "the reaper to kill the tree once the heartbeat stopped")
        # not before the last heartbeat was late: measured from that heartbeat, not from the end of
        # the sleep after it (a sleep that overran under load left the kill 0.86 s after it)
        assert time.monotonic() - last >= reaper.late_after(BEAT_EVERY_S) - 0.01
    finally:
        keeper.dismiss()
        wiring.close_beat()


@pytest.mark.slow  # a reaper process and a child
def test_a_heartbeat_that_does_not_say_its_alarm_was_pushed_is_watched_on_a_timer(isolated, child_tree):
    """A heartbeat written without pushing the alarm (an older supervisor, or a push that failed) says
    so by leaving out "alarm": the reaper, holding an alarm nobody pushes, still sees it go stale."""
    from sparktui.runtime.host.deadline import Deadline

    alarm = Deadline()  # never pushed: it never rings
    path = isolated / "beat"
    path.write_bytes(f"{time.clock_gettime(time.CLOCK_BOOTTIME):.3f} 0.250\n".encode().ljust(40))
    fd = os.open(path, os.O_RDONLY)
    keeper = reaper.Reaper(beat_fd=fd, alarm_fd=alarm.fd)
    try:
        keeper.tell(child_tree.to_record())
        keeper.tell_guard(1 << 60)
        wait_for(child_tree.is_gone, 10, "the reaper to kill the tree once the heartbeat was late")
    finally:
        keeper.dismiss()
        alarm.close()
        os.close(fd)


def test_the_reapers_alarm_rings_once_when_not_pushed_in_time_and_each_push_puts_it_off():
    import select

    from sparktui.runtime.host.deadline import Deadline, expired

    alarm = Deadline()
    assert alarm.fd is not None
    poller = select.poll()
    poller.register(alarm.fd, select.POLLIN)
    try:
        for _ in range(3):  # a heartbeat every 0.1 s, each pushing the alarm 1 s on: it never rings
            alarm.push(1.0)
            pushed = time.monotonic()
            assert poller.poll(100) == [] and not expired(alarm.fd)
        # the pushes stop: it rings 1 s after the last
        assert poller.poll(5000) == [(alarm.fd, select.POLLIN)]
        assert time.monotonic() - pushed >= 0.99
        assert expired(alarm.fd) and not expired(alarm.fd)  # read once, it is quiet until pushed again
        assert poller.poll(400) == []
    finally:
        alarm.close()


class FixedMemory:
    """read_memory() for the recorder: MemAvailable as the test sets it, no PSI movement."""

    def __init__(self, available: int) -> None:
        self.available = available

    def __call__(self, *, psi: bool = True):
        from sparktui.runtime.host.memory import MemorySample

        return MemorySample(24 << 30, self.available, self.available, 0, 0, 0, 0.0, 0.0, time.monotonic())


@pytest.fixture
def resting_recorder(tmp_path, monkeypatch):
    """A ServerWatch recording a ready, running server whose memory stands still, once its recorder rests."""
    from sparktui.core.profiles import WatchSettings
    from sparktui.runtime.host import memory
    from sparktui.runtime.watch import server_watch
    from sparktui.runtime.watch.flight import FlightHeader
    from sparktui.runtime.watch.server_watch import ServerWatch

    mem = FixedMemory(20 << 30)
    monkeypatch.setattr(memory, "read_memory", mem)
    monkeypatch.setattr(server_watch, "MOVING_RECORD_S", 0.05)  # the moving pace, made quick
    watch = ServerWatch(WatchSettings(), url="http://127.0.0.1:9", api_key=None, model="m", say=lambda _: None)
    header = FlightHeader(port=9, profile="p", model="m", boot_id="b", started_at=time.time(), supervisor_pid=1)
    watch.start_recording(tmp_path, header, lambda: ("ready", "running", []))
    wait_for(lambda: watch._resting, 5, "the recorder to rest")
    yield watch, mem
    watch.close(clean=True)


def settled(watch, records: int, seconds: float = 0.3) -> int:
    """The record count once nothing more was written for `seconds` (what a wake added, all of it)."""
    time.sleep(seconds)
    return watch.records - records


def test_a_resting_flight_recorder_sleeps_until_the_guard_sees_memory_move(resting_recorder):
    """Issue 25: at rest the recorder has no timer of its own but a long backstop (REST_RECORD_S); the
    guard's samples wake it when MemAvailable moved REST_DRIFT from the last record or the kernel
    reported a memory stall, and the move is recorded at once, then at the moving pace."""
    from sparktui.runtime.watch.server_watch import REST_DRIFT

    watch, mem = resting_recorder
    n = watch.records
    assert settled(watch, n) == 0  # resting: no records while nothing moves
    watch.note_sample(mem.available - REST_DRIFT // 2, 0)  # a small move: no news
    assert settled(watch, n) == 0
    mem.available -= 2 * REST_DRIFT
    watch.note_sample(mem.available, 0)
    wait_for(lambda: watch.last_record is not None and watch.last_record.avail == mem.available, 2, "the fall recorded")
    wait_for(lambda: watch._resting, 5, "the recorder to rest again once memory stands still")
    n = watch.records
    watch.note_sample(mem.available, 1)  # the guard's PSI trigger fired: tasks stall on memory
    wait_for(lambda: watch.records > n, 2, "a record after the kernel reported a stall")


def test_a_resting_flight_recorder_records_a_new_log_line_and_a_request(resting_recorder):
    from sparktui.core.metrics import parse_metrics

    watch, _ = resting_recorder
    n = watch.records
    watch.on_line("INFO: a line at rest")
    wait_for(lambda: watch.records > n, 2, "a record after a log line")
    assert "INFO: a line at rest" in watch.last_record.log
    wait_for(lambda: watch._resting, 5, "the recorder to rest again")
    n = watch.records
    watch.on_metrics(parse_metrics("vllm:num_requests_running 1\n", time=time.monotonic()))
    wait_for(lambda: watch.records > n, 2, "a record after /metrics showed a request running")


class StillTree:
    """A tree for a guard fed made-up samples: never ends by itself; a trip's kill is recorded."""

    pid, popen, recorded = 4242, None, []

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def returncode(self):
        return None

    def kill(self, *, on_poll=None, on_signalled=None, timeout=10.0):
        from sparktui.runtime.host.proc import StopReport

        self.order.append("kill")
        if on_signalled is not None:
            on_signalled()
        return StopReport(gone=True, gone_after_s=0.0)


def test_the_guard_tells_the_flight_recorder_only_before_it_sleeps_never_between_a_sample_and_its_trip():
    """The recorder hears each guard sample through on_wait, called once the sample was judged and
    acted on: a sample that trips goes to the kill without it (a recorder woken there would contend
    with the kill for the interpreter), so the trip's delay is as it was."""
    from sparktui.runtime.guard.guard import Guard

    order: list[str] = []
    samples = iter([5 << 30, 5 << 30, 5 << 30, 3 << 30])  # a fall a real allocation can make: not held back
    guard = Guard(
        StillTree(order), GuardLines(None, None, 3.5), read_available=lambda: next(samples), read_pressure=None,
        pressure=None, kernel="off", track_interval=None, on_sample=lambda: order.append("sample"),
        on_wait=lambda: order.append("wait"),
    )  # fmt: skip
    report = guard.run()
    assert report is not None and report.line == "kill"
    assert order == ["sample", "wait"] * 3 + ["sample", "kill"]


def test_the_guards_samples_reach_the_flight_recorder():
    """The wiring: before the guard sleeps, the recorder hears MemAvailable and the count of
    kernel-reported stalls (GuardWiring._settled, the guard's on_wait -> ServerWatch.note_sample)."""
    from types import SimpleNamespace

    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.guard.guard import Decision, GuardAction
    from sparktui.runtime.server.guard_wiring import GuardWiring

    heard = []
    wiring = GuardWiring(
        GuardSettings(), 8997, lambda _: None, lock=threading.RLock(), record=lambda: None, save=lambda: True,
        reaper=lambda: None, wake=lambda *_: None, say=lambda _: None,
    )  # fmt: skip
    wiring.guard = SimpleNamespace(last=Decision(GuardAction.NONE, 1.0, available=17 << 30), pressure_wakes=3)
    wiring.flight = SimpleNamespace(note_sample=lambda available, stalls: heard.append((available, stalls)))
    wiring._sampled()  # the heartbeat, before a trip is acted on: not the recorder's
    assert heard == []
    wiring._settled()
    assert heard == [(17 << 30, 3)]


def test_a_supervisors_guard_wakes_no_other_thread_between_a_tripping_sample_and_its_kill(isolated):
    """The loop is woken for the guard's news (a new action, MemAvailable moved) once the sample was
    acted on, before the guard sleeps; on a sample that trips, only after the kill signal (_on_trip):
    a thread woken before it would contend with the kill for the interpreter."""
    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.guard.guard import Guard
    from sparktui.runtime.server.guard_wiring import GuardWiring

    order: list[str] = []

    def wake(why: str = "request") -> None:
        order.append(f"wake {why}")
        wiring._news_told = False  # the loop, woken, has looked (GuardWiring.status clears it so)

    wiring = GuardWiring(
        GuardSettings(), 8995, lambda _: None, lock=threading.RLock(), record=lambda: None, save=lambda: True,
        reaper=lambda: None, wake=wake, say=lambda _: None,
    )  # fmt: skip
    wiring._shown = ("none", 5.0, False)  # the line the loop recorded last
    samples = iter([5 << 30, int(4.4 * (1 << 30)), 5 << 30, 3 << 30])  # news (0.6 GiB), then a kill
    guard = wiring.guard = Guard(
        StillTree(order), GuardLines(None, None, 3.5), read_available=lambda: next(samples), read_pressure=None,
        pressure=None, kernel="off", track_interval=None, on_sample=wiring._sampled, on_wait=wiring._settled,
        on_trip=wiring._on_trip,
    )  # fmt: skip
    wiring._news_at = -1e9
    assert guard.run() is not None
    assert order == ["wake guard", "kill", "wake request"]  # the news, the kill, then the trip's own wake

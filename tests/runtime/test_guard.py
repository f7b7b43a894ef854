"""The guard with real processes and real memory.

Lines are set relative to MemAvailable at the test's start and a hog allocates (touches) at
most 2 GiB, so this runs on any machine; each test takes a few seconds. On a shared machine
other programs may free memory meanwhile, so the hog may never reach a line: then (and only
then) the attempt is repeated, at most 3 times.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.core.units import GiB
from sparktui.runtime.guard.guard import Guard, GuardAction
from sparktui.runtime.host.memory import read_mem_available
from sparktui.runtime.host.proc import read_stat, spawn
from tests.support import PROCS, alive, wait_file, wait_for

pytestmark = pytest.mark.slow  # spawns processes


def avail_gib() -> float:
    return read_mem_available() / GiB


def start_hog(tmp_path, rate_mib_s, cap_mib, *extra):
    tree = spawn([sys.executable, str(PROCS / "hog.py"), str(rate_mib_s), str(cap_mib), *extra], tmp_path / "hog.log")
    deadline = time.monotonic() + 10
    while "started" not in (tmp_path / "hog.log").read_text():
        assert time.monotonic() < deadline, "hog did not start"
        time.sleep(0.01)
    return tree


def guarded_hog(tmp_path, hog, make_lines, deepest, **guard_kw):
    """Run a hog (hog.py arguments) under a Guard with lines from make_lines(a0); retry while the
    test's precondition is unmet: MemAvailable never fell below the line `deepest` GiB under its
    start, and the guard did not act on that line (by prediction) either."""
    for attempt in range(3):
        a0 = avail_gib()
        log = tmp_path / f"hog-{attempt}"  # a fresh folder: start_hog waits for this hog's "started"
        log.mkdir()
        # Each retry touches more: MemAvailable here can fall by only two thirds of what is touched.
        rate, cap, *flags = hog
        tree = start_hog(log, rate, int(cap * (1 + attempt / 2)), *flags)
        guard = Guard(tree, make_lines(a0), **guard_kw)
        report = guard.run()
        if _reached(guard, report, round(a0 - deepest, 3)):  # rounded as lines() places it
            return a0, tree, guard, report
        tree.kill()
    pytest.fail(f"MemAvailable never fell {deepest} GiB in 3 attempts: other programs kept freeing memory")


def _reached(guard, report, need_gib):
    """Was the line at `need_gib` crossed (the decider's own comparison) or acted on?"""
    low = guard.decider.low_water
    if low is not None and low < int(need_gib * GiB):
        return True
    if report is None:
        return False
    kill = guard.lines.kill_below_gib
    return report.threshold_gib <= need_gib or (
        report.escalation in ("below kill line during grace", "predicted kill line during grace")
        and kill is not None
        and kill <= need_gib
    )


def lines(a0, warn=None, term=None, kill=None, grace=5.0):
    """Lines `x` GiB below a0 (None = off)."""
    at = lambda x: None if x is None else round(a0 - x, 3)  # noqa: E731
    return GuardLines(warn_below_gib=at(warn), term_below_gib=at(term), kill_below_gib=at(kill), grace_s=grace)


def test_kill_line_kills_the_hog(tmp_path):
    trips = []
    a0, tree, _guard, report = guarded_hog(
        tmp_path, (1024, 2048, "--procs", "2", "--hold", "3"), lambda a0: lines(a0, kill=0.7), 0.7, on_trip=trips.append
    )
    assert report is not None and report.line == "kill" and report.reason in ("below", "predicted")
    assert len(trips) == 1 and trips[0].action is GuardAction.KILL
    assert report.gone and report.gone_after_s < 5 and not report.escalated
    assert not alive(tree.pid) and tree.returncode() == -9
    assert report.threshold_gib == pytest.approx(a0 - 0.7, abs=0.01)
    assert report.mem_available_gib < report.threshold_gib + 0.3
    assert report.low_water_gib <= report.mem_available_gib and report.low_water_gib > a0 - 2.1
    assert report.fall_rate_gib_s > 0.1
    assert report.last_samples and report.last_samples[-1][0] <= 0
    assert [s["signal"] for s in report.signalled if s["target"].startswith("group")] == ["SIGKILL"]
    d = report.to_dict()
    assert d["line"] == "kill" and "memory guard tripped: kill line" in report.summary()


def test_term_line_stops_the_hog_gracefully(tmp_path):
    _, tree, _, report = guarded_hog(
        tmp_path, (1024, 1800, "--hold", "3"), lambda a0: lines(a0, term=0.7, kill=3.0), 0.7
    )
    assert report is not None and report.line == "term" and not report.escalated and report.gone
    assert [s["signal"] for s in report.signalled] == ["SIGTERM"]
    assert tree.returncode() == -15


def test_term_ignored_escalates_after_grace(tmp_path):
    _, tree, _, report = guarded_hog(
        tmp_path, (1024, 1800, "--ignore-term", "--hold", "3"), lambda a0: lines(a0, term=0.7, kill=3.0, grace=0.5), 0.7
    )
    assert report is not None and report.line == "term" and report.escalated and report.escalation == "grace expired"
    assert report.gone and 0.5 <= report.gone_after_s < 5
    assert [s["signal"] for s in report.signalled if s["target"].startswith("group")] == ["SIGTERM", "SIGKILL"]
    assert tree.returncode() == -9


def test_kill_line_during_grace_escalates_at_once(tmp_path):
    t = time.monotonic()
    _, tree, _, report = guarded_hog(
        tmp_path,
        # 3 GiB: on this VM MemAvailable falls by only about two thirds of what a hog touches,
        # and 2 GiB left it just short of the kill line 1 GiB down.
        (1024, 3072, "--ignore-term", "--procs", "2", "--hold", "3"),
        lambda a0: lines(a0, term=0.5, kill=1.0, grace=30),
        1.0,
    )
    assert report is not None and report.line == "term" and report.escalated
    assert report.escalation in ("below kill line during grace", "predicted kill line during grace")
    assert time.monotonic() - t < 25  # never waited out the 30 s grace
    assert report.gone and not alive(tree.pid)


def test_warn_notifies_and_lets_the_command_finish(tmp_path):
    warnings = []
    _, tree, _guard, report = guarded_hog(
        tmp_path,
        (1024, 1536, "--hold", "0.3"),
        lambda a0: lines(a0, warn=0.5, term=None, kill=None),
        0.5,
        on_warn=warnings.append,
    )
    assert report is None
    assert len(warnings) == 1 and warnings[0].line == "warn"
    assert tree.returncode() == 0


def test_disarmed_guard_does_nothing(tmp_path):
    events = []
    _, tree, guard, report = guarded_hog(
        tmp_path,
        (1024, 1536, "--hold", "0.3"),
        lambda a0: lines(a0, warn=0.2, term=0.3, kill=0.4),
        0.4,
        armed=False,
        on_warn=events.append,
        on_trip=events.append,
    )
    assert report is None and events == [] and guard.report is None  # below every line, disarmed
    assert tree.returncode() == 0


def test_trip_takes_the_whole_tree_with_reparented_grandchild(tmp_path):
    tree = spawn([sys.executable, str(PROCS / "tree.py"), "root", str(tmp_path)], tmp_path / "log")
    deadline = time.monotonic() + 10
    grand = int(wait_file(tmp_path / "grand.pid"))  # the file may exist a moment before its pid is in it
    child = int(wait_file(tmp_path / "child.pid"))
    tree.refresh()
    intermediate = read_stat(grand).ppid
    (tmp_path / "orphan").touch()  # the grandchild's parent exits: re-parented (to PID 1 or a subreaper)
    while read_stat(grand).ppid == intermediate:
        assert time.monotonic() < deadline, "grandchild was not re-parented"
        time.sleep(0.01)
    assert read_stat(grand).ppid not in {tree.pid, child, intermediate}
    a0 = avail_gib()
    # Real memory, lines above what is available now: the term line is crossed at the first sample.
    report = Guard(tree, GuardLines(warn_below_gib=None, term_below_gib=a0 + 4, kill_below_gib=0.01, grace_s=0.5)).run()
    assert (
        report.line == "term" and report.escalated and report.escalation == "grace expired"
    )  # the child ignores SIGTERM
    assert report.gone and report.survivors == []
    assert not alive(tree.pid) and not alive(child) and not alive(grand)


def test_guard_in_a_thread_armed_later_trips_and_reports(tmp_path):
    # Precondition: the hog takes MemAvailable below the disarmed kill line. Other programs freeing
    # memory meanwhile (a previous test's server exiting) can hide its fall: retry, as guarded_hog does.
    for attempt in range(3):
        a0 = avail_gib()
        log = tmp_path / f"hog-{attempt}"
        log.mkdir()
        tree = start_hog(log, 1024, 2048, "--hold", "8")
        reports = []
        guard = Guard(tree, lines(a0, kill=0.6), armed=False, on_report=reports.append)
        guard.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            guard.decider.low_water is None or guard.decider.low_water > (a0 - 0.9) * GiB
        ):
            time.sleep(0.01)
        if guard.decider.low_water is not None and guard.decider.low_water <= (a0 - 0.9) * GiB:
            break
        guard.close()
        tree.kill()
    else:
        pytest.fail("MemAvailable never fell 0.9 GiB in 3 attempts: other programs kept freeing memory")
    assert guard.report is None and alive(tree.pid)  # below the line, but disarmed
    guard.arm()
    guard.join(10)
    assert reports and reports[0] is guard.report and guard.report.line == "kill" and guard.report.gone
    assert not alive(tree.pid)


def test_request_stop_takes_no_lock_so_a_signal_handler_cannot_deadlock(tmp_path):
    # A signal handler runs on the main thread between bytecodes, possibly while Event.wait()
    # there holds the Event's lock: Event.set() (close()) would then block forever.
    import threading

    tree = spawn(["sleep", "30"], tmp_path / "log")
    guard = Guard(tree, GuardLines())
    done = threading.Event()

    def handler_while_lock_held():
        with guard._closed._cond:  # what the interrupted Event.wait() holds
            guard.request_stop()
            done.set()

    t = threading.Thread(target=handler_while_lock_held, daemon=True)
    t.start()
    t.join(2)
    assert done.is_set(), "request_stop() blocked on the Event's lock"
    start = time.monotonic()
    assert guard.run() is None and time.monotonic() - start < 1  # the loop sees the request at once
    assert alive(tree.pid)  # stopping the guard leaves the tree alone
    tree.kill()


def test_a_fast_fall_trips_on_its_rate_before_any_line_is_crossed(tmp_path):
    """A real hog falling ~1 GiB/s: with the fall-rate line at 0.3 GiB/s and 3 s of lookahead (the
    kill line 1.8 GiB away is less than 3 s off at that rate), SIGTERM goes out as soon as the fall
    is measured, while MemAvailable is still well above the term line."""
    a0, _tree, _guard, report = guarded_hog(
        tmp_path,
        (1024, 2048, "--procs", "2", "--hold", "5"),
        lambda a0: dataclasses.replace(lines(a0, term=1.6, kill=1.8), fall_rate_gib_s=0.3, fall_lookahead_s=3.0),
        0.6,
    )
    assert report is not None and report.reason == "fall rate" and report.line == "fall"
    assert report.mem_available_gib > a0 - 1.6 + 0.2  # well above the term line
    assert report.fall_rate_gib_s >= 0.3 and report.gone


def _anon_and_shmem() -> int:
    """Memory MemAvailable cannot reclaim that processes hold (AnonPages + Shmem): what a program
    beside the test allocates, and what page-cache churn does not touch."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields["AnonPages"] + fields["Shmem"]


def test_page_cache_churn_never_trips_the_guard(tmp_path):
    """Reading a file fills the page cache: MemFree falls by its size, MemAvailable does not.
    Lines just under MemAvailable stay untouched while MemFree falls far below them."""
    data = tmp_path / "big.bin"
    size = 1536 << 20
    with open(data, "wb") as f:
        block = os.urandom(8 << 20)
        for _ in range(size // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    # The term line is 0.75 GiB under MemAvailable: a program beside the test that takes that much
    # (anonymous or shared memory, which the churn does not touch) trips it for a reason of its own.
    # Then, and only then, the attempt is made again.
    for attempt in range(3):
        guard, before, lowest_free, most_cached, others = _churn_under_guard(data, tmp_path / f"churn{attempt}.log")
        if guard.report is None or others < 0.25 * GiB:  # the churn itself holds 8 MiB
            break
        _until_others_hold_still()
    assert guard.report is None and guard.decider.state == "watching"
    # The test means something only if the file really went through the page cache (its growth:
    # other programs freeing memory at the same time can hide part of MemFree's fall) and MemFree
    # fell past every line.
    assert most_cached > before.page_cache + 1.0 * GiB, "the page cache never grew: the file was cached already"
    assert lowest_free < guard.lines.bytes("kill")


def _until_others_hold_still(timeout: float = 15.0) -> None:
    """Until AnonPages + Shmem moves less than 64 MiB in half a second (the other program is done)."""
    deadline = time.monotonic() + timeout
    last = _anon_and_shmem()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _anon_and_shmem()
        if abs(now - last) < 64 << 20:
            return
        last = now


def _churn_under_guard(data, log):
    """(the guard, the sample before, lowest MemFree, most page cache, the most that AnonPages +
    Shmem grew by) over three reads of `data` through the page cache under a guard."""
    from sparktui.runtime.host.memory import read_memory

    before = read_memory(psi=False)
    held = _anon_and_shmem()
    # each read's pages stay cached 0.5 s: the sampler below sees the peak on a busy machine too
    tree = spawn([sys.executable, str(PROCS / "churn.py"), str(data), "3", "0.5"], log)
    guard = Guard(tree, lines(before.mem_available / GiB, warn=0.5, term=0.75, kill=1.0), track_interval=0.25)
    thread = guard.start()
    lowest_free, most_cached, others = before.mem_free, before.page_cache, 0
    while thread.is_alive():
        now = read_memory(psi=False)
        lowest_free, most_cached = min(lowest_free, now.mem_free), max(most_cached, now.page_cache)
        others = max(others, _anon_and_shmem() - held)
        time.sleep(0.02)
    if guard.report is not None:  # a trip ends the loop at once: look on a little at what others took
        for _ in range(10):
            others = max(others, _anon_and_shmem() - held)
            time.sleep(0.05)
    return guard, before, lowest_free, most_cached, others


def test_a_memory_stall_wakes_the_guard_between_samples(tmp_path, monkeypatch):
    """The kernel's PSI trigger reports POLLPRI on its fd. Here the fd is a loopback TCP socket
    with urgent data pending (the same POLLPRI, on cue): the guard, planning its next sample ~6 s
    away, samples again at once."""
    import socket
    import threading

    from sparktui.runtime.guard import guard as guard_mod
    from sparktui.runtime.host.memory import PressureTrigger, PsiTrigger

    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    armed: list[PsiTrigger] = []

    def fake_open(trigger: PsiTrigger) -> PressureTrigger:
        armed.append(trigger)
        return PressureTrigger(os.dup(receiver.fileno()), trigger, "loopback stand-in")

    monkeypatch.setattr(guard_mod, "open_pressure_trigger", fake_open)
    tree = spawn(["sleep", "60"], tmp_path / "log")
    guard = Guard(tree, GuardLines(), read_available=lambda: 100 * GiB, max_interval=30.0, track_interval=None)
    thread = threading.Thread(target=guard.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: guard.samples_taken == 1 and guard.last is not None, what="the first sample")
        assert guard.last.next_interval > 5 and guard.pressure == guard_mod.PRESSURE_TRIGGER == armed[0]
        sender.send(b"!", socket.MSG_OOB)
        wait_for(lambda: guard.pressure_wakes >= 1 and guard.samples_taken >= 2, timeout=5, what="a stall wake-up")
        receiver.recv(1, socket.MSG_OOB)  # consumed, as poll() consumes a PSI event
    finally:
        guard.close()  # wakes the loop from its 30 s sleep at once
        thread.join(5)
        tree.kill()
        for s in (sender, receiver, listener):
            s.close()
    assert not thread.is_alive(), "close() did not wake the sleeping guard"


def test_without_psi_the_guard_samples_alone(tmp_path, monkeypatch):
    from sparktui.runtime.guard import guard as guard_mod

    def refuse(trigger):
        raise OSError(2, "/proc/pressure/memory: no PSI on this kernel")

    monkeypatch.setattr(guard_mod, "open_pressure_trigger", refuse)
    tree = spawn(["sleep", "60"], tmp_path / "log")
    guard = Guard(tree, GuardLines(), read_available=lambda: 100 * GiB)
    guard.start()
    try:
        wait_for(lambda: guard.samples_taken >= 3, what="samples without PSI")
        assert guard.pressure is None and "no PSI" in guard.pressure_error
    finally:
        guard.close()
        guard.join(5)
        tree.kill()


def loopback_trigger(monkeypatch):
    """A stand-in PSI trigger (as in the test above): a loopback socket whose urgent byte reports
    POLLPRI on cue. Returns (send one event, consume it, close all)."""
    import socket

    from sparktui.runtime.guard import guard as guard_mod
    from sparktui.runtime.host.memory import PressureTrigger, PsiTrigger

    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()

    def fake_open(trigger: PsiTrigger) -> PressureTrigger:
        return PressureTrigger(os.dup(receiver.fileno()), trigger, "loopback stand-in")

    monkeypatch.setattr(guard_mod, "open_pressure_trigger", fake_open)

    def close() -> None:
        for s in (sender, receiver, listener):
            s.close()

    return (lambda: sender.send(b"!", socket.MSG_OOB)), (lambda: receiver.recv(1, socket.MSG_OOB)), close


def test_at_rest_with_a_psi_trigger_the_guard_rests_and_samples_densely_after_a_stall(tmp_path, monkeypatch):
    """Issue 25: far from the lines at steady state, with a PSI trigger armed, the guard plans 5 s
    between samples; when the trigger fires it samples at once and then every PSI_EVERY for
    PSI_WINDOW (the stall's share judged over a window of samples), then rests again."""
    from sparktui.runtime.guard.guard import PSI_EVERY, STEADY_EVENT_INTERVAL

    fire, consume, close = loopback_trigger(monkeypatch)
    tree = spawn(["sleep", "60"], tmp_path / "log")
    guard = Guard(tree, GuardLines(), read_available=lambda: 100 * GiB, track_interval=None)
    guard.set_phase("ready")
    guard.start()
    try:
        wait_for(lambda: guard.samples_taken >= 1 and guard.last is not None, what="the first sample")
        assert guard.decider.kernel_wakes and guard.last.next_interval == STEADY_EVENT_INTERVAL
        before = guard.samples_taken
        fire()
        wait_for(lambda: guard.pressure_wakes >= 1, timeout=3, what="the stall wake-up")
        consume()  # as poll() consumes a PSI event
        # dense: several samples within the window, where the resting pace would take 5 s for one
        wait_for(lambda: guard.samples_taken >= before + 4, timeout=3, what="dense samples after the stall")
        assert guard.last.next_interval == STEADY_EVENT_INTERVAL  # the plan is unchanged: only the wait is short
        wait_for(lambda: guard._dense_until < guard.clock(), timeout=5, what="the end of the dense window")
        settled = guard.samples_taken
        time.sleep(10 * PSI_EVERY)
        assert guard.samples_taken <= settled + 1  # resting again
    finally:
        guard.close()
        guard.join(5)
        tree.kill()
        close()


def test_a_new_phase_new_lines_or_arming_are_judged_at_once_not_after_a_resting_sleep(tmp_path):
    tree = spawn(["sleep", "60"], tmp_path / "log")
    # a pace of ~6 s (max_interval 30 s, the headroom at 16 GiB/s: 94 GiB above the term line)
    guard = Guard(tree, GuardLines(), read_available=lambda: 100 * GiB, max_interval=30.0, track_interval=None)
    guard.start()
    try:
        wait_for(lambda: guard.samples_taken >= 1 and guard.last is not None, what="the first sample")
        assert guard.last.next_interval > 5
        for change in (
            lambda: guard.set_phase("loading_weights"),
            lambda: guard.set_lines(dataclasses.replace(GuardLines(), kill_below_gib=3.0)),
            guard.arm,
        ):
            seen = guard.samples_taken
            change()
            wait_for(lambda: guard.samples_taken > seen, timeout=5, what="a sample at once")  # noqa: B023
            guard.set_phase("starting")  # back to the resting pace for the next change
            wait_for(lambda: guard.last.next_interval > 5, timeout=5, what="the resting pace")
    finally:
        guard.close()
        guard.join(5)
        tree.kill()


def test_a_pressure_trip_report_names_the_pressure_not_a_line():
    # `sparktui guard` printed "tripped: psi line (psi full): … vs line 6.00 GiB": the 6 GiB was the term line's
    from sparktui.runtime.guard.guard import TripReport

    report = TripReport("psi", "psi full", 6.0, 6.36, 6.3, 0.45, [], [], False, None, True, 1.9, [], 0.0)
    head = report.summary().splitlines()[0]
    assert head.startswith("memory guard tripped: memory pressure (PSI full") and "line" not in head, head

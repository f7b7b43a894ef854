"""The supervisor's parts on their own, in-process (no vLLM, no child process): each holds its own
state and is given what it needs, so each can be driven directly. The supervisor as a whole, with
real processes, is in test_supervisor.py."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.errors import UserError
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.server.command_socket import CommandSocket
from sparktui.runtime.server.logtail import LogTail
from sparktui.runtime.server.metrics_pace import METRICS_EVERY_S, METRICS_IDLE_MAX_S, MetricsOnDemand
from sparktui.runtime.server.record_file import RecordFile
from sparktui.runtime.server.wakeup import Wakeup
from tests.support import wait_for


class NoMetrics:
    """An endpoint whose /metrics does not answer (the scrape records why)."""

    def __init__(self) -> None:
        self.asked = 0

    def metrics(self) -> Any:
        self.asked += 1
        return SimpleNamespace(snapshot=None, error="connection refused")


def test_metrics_go_to_the_idle_pace_at_once_while_nobody_reads_them_and_a_reader_brings_the_pace_back() -> None:
    lock = threading.RLock()
    stored: list[dict[str, Any]] = []
    pace = MetricsOnDemand(lock, wake=lambda: None, healthy=lambda: True)
    endpoint = NoMetrics()
    gaps = []
    for _ in range(8):
        before = time.monotonic()
        pace.poll(endpoint, seen=lambda _: None, store=stored.append)  # type: ignore[arg-type]
        gaps.append(round(pace.next_at - before))
    # no doubling from the busy pace: each idle scrape costs ~15-20 ms of CPU (issue 25)
    assert gaps == [METRICS_IDLE_MAX_S] * 8
    assert pace.count == 8 and stored[-1]["error"] == "connection refused"
    pace.note_activity()  # a log line that is not a probe: the busy pace from the last scrape on
    assert pace.next_at - time.monotonic() <= METRICS_EVERY_S


def test_a_reader_of_a_healthy_server_waits_for_a_fresh_scrape_and_one_of_a_starting_server_does_not() -> None:
    lock = threading.RLock()
    healthy = [False]
    woken = threading.Event()
    pace = MetricsOnDemand(lock, wake=woken.set, healthy=lambda: healthy[0])
    pace.want()
    assert not woken.is_set()  # nothing to scrape yet: no wait, no wake
    healthy[0] = True
    endpoint = NoMetrics()

    def loop() -> None:  # the supervisor's loop: woken, it scrapes
        woken.wait(5)
        pace.poll(endpoint, seen=lambda _: None, store=lambda _: None)  # type: ignore[arg-type]

    thread = threading.Thread(target=loop)
    thread.start()
    pace.want()  # returns once the scrape it asked for is done
    thread.join(5)
    assert woken.is_set() and endpoint.asked == 1 and pace.count == 1


def test_a_state_file_that_cannot_be_written_is_said_once_and_said_again_when_it_can(tmp_path: Path) -> None:
    said: list[str] = []
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    guard = pr.GuardRecord(armed=True, lines=GuardLines(None, None, None))
    record = pr.StateRecord(status="starting", port=8000, supervisor=pr.ProcessRef(pid=1, start_time=1), guard=guard)
    bad = RecordFile(blocker / "8000.json", said.append)
    assert not bad.write(record) and not bad.write(record)
    assert bad.unsaved and len(said) == 1 and "cannot write the state file" in said[0]
    blocker.unlink()
    assert bad.write(record) and not bad.unsaved
    assert said[1] == f"the state file {blocker / '8000.json'} is written again"
    assert st.read_state(blocker / "8000.json") is not None
    assert (blocker / "8000.json").stat().st_mode & 0o777 == 0o600


def test_one_command_socket_per_port_and_it_answers_through_the_supervisors_verbs(isolated: Path) -> None:
    first = CommandSocket(18999, lambda _: None)
    first.claim()
    try:
        with pytest.raises(UserError, match="another sparktui supervisor already holds this port"):
            CommandSocket(18999, lambda _: None).claim()
        asked: list[pr.AnyRequest] = []

        def answer(req: pr.AnyRequest) -> pr.Reply:
            asked.append(req)
            return pr.Reply(ok=True)

        first.serve(answer, lambda: None)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(first.name)
            conn.sendall(b'{"cmd": "status"}\n')
            reply = conn.recv(65536)
        assert b'"ok":true' in reply.replace(b" ", b"") and isinstance(asked[0], pr.StatusRequest)
    finally:
        first.close()
        st.HELD_HERE.discard(18999)


def test_a_stop_waiting_on_the_end_gets_its_reply_before_the_supervisor_exits(isolated: Path) -> None:
    """The handler threads are daemons: the supervisor's end waits (drain) until a stop that waited
    for it has sent its final state, however slow that thread is under load; a client that never
    sends its request holds the end only for the bound."""
    commands = CommandSocket(18998, lambda _: None)
    commands.claim()
    finished = threading.Event()

    def answer(req: pr.AnyRequest) -> pr.Reply:
        finished.wait(10)
        time.sleep(0.5)  # the snapshot, slow on a loaded box
        return pr.Reply(ok=True)

    try:
        commands.serve(answer, lambda: None)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(commands.name)
            conn.sendall(b'{"cmd": "stop", "wait": 10}\n')
            wait_for(lambda: commands.drain(0) is False, 5, "the stop to be taken")
            commands.close()
            finished.set()
            assert commands.drain(5.0)
            # A Unix socket's send puts the reply in the peer's queue before it returns: it is there now
            try:
                reply = conn.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                reply = b""
        assert b'"ok":true' in reply.replace(b" ", b""), "the stop's reply was not sent when drain returned"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:  # connects, never sends
            again = CommandSocket(18997, lambda _: None)
            again.claim()
            again.serve(answer, lambda: None)
            silent.connect(again.name)
            wait_for(lambda: again.drain(0) is False, 5, "the silent connection to be taken")
            again.close()
            started = time.monotonic()
            assert not again.drain(0.3)
            assert time.monotonic() - started < 4.0  # its handler waits 5 s for the request: not waited for
    finally:
        commands.close()
        st.HELD_HERE.discard(18998)
        st.HELD_HERE.discard(18997)


def test_the_loop_sleeps_until_woken_and_counts_why(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    wakeup = Wakeup()
    follower = LogTail(log, keep=1)
    sleep = wakeup.sleeper(follower, pid=os.getpid())
    try:
        assert follower.poll() == []  # as the loop does before it sleeps: the file is open and watched
        sleep.sleep(0.0)
        assert wakeup.wakes["timer"] == 1
        wakeup.wake()
        started = time.monotonic()
        sleep.sleep(30.0)
        assert time.monotonic() - started < 10 and wakeup.wakes["request"] == 1
        if sleep.log_fd is not None:  # inotify: a write to the log wakes it too
            with log.open("a") as f:
                f.write("INFO a line\n")
            sleep.sleep(30.0)
            assert wakeup.wakes["log"] == 1 and follower.poll() == ["INFO a line"]
    finally:
        sleep.close()
        follower.close()
        wakeup.close()
    wakeup.wake()  # after close: harmless (a late signal handler)


def test_the_guards_line_in_the_record_is_rewritten_for_news_never_for_time_passing(monkeypatch) -> None:
    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.guard.guard import Decision, GuardAction
    from sparktui.runtime.server import guard_wiring

    record = pr.StateRecord(
        status="running", port=8000, supervisor=pr.ProcessRef(pid=1, start_time=1),
        guard=pr.GuardRecord(armed=True, lines=GuardLines()),
    )  # fmt: skip
    wiring = guard_wiring.GuardWiring(
        GuardSettings(), 8000, lambda _: None, lock=threading.RLock(), record=lambda: record, save=lambda: True,
        reaper=lambda: None, wake=lambda: None, say=lambda _: None,
    )  # fmt: skip
    guard = SimpleNamespace(
        armed=True, pressure=None, pressure_wakes=0, pressure_error=None, kernel_access=None, kernel_mode="off",
        kernel_events=[], last=None,
    )  # fmt: skip
    wiring.guard = guard  # type: ignore[assignment]
    clock = [1000.0]
    monkeypatch.setattr(guard_wiring.time, "time", lambda: clock[0])
    gib = 1 << 30

    def sample(available_gib: float) -> bool:
        guard.last = Decision(GuardAction.NONE, 1.0, available=int(available_gib * gib))
        return wiring.status()

    assert sample(20.0) is True  # the first line
    clock[0] += 3600.0  # an hour at rest, memory drifting a little: nothing to write
    assert sample(20.05) is False and record.guard.last is not None and record.guard.last.at == 1000.0
    assert sample(19.7) is False  # other programs moving a few hundred MiB: still nothing
    # ... while a live answer carries the latest sample all the same
    line = wiring.line()
    assert line is not None and line.available_gib == 19.7 and line.at == 4600.0
    assert sample(19.45) is True  # moved 0.55 GiB since the line written: news
    assert record.guard.last.available_gib == 19.45 and record.guard.last.at == 4600.0


def test_the_guard_wakes_the_loop_for_a_move_at_most_every_few_seconds_and_at_once_for_an_alert(monkeypatch) -> None:
    """Issue 25: at rest the loop has no timer for the guard's line; the guard's thread wakes it for
    news. Memory swinging 0.5 GiB at every sample wakes it once per NEWS_EVERY_S, not at every sample;
    a new alert (or action) at once."""
    from sparktui.core.profiles import GuardSettings
    from sparktui.runtime.guard.guard import Decision, GuardAction
    from sparktui.runtime.server import guard_wiring

    record = pr.StateRecord(
        status="running", port=8000, supervisor=pr.ProcessRef(pid=1, start_time=1),
        guard=pr.GuardRecord(armed=True, lines=GuardLines()),
    )  # fmt: skip
    wakes: list[str] = []
    wiring = guard_wiring.GuardWiring(
        GuardSettings(), 8000, lambda _: None, lock=threading.RLock(), record=lambda: record, save=lambda: True,
        reaper=lambda: None, wake=lambda why="request": wakes.append(why), say=lambda _: None,
    )  # fmt: skip
    guard = SimpleNamespace(
        armed=True, pressure=None, pressure_wakes=0, pressure_error=None, kernel_access=None, kernel_mode="off",
        kernel_events=[], last=None,
    )  # fmt: skip
    wiring.guard = guard  # type: ignore[assignment]
    clock = [1000.0]
    monkeypatch.setattr(guard_wiring.time, "monotonic", lambda: clock[0])
    gib = 1 << 30
    guard.last = Decision(GuardAction.NONE, 1.0, available=20 * gib)
    wiring.status()  # the loop's first look: the line it recorded
    for i in range(8):  # a sample a second, each 0.6 GiB from the last; the loop looks after each wake
        clock[0] += 1.0
        guard.last = Decision(GuardAction.NONE, 1.0, available=int((20 - 0.6 * (i % 2 + 1)) * gib))
        wiring._settled()
        wiring.status()
    assert wakes == ["guard", "guard"]  # at 1001 s and 1006 s
    clock[0] += 1.0
    guard.last = Decision(GuardAction.NONE, 0.01, available=int(19.4 * gib), alert=True)
    wiring._settled()
    assert wakes == ["guard", "guard", "guard"]  # the alert at once


def test_a_live_answer_carries_the_guards_latest_sample_not_the_files_older_line(isolated: Path) -> None:
    from sparktui.core.profiles import parse_profile
    from sparktui.runtime.guard.guard import Decision, GuardAction
    from sparktui.runtime.server.supervisor import Supervisor

    sup = Supervisor(parse_profile('[serve]\nmodel = "/models/tiny"\nport = 8123\n', name="tiny"))
    written = pr.GuardLast(action="none", available_gib=20.0, rate_gib_s=0.0, interval_s=1.0, at=1.0)
    sup.state = pr.StateRecord(
        status="running", port=8123, supervisor=pr.ProcessRef(pid=1, start_time=1),
        guard=pr.GuardRecord(armed=True, lines=GuardLines(), last=written),
    )  # fmt: skip
    sup.guarding.guard = SimpleNamespace(  # type: ignore[assignment]
        last=Decision(GuardAction.NONE, 1.0, available=int(19.7 * (1 << 30))), sampled_at=None, running=True
    )
    live = sup.snapshot()
    assert live is not None and live.guard.last is not None
    assert live.guard.last.available_gib == 19.7 and live.guard.last.at > 1.0
    assert sup.record.guard.last == written  # the record itself is left for the loop to rewrite on news
    sup.wakeup.close()


@pytest.mark.slow  # its tree is a real child (sleep)
def test_an_event_another_thread_adds_reaches_the_state_file_when_the_loop_has_nothing_else_to_write(
    isolated: Path,
) -> None:
    """Issue 25: the guard's thread records a deferral (or a warning) and wakes the loop. The loop,
    woken a moment earlier for the same sample, has already written the guard's new line; woken
    again, it finds the line unchanged and must still write the event, or `status` and the file never
    show why this server's guard stands down. The loop runs for real here (poll(), the wake pipe, a
    real child as its tree); only the guard is a stand-in whose sample the test sets."""
    from sparktui.core.profiles import parse_profile
    from sparktui.runtime.guard.guard import Decision, GuardAction
    from sparktui.runtime.host import proc
    from sparktui.runtime.server.supervisor import Supervisor

    sup = Supervisor(parse_profile('[serve]\nmodel = "/models/tiny"\nport = 8124\n', name="tiny"))
    sup.state = pr.StateRecord(
        status="running", port=8124, supervisor=pr.ProcessRef(pid=os.getpid(), start_time=1),
        guard=pr.GuardRecord(armed=True, lines=GuardLines()),
    )  # fmt: skip
    log = isolated / "vllm.log"
    sup.tree = proc.spawn(["sleep", "60"], log, contain=False)
    guard = SimpleNamespace(
        armed=True, pressure=None, pressure_wakes=0, pressure_error=None, kernel_access=None, kernel_mode="off",
        kernel_events=[], last=Decision(GuardAction.NONE, 1.0, available=20 << 30), sampled_at=None, running=True,
    )  # fmt: skip
    sup.guarding.guard = guard  # type: ignore[assignment]
    sup.endpoint = SimpleNamespace()  # type: ignore[assignment]  # never asked: the server is healthy already
    sup.healthy, sup.metrics.next_at = True, float("inf")
    follower = LogTail(log, keep=1)
    sleep = sup.wakeup.sleeper(follower, sup.tree.pid)
    ended: list[str] = []
    loop = threading.Thread(target=lambda: ended.append(sup._watch(follower, sleep.sleep, sleep.log_fd is None)))
    loop.start()
    try:

        def on_file() -> pr.StateRecord | None:
            return st.read_state(st.state_path(8124))

        def events(kind: str) -> list[pr.EventRecord]:
            state = on_file()
            return [e for e in (state.events if state else []) if e.kind == kind]

        wait_for(lambda: (s := on_file()) is not None and s.guard.last is not None, 5, "the first line written")
        # the guard's sample at the term line: the loop is woken and writes the line ...
        guard.last = Decision(GuardAction.TERM, 0.0, "term", "below", 19 << 30, 18 << 30)
        sup.wakeup.wake()
        wait_for(lambda: (s := on_file()) and s.guard.last and s.guard.last.action == "term", 5, "the term line")
        # ... then the stop order's answer, recorded on the guard's thread, wakes it again
        defer = sup.guarding._deferral(lambda _: "port 9 (other, priority 0, 4.0 GiB) is stopped first")  # type: ignore[arg-type]
        assert defer(guard.last) is not None
        deferred = wait_for(lambda: events("GuardDeferred"), 5, "the deferral in the state file")
        assert "port 9" in deferred[0].field("why")
    finally:
        sup.request("stop", "test")
        loop.join(10)
        sleep.close()
        follower.close()
        sup.tree.kill()
        sup.wakeup.close()
    assert ended == ["stop"]

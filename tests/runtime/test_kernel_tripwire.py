"""The guard's kernel tripwire against the real /dev/kmsg (we are root) and the stub vLLM.

Every line a test writes carries "[sparktui-test ID]" with its own ID: the guards of other tests
running on this machine at the same time ignore it (runtime/kernel_watch.py), while the matcher
that reads it is the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from sparktui.core.kernel_log import KernelEvent
from sparktui.runtime.guard import kernel_watch
from sparktui.runtime.server import supervisor
from tests.runtime.test_supervisor import (
    engine_pid,
    mem_available_gib,
    members,
    port_of,
    recorded,
    running_state,
    sparktui,
    start_foreground,
)
from tests.support import hog_mib, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.access("/dev/kmsg", os.W_OK), reason="writing /dev/kmsg needs root"),
]

NO_MEMORY = (
    "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)


@pytest.fixture
def test_id(monkeypatch: pytest.MonkeyPatch) -> str:
    ident = uuid.uuid4().hex[:12]
    monkeypatch.setenv(kernel_watch.TEST_ID_ENV, ident)
    return ident


def write_kmsg(text: str, test_id: str, level: int = 3) -> str:
    """Write one line to the kernel log as root can (facility "user", as from user space)."""
    line = f"{text} [sparktui-test {test_id}]"
    with open("/dev/kmsg", "w") as f:
        f.write(f"<{level}>{line}\n")
    return line


def test_the_watch_sees_new_lines_only_and_only_its_own_test_lines(test_id: str) -> None:
    before = write_kmsg(NO_MEMORY + " before", test_id)
    seen: list[KernelEvent] = []
    got = threading.Event()

    def on_event(event: KernelEvent) -> None:
        seen.append(event)
        got.set()

    watch = kernel_watch.KernelWatch(on_event)
    assert watch.start().source == "kmsg"
    try:
        write_kmsg(NO_MEMORY + " of another test", "someoneelse")
        line = write_kmsg(NO_MEMORY, test_id)
        assert got.wait(5)
        time.sleep(0.2)  # anything else would have arrived by now
        assert [e.line for e in seen] == [line]
        assert before not in [e.line for e in seen]
    finally:
        watch.close()


def test_a_driver_out_of_memory_line_stops_the_tree_at_once_and_status_quotes_it(make_profile, env, test_id) -> None:
    profile = make_profile()
    port = port_of(profile)
    env = {**env, kernel_watch.TEST_ID_ENV: test_id}
    sup = start_foreground(profile, env)
    try:
        state = running_state(port)
        tree = members(state)
        assert state["guard"]["kernel"]["source"] == "kmsg"
        line = write_kmsg(NO_MEMORY, test_id)
        written = time.monotonic()
        wait_for(lambda: not any(i.is_alive() for i in tree), 5, "the tree to be gone")
        gone_after = time.monotonic() - written
        assert gone_after < 1.0, f"the tree took {gone_after:.2f} s to go"
        assert sup.wait(30) == supervisor.GUARD_EXIT
        final = recorded(port)
        assert final["exit"]["reason"] == "guard"
        assert final["trip"]["line"] == "kernel" and final["trip"]["kernel_line"] == line
        assert final["trip"]["signalled"][0]["signal"] == "SIGTERM"
        out = sparktui(["status", "--port", str(port)], env)
        assert out.returncode == 0, out.stderr
        assert line in out.stdout
        assert "kernel log" in out.stdout
    finally:
        sup.kill()
        sup.wait()


def test_a_line_from_before_the_launch_does_not_trip_it_and_an_xid_of_its_pid_is_shown(
    make_profile, env, test_id
) -> None:
    write_kmsg(NO_MEMORY, test_id)  # before the launch: the driver's trouble of another time
    profile = make_profile()
    port = port_of(profile)
    env = {**env, kernel_watch.TEST_ID_ENV: test_id}
    sup = start_foreground(profile, env)
    try:
        state = running_state(port)
        pid = engine_pid(state)
        xid = write_kmsg(f"NVRM: Xid (PCI:0000:01:00): 31, pid={pid}, name=VLLM::EngineCore, Ch 00000008", test_id)
        other = write_kmsg("NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=init, Ch 00000009", test_id)
        wait_for(
            lambda: any(e.get("kind") == "xid" for e in recorded(port)["guard"]["kernel"]["events"]),
            10,
            "the Xid line in the state",
        )
        assert sup.poll() is None  # neither the old line nor an Xid stops it
        events = recorded(port)["guard"]["kernel"]["events"]
        assert [(e["kind"], e["pid"], e["line"]) for e in events] == [("xid", pid, xid)]  # not pid 1's
        out = sparktui(["status", "--port", str(port)], env)
        assert f"Xid 31 for pid {pid}" in out.stdout and other not in out.stdout
        stopped = sparktui(["stop", "--port", str(port)], env)
        assert stopped.returncode == 0, stopped.stderr
        assert recorded(port)["exit"]["reason"] == "stopped"
    finally:
        sup.kill()
        sup.wait()


def test_warn_mode_records_the_line_and_keeps_serving(make_profile, env, test_id) -> None:
    profile = make_profile(guard='kernel = "warn"')
    port = port_of(profile)
    env = {**env, kernel_watch.TEST_ID_ENV: test_id}
    sup = start_foreground(profile, env)
    try:
        running_state(port)
        line = write_kmsg(NO_MEMORY, test_id)
        wait_for(
            lambda: any(e.get("line") == line for e in recorded(port)["guard"]["kernel"]["events"]),
            10,
            "the line in the state",
        )
        time.sleep(0.5)
        assert sup.poll() is None
        assert recorded(port)["status"] == "running"
    finally:
        sup.terminate()
        sup.wait(30)


def test_without_the_kernel_log_preflight_says_so_and_the_guard_still_trips_on_memavailable(
    make_profile, env, tmp_path: Path
) -> None:
    env = {**env, kernel_watch.KMSG_ENV: str(tmp_path / "no-kmsg"), kernel_watch.JOURNALCTL_ENV: str(tmp_path / "no")}
    now = mem_available_gib()
    guard = f"warn-below-gib = {now - 0.3:.2f}\nterm-below-gib = {now - 0.6:.2f}\nkill-below-gib = {now - 8:.2f}\ngrace-s = 2"
    profile = make_profile(guard=guard, STUB_VLLM_ALLOC_MIB=str(hog_mib(3072)), STUB_VLLM_ALLOC_RATE_MIB_S="3000")
    port = port_of(profile)
    sup = start_foreground(profile, env)
    try:
        assert sup.wait(60) == supervisor.GUARD_EXIT
        err = sup.stderr.read()
        assert "the guard cannot see driver errors" in err
        assert "no-kmsg" in err and "journalctl" in err  # what it tried
        assert "CAP_SYSLOG" in err and "systemd-journal" in err  # how to allow it
        final = recorded(port)
        assert final["trip"]["line"] == "term"
        assert final["guard"]["kernel"]["source"] is None
    finally:
        sup.kill()
        sup.wait()


def test_set_guard_turns_the_tripwire_off_and_on_live(make_profile, env, test_id) -> None:
    profile = make_profile()
    port = port_of(profile)
    env = {**env, kernel_watch.TEST_ID_ENV: test_id}
    sup = start_foreground(profile, env)
    try:
        running_state(port)
        off = sparktui(["set-guard", "--port", str(port), "--kernel", "off"], env)
        assert off.returncode == 0 and "kernel tripwire off" in off.stdout, off.stderr
        ignored = write_kmsg(NO_MEMORY, test_id)
        time.sleep(1.0)
        assert sup.poll() is None
        assert ignored not in [e["line"] for e in recorded(port)["guard"]["kernel"]["events"]]
        on = sparktui(["set-guard", "--port", str(port), "--kernel", "stop"], env)
        assert on.returncode == 0 and "kernel tripwire stop" in on.stdout, on.stderr
        line = write_kmsg(NO_MEMORY + " again", test_id)
        assert sup.wait(30) == supervisor.GUARD_EXIT
        assert recorded(port)["trip"]["kernel_line"] == line
    finally:
        sup.kill()
        sup.wait()


def test_without_kmsg_the_journal_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No journald runs on this machine, so a stand-in journalctl prints what `journalctl -f -o json`
    prints (one JSON entry a line) once the test says so; the watch runs it with the arguments it
    would give the real one, reads its lines through the real matcher, and ends it on close."""
    feed = tmp_path / "entries"
    argv_seen = tmp_path / "argv"
    fake = tmp_path / "journalctl"
    fake.write_text(
        f'#!/bin/sh\necho "$@" > {argv_seen}\nwhile [ ! -e {feed} ]; do sleep 0.05; done\ncat {feed}\nexec sleep 60\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv(kernel_watch.KMSG_ENV, str(tmp_path / "no-kmsg"))
    monkeypatch.setenv(kernel_watch.JOURNALCTL_ENV, str(fake))
    seen: list[KernelEvent] = []
    got = threading.Event()

    def on_event(event: KernelEvent) -> None:
        seen.append(event)
        got.set()

    watch = kernel_watch.KernelWatch(on_event)
    access = watch.start()
    try:
        assert access.source == "journal"
        wait_for(argv_seen.exists, 5, "the stand-in journalctl to start")
        argv = argv_seen.read_text().split()
        assert argv[:6] == ["-f", "-o", "json", "-n", "0", "_TRANSPORT=kernel"] and "SYSLOG_IDENTIFIER=NVRM" in argv
        user_line = NO_MEMORY.removeprefix("NVRM: ")  # journald moves "NVRM:" into the identifier
        feed.write_text(
            json.dumps({"MESSAGE": "usb 1-1: new device", "SYSLOG_FACILITY": "0"})
            + "\n"
            + json.dumps({"MESSAGE": user_line, "SYSLOG_IDENTIFIER": "NVRM", "SYSLOG_FACILITY": "1"})
            + "\n"
        )
        assert got.wait(5)
        assert [e.kind for e in seen] == ["no_memory"] and seen[0].line == NO_MEMORY
    finally:
        watch.close()
    assert watch._journal is not None and watch._journal.poll() is not None  # the stand-in was ended


def test_an_engine_stall_with_a_fall_of_memavailable_puts_the_guard_on_alert(make_profile, env) -> None:
    """The stub's engine stops stepping mid-stream (/metrics frozen with a request running); then a
    hog takes 1.5 GiB: the supervisor tells its guard, which samples every 10 ms and is less patient;
    status says so."""
    from tests.runtime.test_watch_supervisor import Stream
    from tests.support import REPO

    profile = make_profile(watch="wedge-after-s = 600", STUB_VLLM_TOKENS_PER_S="50", STUB_VLLM_WEDGE_AFTER_TOKENS="20")
    port = port_of(profile)
    sup = start_foreground(profile, env)
    hog = None
    try:
        running_state(port)
        stream = Stream(f"http://127.0.0.1:{port}", 1000)
        stream.start()
        wait_for(lambda: len(stream.tokens) >= 10, 20, "tokens to stream")
        wait_for(lambda: time.monotonic() - stream.tokens[-1] > 1.0, 20, "the stream to stall")
        wait_for(
            lambda: (recorded(port)["watch"]["wedge"].get("stalled_s") or 0) > 0, 20, "the supervisor to see the stall"
        )
        hog = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "support" / "procs" / "hog.py"),
                "3000",
                str(hog_mib(1536)),
                "--hold",
                "30",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert hog.stdout is not None and "started" in hog.stdout.readline()
        state = wait_for(lambda: (s := recorded(port)) and s["guard"]["alert"] and s, 20, "the guard's alert")
        assert state["guard"]["last"]["interval_s"] <= 0.01  # the guard's line is rewritten when the alert starts
        out = sparktui(["status", "--port", str(port)], env)
        assert "guard on alert" in out.stdout
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        sup.terminate()
        sup.wait(30)

"""A damaged or forged state record never makes `stop` or `kill` signal what sparktui did not start.

The record (servers/<port>.json) names pids with their true start times, a cgroup, and a socket
that another process of this user may hold, answering in the supervisor's words. Pid + start time
only proves a process is the one named; the tree mark (runtime/host/provenance.py) proves that
sparktui started it. Each test starts its own foreign processes (sleep, a cgroup, a fake supervisor)
outside sparktui, and checks they live on, the refusal names them and why (exit 2), and the record
is left as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.host import containment, proc, provenance
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from tests.support import free_port, wait_for
from tests.support.fake_supervisor import SCRIPT as FAKE_SUPERVISOR
from tests.support.faults import sparktui

pytestmark = pytest.mark.slow


@pytest.fixture
def foreign() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes this test starts outside sparktui (no tree mark), killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait(10)


def sleeper(foreign: list[subprocess.Popen[bytes]]) -> proc.ProcessIdentity:
    p = subprocess.Popen(["sleep", "300"])
    foreign.append(p)
    start = wait_for(lambda: proc.start_time_of(p.pid), 5, "the sleep to start")
    return proc.ProcessIdentity(p.pid, start)


def dead_ref() -> pr.ProcessRef:
    """A supervisor that died: a process that has exited (its pid and start time)."""
    p = subprocess.Popen(["true"])
    start = proc.start_time_of(p.pid) or 1
    p.wait()
    return pr.ProcessRef(pid=p.pid, start_time=start)


def forged(port: int, sup: pr.ProcessRef, tree: proc.ProcessIdentity, **tree_keys: object) -> pr.StateRecord:
    keys: dict[str, object] = {"boot_id": proc.boot_id(), "spawned_at": time.time() - 60}
    keys |= tree_keys
    return pr.StateRecord(
        status="running",
        phase="serving",
        profile="forged",
        port=port,
        supervisor=sup,
        guard=pr.GuardRecord(armed=True, state="watching", lines=GuardLines(None, None, None)),
        tree=pr.TreeRecord.model_validate(
            {"pid": tree.pid, "start_time": tree.start_time, "members": [[tree.pid, tree.start_time]], **keys}
        ),
        started_at=time.time() - 60,
    )


def write_record(state: pr.StateRecord) -> tuple[Path, str]:
    path = st.state_path(state.port)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    st.write_state(path, state)
    return path, path.read_text()


def assert_refused(done: subprocess.CompletedProcess[str], *pids: int, code: int = 2) -> None:
    assert done.returncode == code and "Traceback" not in done.stderr, done
    assert "left alone" in done.stderr or "asked nothing" in done.stderr, done.stderr
    for pid in pids:
        assert f"pid {pid}" in done.stderr, done.stderr


@pytest.mark.parametrize("which", ["--port", "--all"])
@pytest.mark.parametrize("command", ["stop", "kill"])
def test_a_lost_record_naming_a_foreign_process_leaves_it_alone(env, foreign, command, which):
    # The supervisor "died"; the record names the user's own process (a sleep) with its true start time
    victim = sleeper(foreign)
    port = free_port()
    path, text = write_record(forged(port, dead_ref(), victim))
    done = sparktui(command, *([which, str(port)] if which == "--port" else [which]), env=env)
    # --all: exit 1 (some server could not be ended), each port's word once
    assert_refused(done, victim.pid, code=2 if which == "--port" else 1)
    assert done.stderr.count(f"port {port}:") == 1, done.stderr
    assert "tree mark" in done.stderr, done.stderr
    assert victim.is_alive()
    assert path.read_text() == text  # nothing lost: the record is as it was, for a look
    path.unlink()


@pytest.mark.parametrize("command", ["stop", "kill"])
def test_a_record_from_before_a_reboot_whose_pid_is_reused_is_never_signalled(env, foreign, command):
    # After a reboot a pid comes back, and early processes even come back at the same tick: a record
    # that lost its boot id (damaged, or from a version that did not write one) then names a live
    # process with its "true" start time. And where the start time differs, the pid is simply reused.
    victim = sleeper(foreign)
    port = free_port()
    for start_time in (victim.start_time, victim.start_time - 1):
        reused = proc.ProcessIdentity(victim.pid, start_time)
        path, text = write_record(forged(port, dead_ref(), reused, boot_id=None))
        done = sparktui(command, "--port", str(port), env=env)
        assert victim.is_alive(), done
        if start_time == victim.start_time:
            assert_refused(done, victim.pid)
            assert path.read_text() == text
        else:  # a pid reused by a younger process: it is not the recorded one, so nothing to refuse
            assert done.returncode == 0 and "Traceback" not in done.stderr, done
        path.unlink(missing_ok=True)


@pytest.fixture
def foreign_cgroup(foreign) -> Iterator[Callable[[str], tuple[Path, proc.ProcessIdentity]]]:
    """Make a cgroup (of the name given) that sparktui did not make, holding a sleep this test started."""
    parent, why = containment.find_parent()
    if parent is None:
        pytest.skip(f"no writable cgroup2 here: {why}")
    made: list[tuple[Path, proc.ProcessIdentity]] = []

    def make(name: str) -> tuple[Path, proc.ProcessIdentity]:
        path = parent / name
        path.mkdir()
        victim = sleeper(foreign)
        made.append((path, victim))
        (path / "cgroup.procs").write_text(str(victim.pid))
        return path, victim

    yield make
    for path, victim in made:
        proc.signal_process(victim, signal.SIGKILL)
        wait_for(lambda p=path: not containment.CgroupScope(p).populated(), 10, "the cgroup to empty")
        path.rmdir()


@pytest.mark.parametrize("named", ["foreign", "sparktui-like"])
def test_a_record_naming_a_foreign_cgroup_does_not_kill_it(env, foreign, foreign_cgroup, named):
    # cgroup.kill would SIGKILL everything in it at once: the user's session, a service, another user's job.
    # "sparktui-like": named as sparktui names its scopes, but not for this record's mark
    tag = uuid.uuid4().hex[:10]
    name = f"forged-{tag}" if named == "foreign" else f"sparktui-sleep-0123456789ab-{os.getpid()}-{tag}"
    cgroup, victim = foreign_cgroup(name)
    port = free_port()
    other = sleeper(foreign)  # the recorded root: not sparktui's either
    path, text = write_record(forged(port, dead_ref(), other, cgroup=str(cgroup), mark="0" * 32))
    done = sparktui("kill", "--port", str(port), env=env)
    assert_refused(done, other.pid)
    assert f"cgroup {cgroup}" in done.stderr, done.stderr
    assert victim.is_alive() and other.is_alive()
    assert path.read_text() == text
    path.unlink()


def fake_supervisor(
    foreign: list[subprocess.Popen[bytes]], port: int, mode: str, state: pr.StateRecord
) -> subprocess.Popen[bytes]:
    """A process of this user, started outside sparktui, that holds the port's supervisor socket
    and answers in the supervisor's words (the state it is given); `freeze`: it takes a stop or
    kill and then stops itself (SIGSTOP), so the CLI falls back to the record."""
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE_SUPERVISOR, st.socket_address(port)[1:], mode, state.to_json()],
        stdout=subprocess.PIPE,
    )
    foreign.append(fake)
    assert fake.stdout is not None and fake.stdout.readline() == b"listening\n"
    return fake


@pytest.mark.parametrize("mode", ["answer", "freeze"])
@pytest.mark.parametrize("command", ["stop", "kill"])
def test_a_socket_held_by_another_process_than_the_recorded_supervisor_is_asked_nothing(env, foreign, mode, command):
    sup, victim = sleeper(foreign), sleeper(foreign)  # the record names them; a fake holds the socket
    port = free_port()
    state = forged(port, pr.ProcessRef(pid=sup.pid, start_time=sup.start_time), victim)
    path, text = write_record(state)
    fake = fake_supervisor(foreign, port, mode, state)
    done = sparktui(command, "--port", str(port), env=env)
    assert_refused(done, fake.pid, sup.pid)
    assert sup.is_alive() and victim.is_alive() and fake.poll() is None
    assert path.read_text() == text
    path.unlink()


@pytest.mark.parametrize("recorded", [True, False])
@pytest.mark.parametrize("command", ["stop", "kill"])
def test_a_fake_supervisor_that_freezes_on_stop_is_not_killed_nor_is_what_it_names(env, foreign, recorded, command):
    # The forgery is consistent: the record (or, with no record, the fake's own status reply) names
    # the fake as the supervisor, and a foreign sleep as the tree. Were it asked, the fake would take
    # the stop and freeze, and the CLI fall back to ending "the recorded tree" and "the supervisor"
    # itself; no marked child proves it sparktui's supervisor, so it is not asked at all.
    victim = sleeper(foreign)
    port = free_port()
    state = forged(port, pr.ProcessRef(pid=0, start_time=0), victim)  # pid 0: the fake puts its own
    fake = fake_supervisor(foreign, port, "freeze", state)
    start = wait_for(lambda: proc.start_time_of(fake.pid), 5, "the fake to start")
    state.supervisor = pr.ProcessRef(pid=fake.pid, start_time=start)
    if recorded:
        path, text = write_record(state)
    done = sparktui(command, "--port", str(port), env=env, timeout=60)
    assert_refused(done, fake.pid)
    assert "cannot be proven sparktui's" in done.stderr, done.stderr
    assert victim.is_alive() and fake.poll() is None
    assert (proc.read_stat(fake.pid) or pytest.fail("the fake is gone")).state != "T"  # told nothing: not frozen
    if recorded:
        assert path.read_text() == text
        path.unlink()


@pytest.mark.parametrize("change", ["owner", "mode"])
def test_a_record_another_user_owns_or_may_write_is_not_trusted(env, foreign, change):
    # sparktui writes its records 0600 in a 0700 folder: one another user owns, or may write, is not its own
    victim = sleeper(foreign)
    port = free_port()
    path, text = write_record(forged(port, dead_ref(), victim))
    if change == "owner":
        os.chown(path, 65534, 65534)
    else:
        path.chmod(0o666)
    for command in ("status", "kill"):
        done = sparktui(command, "--port", str(port), env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done
        why = "owned by user id 65534" if change == "owner" else "writable by other users (mode 0666"
        assert f"{path}: {why}" in done.stderr, done.stderr
    assert victim.is_alive() and path.read_text() == text
    path.unlink()


def test_set_guard_tells_nothing_to_a_socket_held_by_another_process_than_the_recorded_supervisor(env, foreign):
    # A fake that says "done" would have the user believe the guard disarmed, or a line moved
    sup, victim = sleeper(foreign), sleeper(foreign)
    port = free_port()
    state = forged(port, pr.ProcessRef(pid=sup.pid, start_time=sup.start_time), victim)
    path, text = write_record(state)
    fake = fake_supervisor(foreign, port, "answer", state)
    done = sparktui("set-guard", "--port", str(port), "--disarm", env=env)
    assert_refused(done, fake.pid, sup.pid)
    assert "DISARMED" not in done.stdout
    assert path.read_text() == text
    path.unlink()


def test_stop_all_names_a_port_once_when_a_lost_record_and_a_listener_share_it(env, foreign):
    # The record's supervisor died (lost) and another process of this user holds the port's socket:
    # `stop --all` found the port twice (the record, and the listener) and named it twice
    victim = sleeper(foreign)
    port = free_port()
    path, text = write_record(forged(port, dead_ref(), victim))
    fake_supervisor(foreign, port, "answer", forged(port, pr.ProcessRef(pid=0, start_time=0), victim))
    done = sparktui("stop", "--all", env=env)
    said = (done.stdout + done.stderr).splitlines()
    assert len([line for line in said if f"port {port}" in line and "warning" not in line]) == 1, done
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done
    assert victim.is_alive() and path.read_text() == text
    path.unlink()


@pytest.mark.parametrize("change", ["group", "others", "owner"])
def test_records_in_a_servers_folder_others_own_or_may_write_in_are_not_trusted(env, change):
    # sparktui makes servers/ 0700: in one another user owns, or may write in, any record may be planted
    port = free_port()
    gone = dead_ref()
    path, text = write_record(forged(port, gone, proc.ProcessIdentity(gone.pid, gone.start_time or 1)))
    folder = path.parent
    if change == "owner":
        os.chown(folder, 65534, 65534)
    else:
        folder.chmod(0o770 if change == "group" else 0o777)
    try:
        for args in (["status"], ["status", "--port", str(port)], ["kill", "--port", str(port)], ["stop", "--all"]):
            done = sparktui(*args, env=env)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done
            assert f"{folder}: " in done.stderr and "no state record in it is trusted" in done.stderr, done.stderr
            if change == "owner":
                assert "owned by user id 65534" in done.stderr and "SPARKTUI_STATE_DIR" in done.stderr, done.stderr
            else:
                assert f"chmod 700 {folder}" in done.stderr and "writable by other users" in done.stderr, done.stderr
        assert path.read_text() == text  # the lost record was neither swept nor rewritten
    finally:
        os.chown(folder, os.getuid(), os.getgid())
        folder.chmod(0o700)
    path.unlink()


def refused_at_once(
    env, foreign, state: pr.StateRecord, command: str, doubt: str, *alive: proc.ProcessIdentity
) -> None:
    """A fake supervisor of this user, named in the record it wrote and answering "stopped" (or "done"),
    is refused at once, told nothing, naming `doubt`; the processes `alive` and the record are left as
    they were. Before, it was believed after a 10 s wait for an exit that never came."""
    port = state.port
    fake = fake_supervisor(foreign, port, "answer", state)
    start = wait_for(lambda: proc.start_time_of(fake.pid), 5, "the fake to start")
    state.supervisor = pr.ProcessRef(pid=fake.pid, start_time=start)
    path, text = write_record(state)
    t0 = time.monotonic()
    done = sparktui(command, "--port", str(port), *(["--disarm"] if command == "set-guard" else []), env=env)
    assert time.monotonic() - t0 < 9, done  # told at once (or after the record is re-read ~1 s), not after 10 s
    assert_refused(done, fake.pid)
    assert "cannot be proven sparktui's" in done.stderr and doubt in done.stderr, done.stderr
    assert "DISARMED" not in done.stdout and "stopped" not in done.stdout, done.stdout
    assert all(p.is_alive() for p in alive) and fake.poll() is None
    assert path.read_text() == text
    path.unlink()


@pytest.mark.parametrize("mark", ["none", "forged"])
@pytest.mark.parametrize("command", ["stop", "kill", "set-guard"])
def test_a_fake_supervisor_that_names_itself_in_its_record_is_not_believed(env, foreign, command, mark):
    # The record names the fake as the supervisor (its true pid and start time) and it answers "stopped"
    # (or "done"): nothing was signalled, yet the CLI believed it, waiting 10 s for it to exit. A
    # supervisor is proven by its children (its reaper, vLLM's tree), which carry the record's tree mark
    victim = sleeper(foreign)
    port = free_port()
    keys = {"mark": provenance.new_mark()} if mark == "forged" else {}
    state = forged(port, pr.ProcessRef(pid=0, start_time=0), victim, **keys)  # pid 0: the fake puts its own
    refused_at_once(env, foreign, state, command, "tree mark", victim)


@pytest.mark.parametrize("mark", ["none", "forged"])
@pytest.mark.parametrize("command", ["stop", "kill", "set-guard"])
def test_a_fake_supervisor_whose_record_has_no_tree_yet_is_not_believed(env, foreign, command, mark):
    # What a supervisor writes before vLLM starts: no tree, its reaper (which carries the record's
    # mark) named. The fake was asked and believed, then waited on 10 s; no marked reaper is its child
    port = free_port()
    reaper = sleeper(foreign)
    state = forged(port, pr.ProcessRef(pid=0, start_time=0), reaper)  # pid 0: the fake puts its own
    state.tree, state.status, state.phase = None, "starting", "launching"
    state.reaper = pr.ProcessRef(pid=reaper.pid, start_time=reaper.start_time)
    state.mark = provenance.new_mark() if mark == "forged" else None
    refused_at_once(env, foreign, state, command, "tree mark", reaper)


@pytest.mark.parametrize("mark", ["none", "forged"])
@pytest.mark.parametrize("command", ["stop", "kill", "set-guard"])
def test_a_fake_supervisor_whose_record_names_no_reaper_is_not_believed(env, foreign, command, mark):
    # Neither a tree nor a reaper: what a supervisor writes before it starts its reaper, and it takes
    # no request before the save naming it. The fake was asked and believed, then waited on 10 s
    port = free_port()
    state = forged(port, pr.ProcessRef(pid=0, start_time=0), sleeper(foreign))  # pid 0: the fake puts its own
    state.tree, state.reaper, state.status, state.phase = None, None, "starting", "launching"
    state.mark = provenance.new_mark() if mark == "forged" else None
    refused_at_once(env, foreign, state, command, "names no reaper")

"""Issue 21, items 2 (stop/kill), 3 and 4: stop and kill always end the tree — the supervisor
stopped (SIGSTOP), the state dir read-only, gone or full — with a clear word and no traceback;
the abstract socket still reaches the supervisor when the state dir cannot be written."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from tests.support import alive, wait_for
from tests.support.faults import running, sparktui, tree_pids

pytestmark = pytest.mark.slow


def gone(state: st.StateRecord) -> None:
    wait_for(lambda: not any(alive(p) for p in tree_pids(state)), 15, "the tree to be gone")


def freeze(state: st.StateRecord) -> proc.ProcessIdentity:
    sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
    assert proc.signal_process(sup, signal.SIGSTOP)
    wait_for(lambda: (i := proc.read_stat(sup.pid)) is not None and i.state == "T", 5, "the supervisor stopped")
    return sup


def frozen_server(make_profile, env: dict[str, str]) -> tuple[int, st.StateRecord, proc.ProcessIdentity]:
    """A server started with `serve --detach`, running, its supervisor stopped (SIGSTOP): it can
    neither answer nor rewrite its record. Its port, its record, its supervisor."""
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    return port, state, freeze(state)


@pytest.fixture
def tmpfs_state(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[Path, dict[str, str]]]:
    """The state dir on a small tmpfs of its own (unique mount point), unmounted afterwards."""
    mount = tmp_path / f"state-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    env = {**env, "SPARKTUI_STATE_DIR": str(mount / "state")}
    os.environ["SPARKTUI_STATE_DIR"] = env["SPARKTUI_STATE_DIR"]
    try:
        yield mount, env
    finally:
        subprocess.run(["umount", str(mount / "state")], capture_output=True)  # read_only()'s bind, if any
        for path in (mount / "state" / "servers").glob("*.json"):
            state = st.read_state(path)
            if state is None:
                continue
            sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
            proc.signal_process(sup, signal.SIGCONT)
            if state.tree is not None:
                proc.sweep_orphans(state.tree.as_proc_record())
            proc.signal_process(sup, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def read_only(mount: Path) -> None:
    """The state dir read-only from here on (a read-only bind mount of itself: files open for
    writing, vLLM's log among them, stay writable, as after a remount of a busy file system)."""
    state = str(mount / "state")
    for argv in (["mount", "--bind", state, state], ["mount", "-o", "remount,bind,ro", state]):
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", ["stop", "kill"])
def test_stop_and_kill_end_the_tree_of_a_stopped_supervisor(make_profile, env, command):
    port, state, sup = frozen_server(make_profile, env)
    shown = sparktui("status", "--port", str(port), env=env)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown
    done = sparktui(command, "--port", str(port), env=env)
    assert done.returncode == 0, done
    assert "Traceback" not in done.stderr and "stopped (SIGSTOP?)" in done.stderr, done.stderr
    assert ("killed" if command == "kill" else "stopped") in done.stdout, done.stdout
    gone(state)
    assert not sup.is_alive()
    after = st.read_state(st.state_path(port))
    assert after is not None and after.status == "exited" and after.exit is not None
    assert "supervisor not answering" in (after.exit.by or ""), after.exit


def test_a_read_only_state_dir_still_reaches_the_supervisor(make_profile, tmpfs_state):
    mount, env = tmpfs_state
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    read_only(mount)
    shown = sparktui("status", env=env)
    assert shown.returncode == 0 and f"{port}" in shown.stdout and "ready" in shown.stdout, shown
    changed = sparktui("set-guard", "--port", str(port), "--warn-below", "3", env=env)
    assert changed.returncode == 0 and "warn 3 GiB" in changed.stdout, changed
    again = sparktui("serve", str(profile), "--detach", env=env)
    assert again.returncode == 2 and "cannot be made a writable folder" in again.stderr, again
    assert "Traceback" not in again.stderr
    stopped = sparktui("stop", "--port", str(port), env=env)
    assert stopped.returncode == 0, stopped
    assert "exited (stopped" in stopped.stdout and "not on disk yet" in stopped.stderr, stopped
    gone(state)


def test_kill_with_the_state_dir_read_only_and_the_supervisor_stopped(make_profile, tmpfs_state):
    mount, env = tmpfs_state
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    read_only(mount)
    sup = freeze(state)
    killed = sparktui("kill", "--port", str(port), env=env)
    assert killed.returncode == 0 and "Traceback" not in killed.stderr, killed
    assert "could not be written" in killed.stderr and "killed" in killed.stdout, killed
    gone(state)
    assert not sup.is_alive()


def test_kill_with_the_state_dir_gone_and_the_supervisor_stopped(make_profile, env):
    port, state, sup = frozen_server(make_profile, env)
    shutil.rmtree(env["SPARKTUI_STATE_DIR"], ignore_errors=True)
    try:
        killed = sparktui("kill", "--port", str(port), env=env)
        assert killed.returncode == 0 and "Traceback" not in killed.stderr, killed
        assert "its reaper swept the tree" in killed.stderr, killed.stderr
        gone(state)
        assert not sup.is_alive()
    finally:  # no record is left for the isolated fixture's sweep
        proc.signal_process(sup, signal.SIGKILL)
        proc.sweep_orphans(state.tree.as_proc_record())


def fill(mount: Path) -> Path:
    filler = mount / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # until ENOSPC
    return filler


def test_serve_on_a_full_disk_is_refused_clearly(make_profile, tmpfs_state):
    mount, env = tmpfs_state
    assert sparktui("status", env=env).returncode == 0  # the state dir exists
    fill(mount)
    served = sparktui("serve", str(make_profile()), "--detach", env=env)
    assert served.returncode == 2, served
    assert "Traceback" not in served.stderr and "No space left on device" in served.stderr, served.stderr
    assert "free some space" in served.stderr


def test_stop_on_a_full_disk_reports_the_end_and_the_record_is_written_once_there_is_room(make_profile, tmpfs_state):
    mount, env = tmpfs_state
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    filler = fill(mount)
    stopped = sparktui("stop", "--port", str(port), env=env)
    assert stopped.returncode == 0 and "exited (stopped" in stopped.stdout, stopped
    gone(state)
    shown = sparktui("status", "--all", env=env)
    assert "Traceback" not in shown.stderr
    filler.unlink()
    final = wait_for(
        lambda: (s := st.read_state(st.state_path(port))) is not None and s.status == "exited" and s,
        15,
        "the final record written once there is room",
    )
    assert final.exit is not None and final.exit.reason == "stopped"

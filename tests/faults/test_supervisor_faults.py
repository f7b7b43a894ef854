"""Issue 9, items 3, 4, 5 and 10: the supervisor outlives a full disk, one launch holds a port,
stop/kill work with the state dir gone, and a lost server is reported plainly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from tests.support import REPO, alive, wait_for
from tests.support.faults import running, sparktui, tree_pids

pytestmark = pytest.mark.slow


def test_two_launches_on_one_port_at_once_one_wins_and_stop_still_works(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    argv = [sys.executable, "-m", "sparktui", "serve", str(profile), "--detach"]
    both = [subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    both.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(p.wait(90), p.stderr.read() if p.stderr else "") for p in both]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "already" in loser and f"--port {port}" in loser and "Traceback" not in loser
    state = running(port)
    assert st.read_state(st.state_path(port)).supervisor.pid == state.supervisor.pid  # one record, the winner's
    stopped = sparktui("stop", "--port", str(port), env=env)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: not any(alive(p) for p in tree_pids(state)), 15, "the tree to be gone")


def test_stop_and_kill_work_with_the_state_dir_deleted(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    # the running supervisor writes its record meanwhile (and makes servers/ again for it): rmtree can find
    # a new file in servers/ after it listed it ("Directory not empty"); remove again until it is gone once
    wait_for(lambda: remove_tree(env["SPARKTUI_STATE_DIR"]), 10, "the state dir to be removed")
    listed = sparktui("status", env=env)
    assert listed.returncode == 0 and f"{port}" in listed.stdout and "ready" in listed.stdout, listed
    again = sparktui("serve", str(profile), "--detach", env=env)
    assert again.returncode == 2 and f"sparktui stop --port {port}" in again.stderr
    killed = sparktui("kill", "--port", str(port), env=env)
    assert killed.returncode == 0, killed.stderr
    wait_for(lambda: not any(alive(p) for p in tree_pids(state)), 15, "the tree to be gone")


def test_a_supervisor_killed_with_its_reaper_is_reported_lost_without_all_and_kill_sweeps(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    sup = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "serve", str(profile)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = running(port)
    assert state.reaper is not None and state.reaper.start_time is not None
    proc.signal_process(proc.ProcessIdentity(state.reaper.pid, state.reaper.start_time), signal.SIGKILL)
    wait_for(lambda: not alive(state.reaper.pid), 10, "the reaper to die")
    sup.kill()
    sup.wait(10)
    engine = [p for p in tree_pids(state) if p != state.tree.pid]
    assert engine and any(alive(p) for p in engine)  # EngineCore lives on, unguarded
    shown = sparktui("status", env=env)
    assert "lost" in shown.stdout and "NOT guarded" in shown.stdout and "guard watching" not in shown.stdout
    assert f"its supervisor (pid {sup.pid}) died" in shown.stdout, shown.stdout
    killed = sparktui("kill", "--port", str(port), env=env)
    assert killed.returncode == 0 and "supervisor_died" in killed.stdout, killed
    wait_for(lambda: not any(alive(p) for p in engine), 15, "the orphans to be swept")
    shown = sparktui("status", env=env)
    assert "supervisor_died" in shown.stdout and "swept by `sparktui kill`" in shown.stdout, shown.stdout


@pytest.fixture
def small_disk(tmp_path: Path, env: dict[str, str]):
    """The state dir on a 4 MiB tmpfs of its own (a real full disk: ENOSPC), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    env = {**env, "SPARKTUI_STATE_DIR": str(mount / "state")}
    os.environ["SPARKTUI_STATE_DIR"] = env["SPARKTUI_STATE_DIR"]
    try:
        yield mount, env
    finally:
        for state in st.list_states():
            if state.tree is not None:
                proc.sweep_orphans(state.tree.as_proc_record())
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_while_serving_does_not_kill_the_supervisor(make_profile, small_disk):
    mount, env = small_disk
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    filler = mount / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # until ENOSPC
    changed = sparktui("set-guard", "--port", str(port), "--warn-below", "11", env=env)  # forces a state write
    assert changed.returncode == 0, changed.stderr
    assert st.ask_live(port) is not None and st.ask_live(port).guard.armed  # still here, still guarding
    assert st.read_state(st.state_path(port)).guard.lines.warn_below_gib == 10  # the write did fail
    filler.unlink()
    wait_for(
        lambda: (s := st.read_state(st.state_path(port))) is not None and s.guard.lines.warn_below_gib == 11,
        15,
        "the state write to be retried once there is room",
    )
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0
    wait_for(lambda: not any(alive(p) for p in tree_pids(state)), 15, "the tree to be gone")


def remove_tree(path: str) -> bool:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True

"""Issue 9, item 6: nothing of a guarded tree outlives its command or its guard, setsid daemons
included; with a cgroup v2 where the machine has one (runtime.containment), pid tracking elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host.containment import CgroupScope, find_parent
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client, launcher
from tests.support import REPO, alive, wait_for

pytestmark = pytest.mark.slow

# A command whose daemon (setsid, its parent gone at once) outlives it unless something contains it.
DAEMON = 'setsid sh -c "echo \\$\\$ > {pid}; exec sleep 300" & sleep {linger}; exit 0'


def guard(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sparktui", "guard", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def pid_in(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), 15, f"{path.name} to be written"))


@pytest.fixture(params=["cgroup", "pid-tracking"])
def mechanism(request) -> dict[str, str]:
    env = dict(os.environ)
    if request.param == "cgroup":
        if find_parent()[0] is None:
            pytest.skip("no writable cgroup2 on this machine")
    else:
        env["SPARKTUI_CGROUP"] = "off"
    return env


def test_a_setsid_daemon_left_by_a_command_that_exits_at_once_is_stopped(tmp_path, mechanism):
    if mechanism.get("SPARKTUI_CGROUP") == "off":
        pytest.skip("pid tracking cannot see a daemon whose parent exits before a scan (the cgroup can)")
    out = guard("--", "sh", "-c", DAEMON.format(pid=tmp_path / "daemon.pid", linger=0), env=mechanism)
    assert out.wait(30) == 0, out.stderr.read() if out.stderr else ""
    daemon = pid_in(tmp_path / "daemon.pid")
    wait_for(lambda: not alive(daemon), 10, "the daemon to be stopped with its tree")
    assert "left" in (out.stderr.read() if out.stderr else "")


def test_sigkilled_guard_leaves_nothing_of_its_tree(tmp_path, mechanism):
    script = f"sleep 300 & {DAEMON.format(pid=tmp_path / 'daemon.pid', linger=300)}"
    out = guard("--", "sh", "-c", script, env=mechanism)
    daemon = pid_in(tmp_path / "daemon.pid")
    wait_for(lambda: alive(daemon), 5, "the daemon to run")
    if mechanism.get("SPARKTUI_CGROUP") == "off":
        # pid tracking must have seen the daemon before the guard dies (its scan runs every 2 s)
        time.sleep(2.5)
    out.send_signal(signal.SIGKILL)
    out.wait(10)
    wait_for(lambda: not alive(daemon), 15, "the reaper to kill the tree of the dead guard")


def test_a_server_runs_in_its_own_cgroup_and_status_says_so(make_profile, env):
    if find_parent()[0] is None:
        pytest.skip("no writable cgroup2 on this machine")
    profile = load_profile(make_profile())
    port = profile.serve.port
    launcher.launch(profile)
    state = wait_for(lambda: (s := st.read_state(st.state_path(port))) and s.status == "running" and s, 20, "ready")
    assert state.containment and state.containment.startswith("cgroup ")
    assert state.tree is not None and state.tree.cgroup
    scope = CgroupScope(Path(state.tree.cgroup))
    assert state.tree.pid in scope.procs() and scope.populated()
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "status"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert f"contained by cgroup {scope.path}" in out.stdout
    client.kill(port)
    assert not scope.exists(), "the server's cgroup is removed with it"

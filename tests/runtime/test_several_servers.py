"""Several servers on one machine, with the stub vLLM: the pool counts what each reserved, status
and stop --all see every server, and one guard order stops only as many as must go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from sparktui.core.profiles import load_profile
from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.host.memory import read_mem_available
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client, launcher
from tests.support import REPO, wait_for

pytestmark = pytest.mark.slow  # spawns supervisors and stub servers


@pytest.fixture
def started(isolated):
    """Supervisor pids to kill if a test fails half-way (trees are swept by `isolated`)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sparktui(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparktui", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def launch(path, started):
    state = launcher.launch(load_profile(path))
    started.append(state.supervisor.pid)
    return state


def running(port: int) -> st.StateRecord:
    def ready() -> st.StateRecord | None:
        s = st.read_state(st.state_path(port))
        return s if s is not None and s.status == "running" else None

    return wait_for(ready, 90, f"the server on port {port} to be ready")


def test_a_launch_that_would_overcommit_the_pool_is_refused_naming_the_server_in_the_way(make_profile, env, started):
    a = launch(make_profile(serve_extra="gpu-memory-utilization = 0.5"), started)
    b = make_profile(serve_extra="gpu-memory-utilization = 0.5")
    with pytest.raises(UserError) as refused:
        launcher.launch(load_profile(b))
    text = str(refused.value)
    assert f"port {a.port} ({a.profile})" in text and "--gpu-memory-utilization 0.5" in text
    assert f"sparktui stop --port {a.port}" in text and "--force" in text
    assert a.reservation is not None and f"{a.reservation.bytes / 2**30:.1f} GiB" in text
    out = sparktui("serve", str(b), "--detach", env=env)  # the CLI says the same, exit 2
    assert out.returncode == 2 and f"port {a.port}" in out.stderr and "Traceback" not in out.stderr
    client.stop(a.port)


def test_two_servers_that_fit_together_both_run_status_lists_both_and_stop_all_stops_both(make_profile, env, started):
    a = launch(make_profile(serve_extra="gpu-memory-utilization = 0.3"), started)
    b = launch(make_profile(serve_extra="gpu-memory-utilization = 0.3"), started)
    running(a.port), running(b.port)
    listed = json.loads(sparktui("status", "--json", env=env).stdout)
    assert sorted(s["port"] for s in listed) == sorted([a.port, b.port])
    assert all(s["reservation"]["bytes"] > 0 for s in listed)
    out = sparktui("stop", "--all", env=env)
    assert out.returncode == 0, out.stderr
    for port in (a.port, b.port):
        assert f"on port {port}: exited (stopped" in out.stdout
        final = st.read_state(st.state_path(port))
        assert final is not None and final.tree is not None
        assert not any(proc.ProcessIdentity(p, t).is_alive() for p, t in final.tree.members)
    assert sparktui("kill", "--all", env=env).stdout.strip() == "nothing to stop: no server is running"
    # a port whose server has ended: nothing to stop there either (it exited 2, "not running")
    again = sparktui("stop", "--port", str(a.port), env=env)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again.stdout.strip() == f"nothing to stop: the server on port {a.port} is not running (status exited)"


def test_a_guard_trip_stops_the_lower_priority_server_and_leaves_the_other_when_that_was_enough(
    make_profile, env, started
):
    now = read_mem_available() / 2**30
    # The term line sits 1.2 GiB below MemAvailable now: other programs on a busy CI machine move
    # it by a few hundred MiB in the seconds this takes, and the keeper must not cross it alone.
    lines = f"warn-below-gib = {now - 0.9:.2f}\nterm-below-gib = {now - 1.2:.2f}\nkill-below-gib = {now - 9:.2f}\ngrace-s = 2\n"
    keeper = launch(make_profile(serve_extra="gpu-memory-utilization = 0.3", guard=lines + "priority = 10"), started)
    running(keeper.port)
    # The expendable one takes 4 GiB when its KV cache is allocated (MemAvailable falls by about two
    # thirds of that on this VM: well past the term line) and holds it through SIGTERM until its
    # guard's SIGKILL (grace 2 s): both guards see the lines crossed, however they sample.
    hog = launch(
        make_profile(
            serve_extra="gpu-memory-utilization = 0.3",
            guard=lines + "priority = 0",
            STUB_VLLM_ALLOC_MIB="4096",
            STUB_VLLM_ALLOC_RATE_MIB_S="3000",
            STUB_VLLM_IGNORE_TERM="1",
        ),
        started,
    )

    def exited() -> st.StateRecord | None:
        s = st.read_state(st.state_path(hog.port))
        return s if s is not None and s.status == "exited" else None

    final = wait_for(exited, 120, "the guard to stop the low-priority server")
    assert final.exit is not None and final.exit.reason == "guard"
    # Asked live: the keeper's state file is rewritten at its own pace and can lag its events.
    kept = st.ask_live(keeper.port)
    guard_events = [e for e in (kept.events if kept else []) if e.kind.startswith("Guard")]
    assert kept is not None and kept.status == "running", f"the high-priority server was stopped too: {guard_events}"
    deferred = [e for e in kept.events if e.kind == "GuardDeferred"]
    assert deferred and f"port {hog.port}" in deferred[0].field("why"), "the keeper's guard never saw the lines crossed"
    client.stop(keeper.port)

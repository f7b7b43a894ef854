"""Issue 21, item 2 (the guard): a guard that is not sampling is never shown as watching, and
the reaper (a separate process) acts on the kill line itself when the supervisor is frozen."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.ui.translate import guard_view
from tests.support import PROCS, alive, hog_mib, wait_for
from tests.support.faults import mem_available, running, sparktui

GIB = 1 << 30


@pytest.mark.slow
def test_a_stopped_supervisor_shows_its_guard_not_sampling(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    fresh = json.loads(sparktui("status", "--json", "--port", str(port), env=env).stdout)
    assert fresh["guard"]["stale"] is False and fresh["guard"]["sample_age_s"] < pr.GUARD_STALE_S
    sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
    assert proc.signal_process(sup, signal.SIGSTOP)
    try:
        time.sleep(pr.GUARD_STALE_S + 1)
        shown = sparktui("status", env=env)
        assert "guard NOT SAMPLING for" in shown.stdout and "guard watching" not in shown.stdout, shown.stdout
        frozen = json.loads(sparktui("status", "--json", "--port", str(port), env=env).stdout)
        assert frozen["guard"]["stale"] is True and frozen["guard"]["sample_age_s"] > pr.GUARD_STALE_S, frozen["guard"]
    finally:
        proc.signal_process(sup, signal.SIGCONT)
    wait_for(
        lambda: "guard watching" in sparktui("status", "--port", str(port), env=env).stdout,
        15,
        "the guard sampling again",
    )
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0


@pytest.mark.slow
def test_the_reaper_kills_the_tree_at_the_kill_line_while_the_supervisor_is_stopped(make_profile, env, tmp_path):
    kill_gib = (mem_available() - int(1.5 * GIB)) / GIB
    if kill_gib < 1:
        pytest.skip("too little memory free for a 3 GiB hog")
    profile = make_profile(
        guard=f"warn-below-gib = {kill_gib + 0.2:.2f}\nterm-below-gib = {kill_gib + 0.1:.2f}\n"
        f"kill-below-gib = {kill_gib:.2f}"
    )
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
    assert proc.signal_process(sup, signal.SIGSTOP)
    hog = subprocess.Popen([sys.executable, str(PROCS / "hog.py"), "2048", str(hog_mib(3072)), "--hold", "15"])
    try:
        wait_for(lambda: not any(alive(p) for p, _ in state.tree.members), 20, "the reaper to kill the tree")
        after = wait_for(
            lambda: (s := st.read_state(st.state_path(port))) is not None and s.exit is not None and s,
            10,
            "the reaper's record of what it did",
        )
        assert after.exit.reason == "guard" and after.exit.by == "reaper", after.exit
        assert "had not sampled" in (after.exit.message or "")
    finally:
        hog.kill()
        hog.wait()
        proc.signal_process(sup, signal.SIGCONT)
    wait_for(lambda: not sup.is_alive(), 20, "the supervisor to finish once resumed")


def test_the_panel_says_a_stale_guard_is_not_sampling():
    guard = pr.GuardRecord(
        armed=True,
        state="watching",
        lines=GuardLines(None, None, 3.5),
        last=pr.GuardLast(action="ok", available_gib=20.0, rate_gib_s=0.0, interval_s=0.25),
    )
    guard.set_age(9.0)
    view = guard_view(guard, None, live=True)
    assert view.why_na is not None and "not sampling for 9 s" in view.why_na and "watching" not in view.why_na

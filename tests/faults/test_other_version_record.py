"""Issue 24: a state record written by another sparktui version, with words this one does not know,
never costs the server: `status` shows it, and `stop`/`kill` still end the recorded tree when its
supervisor cannot answer (they fall back to the record), keeping what they do not know."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from tests.faults.test_unanswering_supervisor import frozen_server, gone
from tests.support import REPO, alive, wait_for
from tests.support.faults import running, sparktui, tree_pids
from tests.support.other_version import NEW_EVENT, NEW_KERNEL_EVENT, NEW_LINE_KEY, from_another_version

pytestmark = pytest.mark.slow


def break_guard_lines(port: int) -> str:
    """Make the port's record one this version cannot read whole (its guard lines out of order);
    the text written."""
    path = st.state_path(port)
    broken = json.loads(path.read_text())
    broken["guard"]["lines"] |= {"warn_below_gib": 2.0, "kill_below_gib": 5.0}
    path.write_text(text := json.dumps(broken, indent=1))
    return text


@pytest.mark.parametrize("command", ["stop", "kill"])
def test_stop_and_kill_end_the_tree_of_a_record_from_another_version(make_profile, env, command):
    port, state, sup = frozen_server(make_profile, env)  # stop and kill go by the record
    path = st.state_path(port)
    newer = from_another_version(json.loads(path.read_text()))
    path.write_text(json.dumps(newer, indent=1))
    shown = sparktui("status", "--port", str(port), env=env)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown
    assert f"kernel log (notify): gsp_timeout: {NEW_KERNEL_EVENT['line']}" in shown.stdout, shown.stdout
    done = sparktui(command, "--port", str(port), env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert "sparktui " + command + " ended the recorded tree itself" in done.stderr, done.stderr
    gone(state)
    assert not sup.is_alive()
    after = json.loads(path.read_text())  # the end recorded, and nothing it did not know lost
    assert after["status"] == "exited" and "supervisor not answering" in after["exit"]["by"], after["exit"]
    assert after["guard"]["lines"][NEW_LINE_KEY] == 1.0 and after["events"][-1] == NEW_EVENT
    assert after["guard"]["kernel"]["events"][-1] == NEW_KERNEL_EVENT


@pytest.mark.parametrize("which", ["--port", "--all"])
def test_kill_sweeps_a_lost_server_whose_record_does_not_read_whole_and_leaves_the_file(make_profile, env, which):
    # A part this version cannot read at all (guard lines out of order), its supervisor and reaper dead:
    # the tree, the supervisor and the port are enough to end it; the file is not rewritten from a part of it
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
    path = st.state_path(port)
    text = break_guard_lines(port)
    try:
        killed = sparktui("kill", *(["--port", str(port)] if which == "--port" else ["--all"]), env=env)
        assert killed.returncode == 0 and "Traceback" not in killed.stderr, killed
        assert "guard lines out of order" in killed.stderr and "ending the recorded tree all the same" in killed.stderr
        wait_for(lambda: not any(alive(p) for p in engine), 15, "the orphans to be swept")
        assert path.read_text() == text  # left as it was, for a look
    finally:  # the fixture's sweep skips a record it cannot read
        proc.sweep_orphans(state.tree.as_proc_record())


def test_the_panels_stop_of_such_a_record_tells_it_what_it_did_instead(make_profile, env):
    # The panel calls client.stop in its own process, and shows files.WARNINGS as notices (its
    # stderr is not shown): both warnings reach it, not only the CLI's stderr
    from sparktui import files
    from sparktui.runtime.server import client

    port, state, sup = frozen_server(make_profile, env)
    break_guard_lines(port)
    told: list[str] = []
    files.WARNINGS.subscribe(told.append)
    final = client.stop(port)
    gone(state)
    assert not sup.is_alive() and final.status == "exited"
    assert any("guard lines out of order" in t and "ending the recorded tree all the same" in t for t in told), told
    assert any("sparktui stop ended the recorded tree itself" in t for t in told), told

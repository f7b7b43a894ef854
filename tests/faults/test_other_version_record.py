"""Issue 24: a state record written by another sparktui version, with words this one does not know,
never costs the server: `status` shows it, and `stop`/`kill` still end the recorded tree when its
supervisor cannot answer (they fall back to the record), keeping what they do not know."""

from __future__ import annotations

import json

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from tests.faults.test_unanswering_supervisor import freeze, gone
from tests.support.faults import running, sparktui
from tests.support.other_version import NEW_EVENT, NEW_KERNEL_EVENT, NEW_LINE_KEY, from_another_version

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("command", ["stop", "kill"])
def test_stop_and_kill_end_the_tree_of_a_record_from_another_version(make_profile, env, command):
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = running(port)
    sup = freeze(state)  # it cannot answer, nor rewrite its file: stop and kill go by the record
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

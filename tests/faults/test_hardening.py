"""Issue 21, item 2 (hardening): the supervisor locks its memory, runs at a higher priority and is
the OOM killer's last choice; vLLM's tree is its first choice and runs at the user's priority."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from sparktui.runtime.server import hardening
from tests.support import REPO, wait_for

pytestmark = pytest.mark.slow


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split()[1]
    raise AssertionError(name)


def test_the_supervisor_is_hardened_and_vllms_tree_is_the_oom_killers_first_choice(make_profile, env):
    if os.geteuid() != 0:
        pytest.skip("lowering oom_score_adj and nice needs root")
    profile = make_profile()
    port = load_profile(profile).serve.port
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "serve", str(profile), "--detach"], cwd=REPO, env=env, capture_output=True
    )
    assert out.returncode == 0, out.stderr
    state = wait_for(
        lambda: (s := st.ask_live(port)) is not None and s.status == "running" and s.tree is not None and s, 40, "ready"
    )
    sup, tree = state.supervisor.pid, state.tree.pid
    log = (Path(env["SPARKTUI_STATE_DIR"]) / "supervisor" / f"{port}.log").read_text()
    sup_adj = int(Path(f"/proc/{sup}/oom_score_adj").read_text())
    # lowering needs CAP_SYS_RESOURCE, which a container's root may lack: then it says it skipped it
    assert sup_adj == hardening.SUPERVISOR_OOM_SCORE_ADJ or (sup_adj == 0 and "skipped: oom_score_adj" in log), log
    assert int(status_field(sup, "VmLck")) > 0
    assert os.getpriority(os.PRIO_PROCESS, sup) == hardening.SUPERVISOR_NICE
    for pid, _ in state.tree.members:
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == str(hardening.TREE_OOM_SCORE_ADJ)
    assert os.getpriority(os.PRIO_PROCESS, tree) == os.getpriority(os.PRIO_PROCESS, 0)  # the user's
    assert "guard hardening: memory locked" in log
    stopped = subprocess.run(
        [sys.executable, "-m", "sparktui", "stop", "--port", str(port)], cwd=REPO, env=env, capture_output=True
    )
    assert stopped.returncode == 0

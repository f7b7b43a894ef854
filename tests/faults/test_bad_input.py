"""Issue 9, items 2 and 8: bad input is a clear one-line error with exit 2, never a traceback;
one guard line a user sets is not refused because of a default."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client
from tests.support import REPO, wait_for

pytestmark = pytest.mark.slow


def sparktui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, timeout=60, env=env
    )


def test_one_line_set_by_the_user_wins_over_the_defaults():
    out = sparktui("guard", "--kill-below", "8", "--", sys.executable, "-c", "print('ran')")
    assert out.returncode == 0, out.stderr
    assert "ran" in out.stdout
    assert "the default term line (6 GiB) is turned off: it would be below your kill line (8 GiB)" in out.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--kill-below", "inf"], "argument --kill-below: expected a finite number of GiB"),
        (["--term-below", "nan"], "argument --term-below: expected a finite number of GiB"),
        (["--grace", "inf"], "argument --grace: expected a finite number of seconds"),
        (["--term-below", "4", "--kill-below", "5"], "kill line 5.0 GiB is above the term line 4.0 GiB"),
        (["--log", "/tmp"], "--log /tmp: expected a file to write the command's output to, got a directory"),
        (["--log", "/nonexistent-dir/x.log"], "its folder does not exist"),
    ],
)
def test_guard_bad_options_exit_2(args, expected):
    out = sparktui("guard", *args, "--", "true")
    assert out.returncode == 2, out
    assert expected in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_an_infinite_guard_line_in_a_profile_is_refused_before_vllm_starts(make_profile, env, value):
    profile = make_profile(guard=f"kill-below-gib = {value}")
    out = sparktui("serve", str(profile), "--detach", env=env)
    assert out.returncode == 2 and "kill-below-gib" in out.stderr and "finite" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert st.list_states() == []  # nothing started, nothing "lost" left behind


def test_a_wrong_shaped_state_file_is_named_and_blocks_no_launch(make_profile, env):
    profile_path = make_profile()
    port = load_profile(profile_path).serve.port
    bad = st.state_path(port)
    bad.write_text(json.dumps({"status": "running", "port": port, "supervisor": "me"}))
    out = sparktui("status", "--port", str(port), env=env)
    assert out.returncode == 2 and str(bad) in out.stderr and "field supervisor" in out.stderr, out.stderr
    out = sparktui("status", env=env)
    assert out.returncode == 0 and "skipped" in out.stderr and str(bad) in out.stderr
    started = sparktui("serve", str(profile_path), "--detach", env=env)
    assert started.returncode == 0, started.stderr
    wait_for(lambda: (s := st.read_state(bad)) is not None and s.status == "running", 40, "the new server")
    assert list(bad.parent.glob(f"{bad.name}.bad-*")), "the bad file is kept aside for a look"
    client.stop(port)

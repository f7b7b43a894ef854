"""Issue 9, items 1 and 8 (socket): guard changes over the socket keep the server guarded, and
malformed messages get an error reply instead of killing the handler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from sparktui.runtime.server import launcher
from tests.support import REPO, wait_for
from tests.support.faults import raw_request

pytestmark = pytest.mark.slow


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    raise AssertionError("no MemAvailable")


@pytest.fixture
def running(make_profile, isolated):
    profile = load_profile(make_profile())
    launcher.launch(profile)
    port = profile.serve.port
    wait_for(lambda: st.read_state(st.state_path(port)).status == "running", 20, "the server to be ready")
    yield port


def test_new_lines_without_armed_keep_the_guard_armed_and_apply_live(running):
    port = running
    above = round(mem_available_gib() + 200, 1)  # MemAvailable is already below these lines
    reply = raw_request(
        port,
        json.dumps({"cmd": "guard", "lines": {"warn_below_gib": above, "term_below_gib": above}}).encode(),
    )
    assert reply["ok"], reply
    assert reply["state"]["guard"]["armed"] is True
    assert reply["state"]["guard"]["lines"]["term_below_gib"] == above
    # The new term line is above MemAvailable: the live guard trips on it and stops the server.
    final = wait_for(
        lambda: (s := st.read_state(st.state_path(port))) and s.status == "exited" and s, 30, "the guard to trip"
    )
    assert final.exit is not None and final.exit.reason == "guard"
    assert final.trip is not None and final.trip.line == "term" and final.trip.threshold_gib == above


def test_a_string_false_is_refused_and_changes_nothing(running):
    port = running
    reply = raw_request(port, b'{"cmd": "guard", "armed": "false"}')
    assert reply["ok"] is False and "armed" in reply["error"] and "boolean" in reply["error"]
    assert st.read_state(st.state_path(port)).guard.armed is True
    reply = raw_request(port, b'{"cmd": "guard", "armed": false}')
    assert reply["ok"] is True and reply["state"]["guard"]["armed"] is False


def test_lines_given_out_of_order_are_refused_and_the_old_lines_stay(running):
    port = running
    reply = raw_request(port, b'{"cmd": "guard", "lines": {"term_below_gib": 2, "kill_below_gib": 50}}')
    assert reply["ok"] is False and "out of order" in reply["error"]
    assert reply["state"]["guard"]["lines"]["kill_below_gib"] == 3.5 and reply["state"]["guard"]["armed"] is True


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"status"', b"42", b"{nope", b'{"cmd": null}'])
def test_malformed_messages_get_an_error_reply_and_the_supervisor_goes_on(running, payload):
    port = running
    reply = raw_request(port, payload)
    assert reply["ok"] is False and reply["error"].startswith("request")
    assert raw_request(port, b'{"cmd": "status"}')["ok"] is True  # still answering


def sparktui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_set_guard_moves_one_line_and_the_current_ones_make_room(running):
    port = running
    out = sparktui("set-guard", "--port", str(port), "--kill-below", "8")
    assert out.returncode == 0, out.stderr
    assert "the current term line (6 GiB) is turned off: it would be below your kill line (8 GiB)" in out.stdout
    assert f"port {port}: guard armed; warn 10 GiB, term off, kill 8 GiB" in out.stdout
    lines = st.read_state(st.state_path(port)).guard.lines
    assert (lines.warn_below_gib, lines.term_below_gib, lines.kill_below_gib) == (10, None, 8)
    out = sparktui("set-guard", "--port", str(port), "--disarm")
    assert out.returncode == 0 and "guard DISARMED; warn 10 GiB, term off, kill 8 GiB" in out.stdout
    assert st.read_state(st.state_path(port)).guard.armed is False


def test_set_guard_off_turns_a_line_off_live(running):
    # the request carries the line as null: "off" reaches the supervisor (it was dropped on the way)
    port = running
    out = sparktui("set-guard", "--port", str(port), "--warn-below", "off")
    assert out.returncode == 0, out.stderr
    assert f"port {port}: guard armed; warn off, term 6 GiB, kill 3.5 GiB" in out.stdout
    lines = st.read_state(st.state_path(port)).guard.lines
    assert (lines.warn_below_gib, lines.term_below_gib, lines.kill_below_gib) == (None, 6, 3.5)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--term-below", "2", "--kill-below", "3"], "out of order: kill line 3.0 GiB is above the term line 2.0"),
        (["--kill-below", "inf"], "expected a finite number of GiB"),
        ([], "nothing to change"),
    ],
)
def test_set_guard_refuses_bad_lines_with_exit_2(running, args, expected):
    out = sparktui("set-guard", "--port", str(running), *args)
    assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr
    assert st.read_state(st.state_path(running)).guard.lines.kill_below_gib == 3.5  # unchanged

"""Issue 9, items 1 and 8 (socket): guard changes over the socket keep the server guarded, and
malformed messages get an error reply instead of killing the handler."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime import state as st
from sparktui.runtime import supervisor
from tests.support import wait_for

pytestmark = pytest.mark.slow


def raw_request(port: int, payload: bytes) -> dict:
    """Send bytes as they are (no client-side checks) and return the decoded reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(st.socket_path(port)))
        sock.sendall(payload + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data, "the supervisor closed the connection without a reply"
    return json.loads(data)


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    raise AssertionError("no MemAvailable")


@pytest.fixture
def running(make_profile, isolated):
    profile = load_profile(make_profile())
    supervisor.launch(profile)
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
    assert final.trip is not None and final.trip["line"] == "term" and final.trip["threshold_gib"] == above


def test_a_string_false_is_refused_and_changes_nothing(running):
    port = running
    reply = raw_request(port, b'{"cmd": "guard", "armed": "false"}')
    assert reply["ok"] is False and "armed" in reply["error"] and "boolean" in reply["error"]
    assert st.read_state(st.state_path(port)).guard.armed is True
    reply = raw_request(port, b'{"cmd": "guard", "armed": false}')
    assert reply["ok"] is True and reply["state"]["guard"]["armed"] is False


def test_lines_out_of_order_are_refused_and_the_old_lines_stay(running):
    port = running
    reply = raw_request(port, b'{"cmd": "guard", "lines": {"kill_below_gib": 50}}')
    assert reply["ok"] is False and "out of order" in reply["error"]
    assert reply["state"]["guard"]["lines"]["kill_below_gib"] == 3.5 and reply["state"]["guard"]["armed"] is True


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"status"', b"42", b"{nope", b'{"cmd": null}'])
def test_malformed_messages_get_an_error_reply_and_the_supervisor_goes_on(running, payload):
    port = running
    reply = raw_request(port, payload)
    assert reply["ok"] is False and reply["error"].startswith("request")
    assert raw_request(port, b'{"cmd": "status"}')["ok"] is True  # still answering

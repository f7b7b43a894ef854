"""Issue 21, item 1: another local user cannot squat a port's supervisor socket and speak for it,
and nothing a record or a reply holds reaches the terminal as a control sequence.

The cross-user tests run a listener as a throwaway user this test creates (useradd, a unique
name) and removes afterwards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from tests.support import alive, free_port, wait_for
from tests.support.faults import sparktui

pytestmark = pytest.mark.slow

ESC = "\x1b"

# Run as the throwaway user with the system Python: binds the given abstract name and answers
# every request with a forged record (huge reservation, ESC bytes, supervisor pid 1).
SQUATTER = r"""
import json, socket, sys
name, port = sys.argv[1], int(sys.argv[2])
forged = {"version": 1, "status": "running", "profile": "INJECTED\x1b[2J\x1b]0;pwned\x07", "port": port,
          "url": "http://127.0.0.1:%d" % port, "supervisor": {"pid": 1, "start_time": 1},
          "guard": {"armed": True, "state": "watching", "lines": {}},
          "reservation": {"bytes": 10**18, "basis": "forged"}, "started_at": 1e10}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + name)
s.listen(64)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    try:
        c.settimeout(2)
        c.recv(65536)
        c.sendall(json.dumps({"ok": True, "state": forged}).encode() + b"\n")
    except OSError:
        pass
    c.close()
"""


@pytest.fixture
def throwaway_user() -> Iterator[str]:
    """A system user of its own (unique name, no home), deleted after the test."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a throwaway user")
    name = f"st21-{uuid.uuid4().hex[:10]}"
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True
    )
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def as_user(user: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["/usr/bin/python3", *argv],
        user=user,
        group=user,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def squat(throwaway_user: str, isolated: Path) -> Iterator[tuple[str, list[subprocess.Popen[str]]]]:
    """Starts squatters on ports' supervisor socket names; they are killed afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield throwaway_user, started
    for p in started:
        p.kill()
        p.wait(5)


def start_squatter(user: str, started: list[subprocess.Popen[str]], port: int) -> None:
    p = as_user(user, "-c", SQUATTER, st.socket_address(port)[1:], str(port))
    started.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "listening", p.stderr.read() if p.stderr else ""


def test_a_squatter_of_another_user_is_ignored_with_a_warning_and_serve_status_stop_still_work(
    make_profile, squat, env
):
    user, started = squat
    uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
    profile = make_profile()
    port = load_profile(profile).serve.port
    start_squatter(user, started, port)  # on the port root will serve on
    start_squatter(user, started, free_port())  # and on another, with a forged 10^18-byte reservation

    shown = sparktui("status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "INJECTED" not in shown.stdout + shown.stderr and ESC not in shown.stdout + shown.stderr
    assert f"ignored a listener of user id {uid}" in shown.stderr, shown.stderr

    served = sparktui("serve", str(profile), "--detach", env=env)
    assert served.returncode == 0, served.stderr
    assert "Traceback" not in served.stderr and "INJECTED" not in served.stderr
    state = wait_for(
        lambda: (s := st.ask_live(port)) is not None and s.status == "running" and s.profile != "?" and s,
        40,
        "our own supervisor to answer on the squatted port",
    )
    assert state.supervisor.pid != 1 and "INJECTED" not in (state.profile or "")
    sup_log = Path(env["SPARKTUI_STATE_DIR"]) / "supervisor" / f"{port}.log"
    assert f"user id {uid} holds this port's supervisor socket name" in sup_log.read_text()

    listed = sparktui("status", "--port", str(port), env=env)
    assert listed.returncode == 0 and "ready" in listed.stdout and "INJECTED" not in listed.stdout, listed

    # the other direction: the squatting user's own request to our supervisor is not answered
    probe = as_user(
        user,
        "-c",
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX); s.connect('\\0' + sys.argv[1]); s.settimeout(5)\n"
        'try:\n s.sendall(b\'{"cmd": "status"}\\n\'); print(repr(s.recv(100)))\n'
        "except (BrokenPipeError, ConnectionResetError): print('reset')",
        (state.socket or "@")[1:],
    )
    out, err = probe.communicate(timeout=20)
    assert out.strip() in ("b''", "reset"), (out, err)  # closed unanswered
    wait_for(lambda: f"ignored a connection from user id {uid}" in sup_log.read_text(), 10, "the supervisor's warning")

    stopped = sparktui("stop", "--port", str(port), env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped
    assert state.tree is not None
    wait_for(lambda: not any(alive(pid) for pid, _ in state.tree.members), 15, "the tree to be gone")
    assert all(p.poll() is None for p in started)  # the squatters were never signalled


def test_status_escapes_control_characters_from_a_record(isolated, env):
    servers = Path(env["SPARKTUI_STATE_DIR"]) / "servers"
    servers.mkdir(parents=True)
    port = free_port()
    record = {
        "status": "running",
        "profile": "evil\x1b[2J\x1b]0;title\x07\r",
        "port": port,
        "url": "http://127.0.0.1:1\x1b[31m",
        "supervisor": {"pid": 999999, "start_time": 1},  # long dead: the record is lost
        "guard": {"armed": True, "lines": {}},
        "log_path": "/tmp/x\x1b[8m",
        "started_at": time.time(),
    }
    (servers / f"{port}.json").write_text(json.dumps(record))
    shown = sparktui("status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert ESC not in shown.stdout and "\x07" not in shown.stdout and "\r" not in shown.stdout
    assert "evil\\x1b[2J\\x1b]0;title\\x07\\x0d" in shown.stdout, shown.stdout
    assert "/tmp/x\\x1b[8m" in shown.stdout


def test_a_port_every_name_of_which_another_user_holds_is_refused_clearly(squat, make_profile, env):
    user, started = squat
    profile = make_profile()
    port = load_profile(profile).serve.port
    start_squatter(user, started, port)
    for n in range(1, st.ALTERNATE_NAMES + 1):
        p = as_user(user, "-c", SQUATTER, st.alternate_address(port, n)[1:], str(port))
        started.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "listening"
    served = sparktui("serve", str(profile), "--detach", env=env)
    assert served.returncode == 2, served
    assert "other users hold all" in served.stderr and f"--port {port}" in served.stderr
    assert "Traceback" not in served.stderr
    with socket.socket(socket.AF_UNIX) as s:  # nothing of ours listens
        s.settimeout(1)
        s.connect(st.socket_address(port))
        assert st.peer_uid(s) != os.getuid()


def test_a_burst_of_500_clients_is_queued_not_refused(make_profile, env):
    """250 idle connections and 250 status requests at once: every one connects (no EAGAIN), and
    every status request is answered."""
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    wait_for(lambda: (s := st.ask_live(port)) is not None and s.status == "running", 40, "ready")
    name = st.socket_address(port)
    idle, asking, refused = [], [], 0
    try:
        for i in range(500):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(name)
            except BlockingIOError:
                refused += 1
                s.close()
                continue
            (idle if i % 2 else asking).append(s)
        assert refused == 0, f"{refused} of 500 connections refused (EAGAIN): the listen backlog is too small"
        answered = 0
        for s in asking:
            s.setblocking(True)
            s.settimeout(30)
            s.sendall(b'{"cmd": "status", "metrics": false}\n')
        for s in asking:
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            answered += json.loads(data)["ok"] is True
        assert answered == 250
    finally:
        for s in idle + asking:
            s.close()
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0

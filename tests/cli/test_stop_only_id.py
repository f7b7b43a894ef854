"""`sparktui stop/kill --port P --only-id ID`: what a cluster's head runs on a worker to stop the rank
it launched there (`node-serve --launch-id ID`). Any other server on that port (the rank ended and
someone started their own) is left alone: exit 2, one line saying why, nothing signalled. Real
supervisors over the stub vLLM; the head's rendezvous port is a listener of this test's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from tests.support import REPO, alive, free_port, wait_for

pytestmark = pytest.mark.slow  # spawns supervisors
LAUNCH_ID = "c0ffee0123456789"
SMALL = "gpu-memory-utilization = 0.2"


def sparktui(args: list[str], env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def recorded(port: int) -> dict[str, Any]:
    state = st.read_state(st.state_path(port))
    assert state is not None
    return st.with_liveness(state).to_dict()


def running(port: int) -> dict[str, Any] | None:
    state = recorded(port)
    return state if state["status"] == "running" and state["alive"] else None


def tree_pids(state: dict[str, Any]) -> list[int]:
    return [state["tree"]["pid"], *(pid for pid, _ in state["tree"]["members"])]


def test_a_stop_naming_a_launch_id_acts_on_that_supervisor_only(
    make_profile: Callable[..., Path], env: dict[str, str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as head_rendezvous:  # the head's master port
        master_port = head_rendezvous.getsockname()[1]
        # a server of the user's own, started as usual: no launch id
        mine_port = free_port()
        mine = make_profile(port=mine_port, serve_extra=SMALL)  # both fit this machine's pool together
        started = sparktui(["serve", "--detach", str(mine)], env)
        assert started.returncode == 0, started.stderr
        # a worker's rank as a head starts it: the profile on stdin, the head's launch id, the rank flags
        worker_port = free_port()
        profile = make_profile(port=worker_port, serve_extra=SMALL + "\ntensor-parallel-size = 2")
        text = profile.read_text() + (
            f'[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-addr = "127.0.0.1"\n'
            f"master-port = {master_port}\n"
        )
        rank = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", str(master_port)]
        served = sparktui(["node-serve", "--launch-id", LAUNCH_ID, *rank, "--headless"], env, stdin=text)
        assert served.returncode == 0, served.stderr
        assert f"launch id {LAUNCH_ID}" in served.stdout
        theirs = wait_for(lambda: running(mine_port), 60, what="the user's server to answer /health")
        worker = wait_for(lambda: running(worker_port), 60, what="the worker's rank to reach its head")
        assert worker["launch_id"] == LAUNCH_ID and theirs["launch_id"] is None

        # the head's stop names its rank: on a port that another server holds it does nothing
        for command in ("stop", "kill"):
            refused = sparktui([command, "--port", str(mine_port), "--only-id", LAUNCH_ID], env)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert "Traceback" not in refused.stderr
            line = refused.stderr.strip().splitlines()[-1]
            assert f"--only-id {LAUNCH_ID}" in line and f"port {mine_port} is another one" in line, line
            assert "no launch id" in line and "nothing was done" in line
        other = sparktui(["kill", "--port", str(worker_port), "--only-id", "someone-else"], env)
        assert other.returncode == 2 and f"launch id {LAUNCH_ID}" in other.stderr, other.stderr
        # the supervisor itself refuses too (a request racing a new supervisor onto the port)
        reply = st.request(worker_port, pr.StopRequest(cmd="stop", only_id="someone-else"), timeout=10)
        assert not reply.ok and reply.error is not None and "someone-else" in reply.error
        ready = st.request(worker_port, pr.ClusterReadyRequest(cmd="cluster-ready", only_id="someone-else"))
        assert not ready.ok
        assert running(mine_port) is not None and running(worker_port) is not None
        assert all(alive(pid) for pid in tree_pids(theirs) + tree_pids(worker))
        assert recorded(worker_port)["phase"] != "ready"  # the refused cluster-ready did not make it rest

        # its own rank: stopped, the whole tree
        stopped = sparktui(["stop", "--port", str(worker_port), "--only-id", LAUNCH_ID], env)
        assert stopped.returncode == 0, stopped.stderr
        final = recorded(worker_port)
        assert final["status"] == "exited" and final["exit"]["reason"] == "stopped", json.dumps(final["exit"])
        wait_for(lambda: not any(alive(pid) for pid in tree_pids(worker)), 30, what="the rank's whole tree to end")
        # the user's server is untouched
        assert running(mine_port) is not None and all(alive(pid) for pid in tree_pids(theirs))
        assert sparktui(["stop", "--port", str(mine_port)], env).returncode == 0

"""F5 on a [cluster] profile in the panel goes the way `sparktui serve` goes: every node checked
over SSH, the worker's rank started there, the head here; never a lone head waiting for ranks.
The panel runs on the head of a two-node test cluster (network namespaces with their own sshd,
tests/support/netns_cluster.py), driven by Pilot there (tests/support/cluster_panel.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_cluster_launch import cluster_profile, status_is
from tests.support import REPO, wait_for
from tests.support import netns_cluster as nc

pytestmark = pytest.mark.slow


def panel_on_head(cluster: nc.NetnsCluster, profile: Path, out: Path) -> dict[str, object]:
    head = cluster.nodes[0]
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(head.state_dir), "SPARKTUI_SSH_CONFIG": str(cluster.ssh_config)}
    argv = cluster.exec_argv(head, [sys.executable, "-m", "tests.support.cluster_panel", str(profile), str(out)])
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-4000:]
    seen: dict[str, object] = json.loads(out.read_text())
    return seen


def test_f5_on_a_cluster_profile_starts_every_node_f7_restarts_them_and_f6_stops_them(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    seen = panel_on_head(netns_cluster, cluster_profile(tmp_path), tmp_path / "seen.json")
    assert "error" not in seen and seen["launch_error"] is None, seen
    # the worker's rank runs under its own supervisor on node1, started over SSH by the launch
    assert [node[:2] for node in seen["nodes"]] == [["node0", 0], ["node1", 1]] and seen["nodes"][1][2] == "running"
    # the preflight `sparktui serve` prints: each node's summary, then the warnings, atop the head's log
    top = [line for line in seen["log_top"] if line.startswith("[sparktui preflight] ")]
    assert seen["log_top"][: len(top)] == top, seen["log_top"]
    assert any(line.startswith("[sparktui preflight] node node0 (head): MemAvailable") for line in top), top
    assert any(line.startswith("[sparktui preflight] node node1 (rank 1): MemAvailable") for line in top), top
    ports = "[sparktui preflight] warning: vLLM's rendezvous (--master-port 29501) listens on the head on every address"
    assert any(line.startswith(ports) for line in top), top
    warned = [n for n in seen["notices"] if n[0].startswith("Preflight")]
    # the notice shows the first three warnings and counts the rest; which others this box adds (page cache,
    # kernel log access) depends on its state, so the rendezvous warning is shown or counted among "more"
    warnings_on_top = [line for line in top if line.startswith("[sparktui preflight] warning: ")]
    assert len(warned) == 1 and warned[0][1] == "warning", seen["notices"]
    assert warned[0][0] == f"Preflight: {len(warnings_on_top)} warning{'s' if len(warnings_on_top) > 1 else ''}"
    assert "on every address" in warned[0][2] or (
        len(warnings_on_top) > 3 and f"… {len(warnings_on_top) - 3} more at the top of the log" in warned[0][2]
    ), seen["notices"]
    memory = str(seen["memory_pane"]).splitlines()
    # the memory pane: the head (this machine's MemAvailable) and the worker (its own guard's figure)
    assert any(line.startswith("  node0 r0 ready ") and line.endswith("G") for line in memory), memory
    assert any(line.startswith("  node1 r1 ") and line.endswith("G") for line in memory), memory
    assert seen["restart_error"] is None
    assert seen["stopped"] == "stopped"
    worker = netns_cluster.nodes[1]
    assert wait_for(lambda: status_is(netns_cluster, worker, "exited"), 30, what="the worker's rank to stop")
    assert wait_for(netns_cluster.nothing_left, 30, what="no process but sshd on either node")


def test_f5_on_a_cluster_whose_worker_cannot_take_its_rank_starts_nothing(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    # a link interface the nodes do not have: the per-node preflight names each node, no rank starts
    seen = panel_on_head(netns_cluster, cluster_profile(tmp_path, interface="nosuch0"), tmp_path / "seen.json")
    error = str(seen["launch_error"])
    assert "cluster preflight failed" in error and "node node1: no interface nosuch0" in error, seen
    assert status_is(netns_cluster, netns_cluster.nodes[0], "running", "starting", "exited") is None
    assert netns_cluster.nothing_left()

"""Preflight of a [cluster] profile on a two-node test cluster (network namespaces, each with its
own sshd): the head asks every node over SSH, and each problem names its node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import netns_cluster as nc
from tests.support.stub_vllm import install_stub

pytestmark = pytest.mark.slow

LISTEN = (
    "import socket, sys, time; s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen();"
    " print('listening', flush=True); time.sleep(120)"
)


def cluster_profile(tmp_path: Path, stub: Path, cluster_extra: str = 'master-addr = "10.213.0.1"\n') -> Path:
    """Both nodes share this machine's memory: a low utilization keeps the per-node memory check out of
    what these tests judge (at the default 0.9 the head's check turned on this host's MemAvailable)."""
    path = tmp_path / "two-sparks.toml"
    path.write_text(
        '[serve]\nmodel = "/models/tiny"\nport = 8000\ngpu-memory-utilization = 0.3\n'
        f'[runner]\nexecutable = "{stub}"\n'
        f'[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-port = 29501\n{cluster_extra}'
    )
    return path


def serve_on_head(cluster: nc.NetnsCluster, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`sparktui serve PROFILE` run on the head node, as its owner would run it there."""
    head = cluster.nodes[0]
    env = {
        **os.environ,
        "SPARKTUI_STATE_DIR": str(head.state_dir),
        "SPARKTUI_SSH_CONFIG": str(cluster.ssh_config),
    }
    argv = cluster.exec_argv(head, [nc.SPARKTUI, "serve", str(profile), *extra])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_each_node_answers_over_ssh_in_its_own_namespace(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    stub = install_stub(tmp_path / "bin")
    worker = netns_cluster.nodes[1]
    done = netns_cluster.ssh(worker, "sparktui", "node-check", "--executable", str(stub), "--port", "8000")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["vllm_version"] == "0.32.0"
    assert report["ports_in_use"] == []
    # the worker's own state dir came through its SSH login, not this process's environment
    env = netns_cluster.ssh(worker, "printenv", "SPARKTUI_STATE_DIR")
    assert env.stdout.strip() == str(worker.state_dir)


def test_the_mp_backend_without_a_master_address_is_refused_before_anything_starts(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    stub = install_stub(tmp_path / "bin")
    done = serve_on_head(netns_cluster, cluster_profile(tmp_path, stub, cluster_extra=""))
    assert done.returncode == 2
    assert "[cluster] master-addr: needed for the mp backend" in done.stderr and "Traceback" not in done.stderr
    assert not any(node.pids_besides_sshd() for node in netns_cluster.nodes)


def test_the_ray_backend_without_an_address_is_refused_before_anything_starts(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    stub = install_stub(tmp_path / "bin")
    profile = cluster_profile(tmp_path, stub, cluster_extra="")
    profile.write_text(profile.read_text().replace('backend = "mp"', 'backend = "ray"'))
    done = serve_on_head(netns_cluster, profile, "--tensor-parallel-size", "2")
    assert done.returncode == 2
    assert 'backend = "ray": give master-addr' in done.stderr and "Traceback" not in done.stderr
    assert not any(node.pids_besides_sshd() for node in netns_cluster.nodes)


def test_a_taken_port_on_the_head_is_named_with_the_node(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    stub = install_stub(tmp_path / "bin")
    head = netns_cluster.nodes[0]
    holder = subprocess.Popen(
        netns_cluster.exec_argv(head, [sys.executable, "-c", LISTEN, "29501"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "listening"
        done = serve_on_head(netns_cluster, cluster_profile(tmp_path, stub))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2
    assert "node node0: port 29501 is in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_node_is_named(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    stub = install_stub(tmp_path / "bin")
    worker = netns_cluster.nodes[1]
    assert worker.sshd is not None
    worker.sshd.kill()
    worker.sshd.wait()
    done = serve_on_head(netns_cluster, cluster_profile(tmp_path, stub))
    assert done.returncode == 2
    assert "node node1: not reachable over SSH" in done.stderr
    assert "node node0" not in done.stderr  # the head itself was fine


def test_a_different_vllm_on_a_worker_is_named(tmp_path: Path) -> None:
    """node1 logs in with a different vLLM first on its PATH: the versions differ, and the error
    says which node has which."""
    why = nc.missing_tools()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the netns cluster tests must run, but {why}")
        pytest.skip(why)
    stub = install_stub(tmp_path / "bin")
    other = tmp_path / "other-bin"
    other.mkdir()
    old = other / "vllm"
    old.write_text("#!/bin/sh\necho 0.31.1\n")
    old.chmod(0o755)
    venv_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    cluster = nc.build(tmp_path / "cluster", node_env={"node1": {"PATH": f"{other}:{venv_path}"}})
    try:
        profile = tmp_path / "by-path.toml"
        profile.write_text(
            '[serve]\nmodel = "/models/tiny"\nport = 8000\ntensor-parallel-size = 2\n'
            '[runner]\nexecutable = "vllm"\n[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\n'
            'master-addr = "10.213.0.1"\n'
        )
        # the head finds the stub on its PATH; node1's login puts the other vLLM first
        head = cluster.nodes[0]
        env = {
            **os.environ,
            "PATH": f"{stub.parent}:{os.environ['PATH']}",
            "SPARKTUI_STATE_DIR": str(head.state_dir),
            "SPARKTUI_SSH_CONFIG": str(cluster.ssh_config),
        }
        done = subprocess.run(
            cluster.exec_argv(head, [nc.SPARKTUI, "serve", str(profile)]),
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
    finally:
        cluster.close()
    assert done.returncode == 2
    assert "node0 has 0.32.0" in done.stderr and "node1 has 0.31.1" in done.stderr

"""`sparktui serve` of a [cluster] profile with backend "ray", on a two-node test cluster (network
namespaces, each with its own sshd and state dir) running real Ray (CPU, from PyPI). The head's
supervisor runs `ray start --head` and the stub vLLM; each worker's runs `ray start --address`;
the stub's EngineCore joins the Ray cluster as a real client and waits, as vLLM's Ray executor
does, for a placement group of one GPU per node: where the ranks land is Ray's doing, not ours.
The end of any node is the end of all, and nothing is left on either node: no Ray process, no
Ray session dir, nothing in /dev/shm."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FAST_STUB
from tests.runtime.test_cluster_launch import nothing_left, on_head, state_on, status_is
from tests.runtime.test_cluster_preflight import LISTEN
from tests.support import netns_cluster as nc
from tests.support import wait_for
from tests.support.stub_vllm import install_stub

pytestmark = pytest.mark.slow
PORT = 8000
RAY_PORT = 6380  # not Ray's default: a Ray the machine runs itself is never in the way


def ray_temp_dirs(cluster: nc.NetnsCluster) -> list[Path]:
    """Each node's Ray temp dir (sparktui's own, named for the node's state dir and the port)."""
    from sparktui.runtime.cluster import ray_backend as ray_cluster

    saved = os.environ.get("SPARKTUI_STATE_DIR")
    try:
        out = []
        for node in cluster.nodes:
            os.environ["SPARKTUI_STATE_DIR"] = str(node.state_dir)
            out.append(ray_cluster.ray_temp_dir(PORT))
        return out
    finally:
        if saved is None:
            os.environ.pop("SPARKTUI_STATE_DIR", None)
        else:
            os.environ["SPARKTUI_STATE_DIR"] = saved


def ray_shm() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if "plasma" in name or "ray" in name}


@contextlib.contextmanager
def ray_cleanup(cluster: nc.NetnsCluster) -> Iterator[nc.NetnsCluster]:
    """Every node's Ray temp dir and Ray's /dev/shm files are removed after the test, pass or fail
    (the namespaces' processes go with the cluster's close())."""
    if shutil.which("ray", path=str(Path(nc.SPARKTUI).parent)) is None:
        pytest.fail("Ray is not installed in this venv: pip install -e '.[test]' installs it")
    shm_before = ray_shm()
    try:
        yield cluster
    finally:
        for path in ray_temp_dirs(cluster):
            shutil.rmtree(path, ignore_errors=True)
        for name in ray_shm() - shm_before:
            Path("/dev/shm", name).unlink(missing_ok=True)


@pytest.fixture
def ray_cluster(netns_cluster: nc.NetnsCluster) -> Iterator[nc.NetnsCluster]:
    """The netns cluster with Ray on every node's PATH (this venv's)."""
    with ray_cleanup(netns_cluster) as cluster:
        yield cluster


LINK_NAMES = {"node0": "enP2p1s0f1np1", "node1": "enp1s0f0np0"}  # as two GB10s may name their ConnectX ports


@pytest.fixture
def ray_cluster_own_names(tmp_path: Path) -> Iterator[nc.NetnsCluster]:
    """As ray_cluster, on nodes that name their end of the link differently (LINK_NAMES)."""
    if why := nc.missing_tools():
        pytest.skip(why)
    cluster = nc.build(tmp_path / "cluster", link_names=(LINK_NAMES["node0"], LINK_NAMES["node1"]))
    try:
        with ray_cleanup(cluster):
            yield cluster
    finally:
        cluster.close()


NCCL_OVERRIDE = "from-env"


def ray_profile(tmp_path: Path, interfaces: dict[str, str] | None = None) -> Path:
    """`interfaces`: each node's own name for the link ([cluster.interfaces]) instead of cx1 on both."""
    stub = install_stub(tmp_path / "bin")
    env_lines = "\n".join(f'{k} = "{v}"' for k, v in FAST_STUB.items())
    path = tmp_path / "two-sparks-ray.toml"
    path.write_text(
        f'[serve]\nmodel = "/models/tiny"\nport = {PORT}\nmax-model-len = 512\nenforce-eager = true\n'
        # both nodes share this machine's memory: 0.9 of it would fail the per-node memory check
        "tensor-parallel-size = 2\ngpu-memory-utilization = 0.3\n"
        f'[runner]\nexecutable = "{stub}"\n'
        '[cluster]\nnodes = ["node0", "node1"]\nbackend = "ray"\nmaster-addr = "10.213.0.1"\n'
        # the link each node's ranks talk over (cx1 on both nodes of the test cluster)
        f"ray-port = {RAY_PORT}\n"
        + ('interface = "cx1"\n' if interfaces is None else "")
        # the profile's [env] wins over what sparktui sets for the link
        + f'[env]\n{env_lines}\nNCCL_SOCKET_IFNAME = "{NCCL_OVERRIDE}"\n'
        + ("[cluster.interfaces]\n" + "".join(f'{k} = "{v}"\n' for k, v in interfaces.items()) if interfaces else "")
    )
    return path


def nothing_of_ray_left(cluster: nc.NetnsCluster, shm_before: set[str]) -> bool:
    return (
        nothing_left(cluster)
        and not any(path.exists() for path in ray_temp_dirs(cluster))
        and not (ray_shm() - shm_before)
    )


def launch_and_wait_ready(cluster: nc.NetnsCluster, tmp_path: Path, interfaces: dict[str, str] | None = None) -> str:
    """Launch (detached); wait until the head answers /health (the stub got its placement group); the head's log."""
    done = on_head(cluster, "serve", "--detach", str(ray_profile(tmp_path, interfaces)))
    assert done.returncode == 0, done.stdout + done.stderr
    return wait_ready(cluster)


def wait_ready(cluster: nc.NetnsCluster) -> str:
    head, worker = cluster.nodes
    head_state = wait_for(lambda: status_is(cluster, head, "running", "exited"), 120, what="the head to answer /health")
    log = Path(head_state["log_path"]).read_text(errors="replace")
    assert head_state["status"] == "running", log[-3000:]
    assert "--distributed-executor-backend" in head_state["argv"]
    assert head_state["argv"][head_state["argv"].index("--distributed-executor-backend") + 1] == "ray"
    worker_state = wait_for(lambda: status_is(cluster, worker, "running"), 30, what="the worker's Ray node to join")
    assert "start" in worker_state["argv"] and "--block" in worker_state["argv"]
    assert f"10.213.0.1:{RAY_PORT}" in worker_state["argv"]
    return log


def test_two_nodes_over_ray_place_one_rank_on_each_and_a_kill_ends_everything(
    ray_cluster_own_names: nc.NetnsCluster, tmp_path: Path
) -> None:
    """On nodes that name the link differently: each node's Ray and ranks use its own name."""
    ray_cluster = ray_cluster_own_names
    shm_before = ray_shm()
    log = launch_and_wait_ready(ray_cluster, tmp_path, LINK_NAMES)
    # Ray placed the two GPU bundles: one on each node (each node offers one GPU), rank 0 on the head
    placed = dict(re.findall(r"rank (\d): RayWorkerWrapper pid=\d+ on node (\S+)", log))
    assert placed == {"0": "10.213.0.1", "1": "10.213.0.2"}, log[-3000:]
    # the link's environment reached the head's vLLM and each node's Ray actors (through `ray start`)
    envs = {
        who: dict(kv.split("=", 1) for kv in env.split())
        for who, env in re.findall(r"(driver|rank \d):? link env: (.*)", log)
    }
    assert envs["driver"] == {
        "GLOO_SOCKET_IFNAME": LINK_NAMES["node0"],
        "NCCL_SOCKET_IFNAME": NCCL_OVERRIDE,
        "VLLM_HOST_IP": "10.213.0.1",
    }
    assert envs["rank 0"] == envs["driver"], log[-3000:]
    assert envs["rank 1"] == {
        "GLOO_SOCKET_IFNAME": LINK_NAMES["node1"],
        "NCCL_SOCKET_IFNAME": NCCL_OVERRIDE,
        "VLLM_HOST_IP": "10.213.0.2",
    }

    def head_status() -> str | None:
        out = on_head(ray_cluster, "status").stdout
        return out if "node node1 (rank 1): running" in out else None

    status = wait_for(head_status, 20, what="the head's status to show node1 running")
    assert "node node0 (rank 0): head" in status
    assert ray_cluster.nodes[0].pids_besides_sshd() and ray_cluster.nodes[1].pids_besides_sshd()
    assert all(path.is_dir() for path in ray_temp_dirs(ray_cluster))  # Ray's sessions live in ours

    # a kill: SIGKILL, no handler of Ray's runs, and still nothing of Ray is left on either node
    # (the SIGTERM path is the guard trip's, below)
    kill = on_head(ray_cluster, "kill", "--port", str(PORT))
    assert kill.returncode == 0, kill.stderr
    head_end = status_is(ray_cluster, ray_cluster.nodes[0], "exited")
    assert head_end is not None and head_end["exit"]["reason"] == "killed"
    worker_end = wait_for(lambda: status_is(ray_cluster, ray_cluster.nodes[1], "exited"), 30, what="the worker")
    assert worker_end["exit"]["reason"] in ("killed", "stopped")  # the head's kill, or its own look at the gone head
    assert wait_for(lambda: nothing_of_ray_left(ray_cluster, shm_before), 30, what="nothing of Ray on either node")


def test_a_guard_trip_on_a_ray_worker_stops_the_whole_cluster(ray_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    """In the foreground this time: the head's supervisor runs in `sparktui serve` itself, and the
    workers join once its Ray is up."""
    shm_before = ray_shm()
    head, worker = ray_cluster.nodes
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(head.state_dir), "SPARKTUI_SSH_CONFIG": str(ray_cluster.ssh_config)}
    argv = ray_cluster.exec_argv(head, [nc.SPARKTUI, "serve", str(ray_profile(tmp_path))])
    out_path = tmp_path / "serve.out"
    with open(out_path, "wb") as out_file:  # a file, not a pipe: nobody reads it until the end
        serving = subprocess.Popen(argv, env=env, stdout=out_file, stderr=subprocess.STDOUT)
    wait_ready(ray_cluster)
    trip = ray_cluster.ssh(worker, "sparktui", "set-guard", "--port", str(PORT), "--term-below", "100000", "--force")
    assert trip.returncode == 0, trip.stderr
    worker_end = wait_for(lambda: status_is(ray_cluster, worker, "exited"), 30, what="the worker's guard to trip")
    assert worker_end["exit"]["reason"] == "guard"
    head_end = wait_for(lambda: status_is(ray_cluster, head, "exited"), 30, what="the head to stop after it")
    assert head_end["exit"]["reason"] == "stopped"
    assert "node1" in (head_end["exit"]["by"] or "")
    assert serving.wait(timeout=30) == 0, out_path.read_text()
    out = out_path.read_text()
    assert "started Ray nodes on node1" in out
    assert wait_for(lambda: nothing_of_ray_left(ray_cluster, shm_before), 30, what="nothing of Ray on either node")


def other_ray_on_node1(tmp_path: Path) -> dict[str, dict[str, str]]:
    """node1's login finds a `ray` of another version first on its PATH."""
    other = tmp_path / "other-ray"
    other.mkdir(parents=True, exist_ok=True)
    fake = other / "ray"
    fake.write_text("#!/bin/sh\necho 'ray, version 2.9.3'\n")
    fake.chmod(0o755)
    return {"node1": {"PATH": f"{other}:{Path(nc.SPARKTUI).parent}:/usr/bin:/bin"}}


@pytest.mark.parametrize("netns_cluster", [other_ray_on_node1], indirect=True)
def test_preflight_refuses_nodes_with_different_ray_versions(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    """A worker whose Ray is another version is named before anything starts."""
    done = on_head(netns_cluster, "serve", "--detach", str(ray_profile(tmp_path)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "different Ray versions" in done.stderr and "node1 has 2.9.3" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert state_on(netns_cluster, netns_cluster.nodes[0]) is None  # nothing started


def test_a_taken_ray_port_on_the_head_is_named_with_the_node(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    head = netns_cluster.nodes[0]
    holder = subprocess.Popen(
        netns_cluster.exec_argv(head, [sys.executable, "-c", LISTEN, str(RAY_PORT)]), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "listening"
        done = on_head(netns_cluster, "serve", "--detach", str(ray_profile(tmp_path)))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"node node0: port {RAY_PORT} is in use" in done.stderr and "Traceback" not in done.stderr
    assert state_on(netns_cluster, head) is None  # nothing started

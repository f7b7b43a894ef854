"""`sparktui serve` of a [cluster] profile (backend "mp") on a two-node test cluster: network
namespaces with their own sshd and state dirs, the stub vLLM taking vLLM's multi-node flags. The
head starts the worker's rank over SSH, every node runs its own supervisor, and the end of any node
is the end of all: nothing is left on either node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAST_STUB
from tests.support import alive, wait_for
from tests.support import netns_cluster as nc
from tests.support.stub_vllm import install_stub

pytestmark = pytest.mark.slow
PORT = 8000


def cluster_profile(
    tmp_path: Path,
    utilization: float = 0.3,
    interface: str = "cx1",
    master_addr: str = "10.213.0.1",
    interfaces: dict[str, str] | None = None,
) -> Path:
    """Both nodes share this machine's memory: a low utilization lets the per-node memory check pass.
    `interfaces`: each node's own name for the link ([cluster.interfaces]) instead of `interface`."""
    stub = install_stub(tmp_path / "bin")
    env_lines = "\n".join(f'{k} = "{v}"' for k, v in FAST_STUB.items())
    path = tmp_path / "two-sparks.toml"
    path.write_text(
        f'[serve]\nmodel = "/models/tiny"\nport = {PORT}\nmax-model-len = 512\nenforce-eager = true\n'
        f"tensor-parallel-size = 2\ngpu-memory-utilization = {utilization}\n"
        f'[runner]\nexecutable = "{stub}"\n'
        f'[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-addr = "{master_addr}"\n'
        "master-port = 29501\n"
        + (f'interface = "{interface}"\n' if interfaces is None else "")
        + f"[env]\n{env_lines}\n"
        + ("[cluster.interfaces]\n" + "".join(f'{k} = "{v}"\n' for k, v in interfaces.items()) if interfaces else "")
    )
    return path


def server_profile(tmp_path: Path, name: str, port: int, utilization: float, machine: str | None = None) -> Path:
    """A one-machine stub server's profile, for a server of a node's own beside the cluster's rank."""
    stub = install_stub(tmp_path / "bin")
    env_lines = "\n".join(f'{k} = "{v}"' for k, v in FAST_STUB.items())
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'[serve]\nmodel = "/models/{name}"\nport = {port}\ngpu-memory-utilization = {utilization}\n'
        "max-model-len = 512\n"
        + (f'[machine]\nname = "{machine}"\n' if machine else "")
        + f'[runner]\nexecutable = "{stub}"\n[env]\n{env_lines}\n'
    )
    return path


def on_head(cluster: nc.NetnsCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.on_head(*args)


def state_on(cluster: nc.NetnsCluster, node: nc.Node) -> dict[str, Any] | None:
    return cluster.state_on(node, PORT)


def status_on(cluster: nc.NetnsCluster, node: nc.Node, port: int) -> str | None:
    done = cluster.ssh(node, "sparktui", "status", "--port", str(port), "--json")
    return json.loads(done.stdout)["status"] if done.returncode == 0 else None


def status_is(cluster: nc.NetnsCluster, node: nc.Node, *wanted: str) -> dict[str, Any] | None:
    state = state_on(cluster, node)
    return state if state is not None and state["status"] in wanted else None


def nothing_left(cluster: nc.NetnsCluster) -> bool:
    return cluster.nothing_left()


def state_phase_ready(cluster: nc.NetnsCluster, node: nc.Node) -> bool:
    state = state_on(cluster, node)
    return state is not None and state["phase"] == "ready"


def node_watches(node: nc.Node) -> int:
    """`sparktui node-watch` processes on the node: the head's one session per worker."""
    count = 0
    for pid in node.pids():
        try:
            count += b"node-watch" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    return count


def launch_and_wait_ready(cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    done = on_head(cluster, "serve", "--detach", str(cluster_profile(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    # preflight said what each node has against its rank
    assert "node node0 (head): MemAvailable" in done.stderr and "node node1 (rank 1): MemAvailable" in done.stderr
    assert "listens on the head on every address, not only the link" in done.stderr  # torch's store binds *
    head, worker = cluster.nodes
    wait_for(lambda: status_is(cluster, head, "running"), 60, what="the head's rank to answer /health")
    worker_state = wait_for(lambda: status_is(cluster, worker, "running"), 30, what="the worker's rank to join")
    assert "--headless" in worker_state["argv"] and "--node-rank" in worker_state["argv"]
    # each rank talks over [cluster] interface, from its own address there
    environ = Path(f"/proc/{worker_state['tree']['pid']}/environ").read_bytes().split(b"\0")
    assert b"GLOO_SOCKET_IFNAME=cx1" in environ and b"VLLM_HOST_IP=10.213.0.2" in environ
    assert worker_state["argv"][worker_state["argv"].index("--node-rank") + 1] == "1"
    head_state = state_on(cluster, head)
    assert head_state is not None and "--headless" not in head_state["argv"]
    assert head_state["argv"][head_state["argv"].index("--nnodes") + 1] == "2"


def test_a_two_node_cluster_launches_reaches_ready_and_stops_everywhere(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    launch_and_wait_ready(netns_cluster, tmp_path)

    # the head's status shows every node's phase
    def head_status() -> str | None:
        out = on_head(netns_cluster, "status").stdout
        return out if "node node1 (rank 1): running" in out else None

    status = wait_for(head_status, 20, what="the head's status to show node1 running")
    assert "node node0 (rank 0): head" in status
    node1 = next(line for line in status.splitlines() if "node node1" in line)
    assert "MemAvailable" in node1  # from the worker's own guard
    assert node_watches(netns_cluster.nodes[1]) == 1  # one session carries the worker's news, no polling
    # the head told the worker it serves (on that session): its headless rank, which never logs
    # "ready" itself, rests: phase "ready", the loop on its resting tick, not the start-up one
    worker = netns_cluster.nodes[1]
    first = wait_for(
        lambda: state_on(netns_cluster, worker) if state_phase_ready(netns_cluster, worker) else None,
        30,
        what="the worker's rank to hear that the head serves",
    )
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 >= 4, 10, what="a few seconds at rest")
    later = state_on(netns_cluster, worker)
    assert later is not None and later["phase"] == "ready"
    elapsed = time.monotonic() - t0
    timer_wakes = later["loop"]["wakes"].get("timer", 0) - first["loop"]["wakes"].get("timer", 0)
    # resting: a look at the head every 2 s and the 5 s tick; the start-up tick alone is 4 a second
    assert timer_wakes <= elapsed + 2, (timer_wakes, elapsed)
    stop = on_head(netns_cluster, "stop", "--port", str(PORT))
    assert stop.returncode == 0, stop.stderr
    assert wait_for(lambda: status_is(netns_cluster, worker, "exited"), 30, what="the worker's rank to stop")
    assert wait_for(lambda: nothing_left(netns_cluster), 30, what="no process but sshd on either node")


def test_a_guard_trip_on_the_worker_stops_the_whole_cluster(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    launch_and_wait_ready(netns_cluster, tmp_path)
    head, worker = netns_cluster.nodes
    # a term line far above any MemAvailable: the worker's guard trips at once
    trip = netns_cluster.ssh(worker, "sparktui", "set-guard", "--port", str(PORT), "--term-below", "100000", "--force")
    assert trip.returncode == 0, trip.stderr
    worker_end = wait_for(lambda: status_is(netns_cluster, worker, "exited"), 30, what="the worker's guard to trip")
    assert worker_end["exit"]["reason"] == "guard"
    head_end = wait_for(lambda: status_is(netns_cluster, head, "exited"), 30, what="the head to stop after it")
    assert head_end["exit"]["reason"] == "stopped"
    assert "node1" in (head_end["exit"]["by"] or "")
    assert wait_for(lambda: nothing_left(netns_cluster), 30, what="no process but sshd on either node")


def test_a_worker_whose_head_goes_away_stops_itself(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    launch_and_wait_ready(netns_cluster, tmp_path)
    head, worker = netns_cluster.nodes
    head_state = state_on(netns_cluster, head)
    assert head_state is not None
    # the head's supervisor dies without a word (its reaper then sweeps the head's vLLM): the
    # worker's supervisor sees its head's rendezvous port go and stops its own rank
    os.kill(head_state["supervisor"]["pid"], signal.SIGKILL)
    worker_end = wait_for(lambda: status_is(netns_cluster, worker, "exited"), 40, what="the worker to stop itself")
    assert worker_end["exit"]["reason"] == "stopped"
    assert "the head node0 is gone" in (worker_end["exit"]["by"] or "")
    assert wait_for(lambda: nothing_left(netns_cluster), 30, what="no process but sshd on either node")


def test_a_kill_on_the_head_kills_every_node(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    launch_and_wait_ready(netns_cluster, tmp_path)
    kill = on_head(netns_cluster, "kill", "--port", str(PORT))
    assert kill.returncode == 0, kill.stderr
    worker_end = wait_for(lambda: status_is(netns_cluster, netns_cluster.nodes[1], "exited"), 30, what="the worker")
    assert worker_end["exit"]["reason"] == "killed"
    assert wait_for(lambda: nothing_left(netns_cluster), 30, what="no process but sshd on either node")


def test_the_heads_stop_leaves_another_server_on_the_workers_port_alone(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    """The worker's rank ends and someone starts their own server on its port there before the head
    has acted on it: the head's end stops its own ranks only (node-serve --launch-id, stop --only-id),
    never that server. The head is held (SIGSTOP) while that happens, so the order is certain."""
    launch_and_wait_ready(netns_cluster, tmp_path)
    head, worker = netns_cluster.nodes
    head_state, worker_state = state_on(netns_cluster, head), state_on(netns_cluster, worker)
    assert head_state is not None and worker_state is not None
    assert worker_state["launch_id"] and worker_state["launch_id"] == head_state["launch_id"]
    head_sup = head_state["supervisor"]["pid"]
    os.kill(head_sup, signal.SIGSTOP)
    try:
        stop = netns_cluster.ssh(worker, "sparktui", "stop", "--port", str(PORT))
        assert stop.returncode == 0, stop.stderr
        wait_for(lambda: status_is(netns_cluster, worker, "exited"), 30, what="the worker's rank to stop")
        # the user's own server on that port there
        own = server_profile(tmp_path, "own", PORT, 0.2)
        started = netns_cluster.ssh(worker, "sparktui", "serve", "--detach", str(own))
        assert started.returncode == 0, started.stderr
        theirs = wait_for(lambda: status_is(netns_cluster, worker, "running"), 60, what="the user's own server")
        assert theirs["launch_id"] is None
    finally:
        os.kill(head_sup, signal.SIGCONT)
    # the head hears its rank ended, stops, and its end stops "its" workers: it names its rank there
    head_end = wait_for(lambda: status_is(netns_cluster, head, "exited"), 30, what="the head to stop")
    assert "node1" in (head_end["exit"]["by"] or "")
    left = state_on(netns_cluster, worker)
    assert left is not None and left["status"] == "running" and left["alive"]
    assert left["supervisor"]["pid"] == theirs["supervisor"]["pid"]  # the same server, untouched
    assert all(alive(pid) for pid in [left["tree"]["pid"], *(p for p, _ in left["tree"]["members"])])
    # the head's log says which node it left alone and why
    head_log = (head.state_dir / "supervisor" / f"{PORT}.log").read_text()
    assert f"node node1: `sparktui stop --port {PORT} --only-id {head_state['launch_id']}`" in head_log
    assert "is another one" in head_log
    assert netns_cluster.ssh(worker, "sparktui", "stop", "--port", str(PORT)).returncode == 0
    assert wait_for(lambda: nothing_left(netns_cluster), 30, what="no process but sshd on either node")


def test_preflight_names_the_worker_whose_servers_leave_its_rank_too_little(
    netns_cluster: nc.NetnsCluster, tmp_path: Path
) -> None:
    head, worker = netns_cluster.nodes
    # a server of its own on the worker (its own state dir): 0.4 of this machine
    embed = server_profile(tmp_path, "embed", 8001, 0.4, machine="auto")
    started = netns_cluster.ssh(worker, "sparktui", "serve", "--detach", str(embed))
    assert started.returncode == 0, started.stderr
    wait_for(lambda: status_on(netns_cluster, worker, 8001) == "running", 60, what="the worker's own server")
    # the cluster's rank at 0.4 as well: both together overcommit the worker's pool, not the head's
    done = on_head(netns_cluster, "serve", "--detach", str(cluster_profile(tmp_path, utilization=0.4)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "node node1: the servers already running there reserve" in done.stderr
    assert "port 8001 (embed)" in done.stderr and "ssh node1 sparktui stop --port 8001" in done.stderr
    assert "node node0: the servers" not in done.stderr
    assert "Traceback" not in done.stderr
    assert state_on(netns_cluster, head) is None and state_on(netns_cluster, worker) is None  # nothing launched


def test_preflight_checks_the_link_interface_on_every_node(netns_cluster: nc.NetnsCluster, tmp_path: Path) -> None:
    head, worker = netns_cluster.nodes
    # fab0 on both nodes (a veth pair inside each namespace, gone with it): up on the head with another
    # address than master-addr, down on the worker
    for node in (head, worker):
        subprocess.run(
            ["ip", "-n", node.netns, "link", "add", "fab0", "type", "veth", "peer", "name", "fab0p"], check=True
        )
    subprocess.run(["ip", "-n", head.netns, "addr", "add", "10.213.9.1/24", "dev", "fab0"], check=True)
    for end in ("fab0", "fab0p"):
        subprocess.run(["ip", "-n", head.netns, "link", "set", end, "up"], check=True)
    done = on_head(netns_cluster, "serve", "--detach", str(cluster_profile(tmp_path, interface="fab0")))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "node node0: [cluster] master-addr 10.213.0.1 is not an address of fab0 there (it has 10.213.9.1)" in (
        done.stderr
    )
    assert "node node1: interface fab0 is down; bring it up there: sudo ip link set fab0 up" in done.stderr
    assert state_on(netns_cluster, head) is None and state_on(netns_cluster, worker) is None
    nosuch = on_head(netns_cluster, "serve", "--detach", str(cluster_profile(tmp_path, interface="nosuch0")))
    assert nosuch.returncode == 2
    assert "node node0: no interface nosuch0" in nosuch.stderr and "node node1: no interface nosuch0" in nosuch.stderr


def test_nodes_that_name_the_link_differently_each_use_their_own(tmp_path: Path) -> None:
    """Two GB10s can call their ConnectX ports enP2p1s0f1np1 and enp1s0f0np0: [cluster.interfaces]
    gives each node's, the preflight checks each node's own, and each rank talks over its own."""
    if why := nc.missing_tools():
        pytest.skip(why)
    names = {"node0": "enP2p1s0f1np1", "node1": "enp1s0f0np0"}
    cluster = nc.build(tmp_path / "cluster", link_names=(names["node0"], names["node1"]))
    try:
        head, worker = cluster.nodes
        # one name for both: the worker has no such port, and the error says how to name each node's
        one = on_head(cluster, "serve", "--detach", str(cluster_profile(tmp_path, interface=names["node0"])))
        assert one.returncode == 2, one.stdout + one.stderr
        assert f"node node1: no interface {names['node0']}" in one.stderr and "[cluster.interfaces]" in one.stderr
        assert "node node0: no interface" not in one.stderr and "Traceback" not in one.stderr
        assert state_on(cluster, head) is None

        done = on_head(cluster, "serve", "--detach", str(cluster_profile(tmp_path, interfaces=names)))
        assert done.returncode == 0, done.stdout + done.stderr
        wait_for(lambda: status_is(cluster, head, "running"), 60, what="the head's rank to answer /health")
        worker_state = wait_for(lambda: status_is(cluster, worker, "running"), 30, what="the worker's rank to join")
        head_state = state_on(cluster, head)
        assert head_state is not None
        for state, name, addr in (
            (head_state, names["node0"], "10.213.0.1"),
            (worker_state, names["node1"], "10.213.0.2"),
        ):
            environ = Path(f"/proc/{state['tree']['pid']}/environ").read_bytes().split(b"\0")
            assert f"GLOO_SOCKET_IFNAME={name}".encode() in environ, (name, state["port"])
            assert f"NCCL_SOCKET_IFNAME={name}".encode() in environ and f"VLLM_HOST_IP={addr}".encode() in environ
        stop = on_head(cluster, "stop", "--port", str(PORT))
        assert stop.returncode == 0, stop.stderr
        assert wait_for(lambda: nothing_left(cluster), 30, what="no process but sshd on either node")
    finally:
        cluster.close()

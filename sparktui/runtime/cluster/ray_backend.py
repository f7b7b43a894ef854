"""Two (or more) Sparks serving one model over Ray, the way vLLM's multi-node docs run it.

Every node runs Ray under its own sparktui supervisor (and guard): a worker's supervisor runs
`ray start --address HEAD:PORT --node-ip-address ITS_ADDR --block`; the head's runs `ray start
--head --port PORT --node-ip-address HEAD_ADDR --block` and, once Ray is up, `vllm serve …
--tensor-parallel-size N --distributed-executor-backend ray` (ray_head.py starts the one, then
becomes the other). vLLM's engine joins the Ray cluster as a client (RAY_ADDRESS) and waits for a
placement group of N GPU bundles: the ranks land on the nodes by Ray's own placement.

Each node's Ray keeps its sessions (logs, sockets, the GCS's files) in a temp dir of sparktui's own,
named for the state dir and the port (ray_temp_dir), never Ray's shared /tmp/ray: what sparktui
started is what it removes, and a user's own Ray on the same machine is never touched.

Each node's environment says which address and interface the ranks talk over: VLLM_HOST_IP (vLLM's
get_ip, which Ray's node address must match), and with [cluster] interface NCCL_SOCKET_IFNAME and
GLOO_SOCKET_IFNAME.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.cluster import ClusterSettings
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile
    from sparktui.runtime.launch.runner import LaunchCommand

RAY_VERSION_TIMEOUT_S = 30.0
SIOCGIFADDR = 0x8915


def ray_temp_dir(port: int) -> Path:
    """This node's Ray temp root for the server on `port`. Short on purpose: Ray puts Unix sockets
    under it, and a socket path must stay under 108 bytes."""
    from sparktui.runtime.records import state as st

    digest = hashlib.sha256(str(st.state_dir().resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"sparktui-ray-{os.getuid()}-{digest}-{port}"


def remove_temp_dir(port: int, used: Path | None = None) -> bool:
    """Remove what this node's Ray left in its temp dir (session logs, sockets), and in `used`, the
    dir its Ray really took (ray_ready); True if there was one."""
    found = False
    for path in {ray_temp_dir(port), *([used] if used else [])}:
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
            found = True
    return found


def resolve_ray(executable: str | None, venv: str | None) -> str:
    """The `ray` beside the vLLM that will run (the runner's executable and venv): in the venv,
    next to the executable, on PATH, or beside sparktui's own Python."""
    candidates: list[Path] = []
    if venv:
        candidates.append(Path(os.path.expanduser(venv)) / "bin" / "ray")
    if executable and os.sep in executable:
        candidates.append(Path(os.path.expanduser(executable)).parent / "ray")
    found = shutil.which("ray")
    if found:
        candidates.append(Path(found))
    candidates.append(Path(sys.executable).parent / "ray")
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise UserError(
        '[cluster] backend = "ray": no `ray` executable (looked in the runner\'s venv, beside its executable, '
        "on PATH); install Ray beside vLLM on every node (pip install 'vllm[ray]' or pip install ray)"
    )


@functools.cache
def ray_version(executable: str | None, venv: str | None) -> tuple[str | None, str | None]:
    """(the Ray version this node would run, or None; why not, or None)."""
    try:
        exe = resolve_ray(executable, venv)
    except UserError as exc:
        return None, str(exc)
    try:
        done = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=RAY_VERSION_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"`{exe} --version` failed: {exc}"
    found = re.search(r"version\s+(\S+)", done.stdout)
    if done.returncode != 0 or not found:
        return None, f"`{exe} --version` did not print a Ray version (exit {done.returncode})"
    return found.group(1), None


PER_NODE_TEMP_DIR = (2, 55)  # Ray before 2.55 ignores a worker's --temp-dir: it takes the head's path


def node_temp_dir(cluster: ClusterSettings, port: int, executable: str | None, venv: str | None) -> Path:
    """The temp dir this node's Ray keeps its sessions in: sparktui's own for this node, or, for a
    worker whose Ray predates per-node temp dirs, the head's path (on this machine)."""
    own = ray_temp_dir(port)
    if not cluster.rank or not cluster.head_ray_temp_dir:
        return own
    version, _ = ray_version(executable, venv)
    numbers = tuple(int(n) for n in re.findall(r"\d+", version or "")[:2])
    return own if not numbers or numbers >= PER_NODE_TEMP_DIR else Path(cluster.head_ray_temp_dir)


def interface_address(name: str) -> str:
    """The IPv4 address of interface `name` on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise UserError(
                f"[cluster] interface = {name!r}: this node has no IPv4 address on it ({exc.strerror}); "
                "see `ip -brief address` for the link between the nodes"
            ) from None
    return socket.inet_ntoa(packed[20:24])


def route_source(addr: str) -> str:
    """The address this machine sends from to reach `addr` (a UDP connect: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((addr, 9))
        except OSError as exc:
            raise UserError(f"[cluster]: no route to the head at {addr} from this node ({exc.strerror})") from None
        source: str = s.getsockname()[0]
    return source


def head_address(cluster: ClusterSettings) -> str:
    """The head's address on the link between the nodes: master-addr, or the head's interface's."""
    if cluster.master_addr:
        return cluster.master_addr
    if interface := cluster.interface_at(0):
        return interface_address(interface)
    raise UserError(
        '[cluster] backend = "ray": give master-addr (the head\'s address on the link between the nodes, '
        'e.g. master-addr = "192.168.100.1") or interface (e.g. interface = "enp1s0f1np1")'
    )


def node_address(cluster: ClusterSettings, rank: int) -> str:
    """This node's address for Ray (--node-ip-address) and vLLM (VLLM_HOST_IP)."""
    if rank == 0:
        return head_address(cluster)
    if interface := cluster.interface_at(rank):
        return interface_address(interface)
    assert cluster.master_addr, "the head sets master-addr in every worker's copy of the profile"
    return route_source(cluster.master_addr)


def gpus_per_node(serve: ServeConfig, cluster: ClusterSettings) -> int:
    tp = int(serve.tensor_parallel_size or 1)
    return max(1, tp // len(cluster.nodes))


def node_env(cluster: ClusterSettings, rank: int, addr: str, profile_env: dict[str, str]) -> dict[str, str]:
    """What vLLM's multi-node docs set on each node; a value the profile's [env] gives wins."""
    # Ray 2.5x drains a node for up to 30 s on SIGTERM (for Ray Serve's proxies); vLLM has none,
    # and the stop is the whole cluster's: end at once, within the supervisor's grace.
    from sparktui.runtime.launch.ranks import link_vars

    # the link's variables reach the head's vLLM (the EngineCore, Ray's driver) and every Ray
    # worker's actors, which inherit the environment of the `ray start` that started their raylet
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.update(link_vars(cluster.interface_at(rank), addr))
    return {k: v for k, v in env.items() if k not in profile_env}


def ray_start_argv(ray: str, cluster: ClusterSettings, rank: int, addr: str, gpus: int, temp_dir: Path) -> list[str]:
    argv = [ray, "start"]
    if rank == 0:
        argv += ["--head", "--port", str(cluster.ray_port)]
    else:
        argv += ["--address", f"{cluster.master_addr}:{cluster.ray_port}"]
    argv += ["--node-ip-address", addr, "--num-gpus", str(gpus), "--temp-dir", str(temp_dir)]
    return [*argv, "--disable-usage-stats", "--block"]


def with_ray_backend(serve: ServeConfig) -> ServeConfig:
    """The head's `vllm serve` flags: --distributed-executor-backend ray (the profile's other flags as they are)."""
    from sparktui.core.config import parse_serve_command

    args = serve.to_argv()
    for i, arg in enumerate(args):
        key, _, inline = arg.partition("=")
        if key == "--distributed-executor-backend":
            given = inline or (args[i + 1] if i + 1 < len(args) else "")
            if given != "ray":
                raise UserError(
                    f'--distributed-executor-backend {given}: [cluster] backend = "ray" runs vLLM over Ray; '
                    'remove the flag or set backend = "mp"'
                )
            return serve
    merged = parse_serve_command([*args, "--distributed-executor-backend", "ray"])
    return merged if serve.api_key is None else merged.replace(api_key=serve.api_key)


def node_command(profile: Profile, serve: ServeConfig, vllm: LaunchCommand, rank: int) -> LaunchCommand:
    """What this node's supervisor runs: Ray (and, on the head, vLLM once Ray is up)."""
    from sparktui.runtime.launch.runner import LaunchCommand

    cluster = profile.cluster
    assert cluster is not None
    if vllm.container:
        raise UserError(
            '[cluster] backend = "ray" runs Ray and vLLM natively on each node; use [runner] kind = "native" '
            "with vLLM and Ray installed on every node"
        )
    addr = node_address(cluster, rank)
    port = int(serve.port or 8000)
    executable, venv = profile.runner.executable, profile.runner.venv
    temp_dir = node_temp_dir(cluster, port, executable, venv)
    start = ray_start_argv(resolve_ray(executable, venv), cluster, rank, addr, gpus_per_node(serve, cluster), temp_dir)
    env = {**vllm.env, **node_env(cluster, rank, addr, profile.env)}
    if rank:
        return LaunchCommand(start, env, secret_env=vllm.secret_env)
    env["RAY_ADDRESS"] = f"{addr}:{cluster.ray_port}"  # vLLM's ray.init() joins this cluster, not a new one
    ready = ray_temp_dir(port) / "ray_current_cluster"  # `ray start` writes it once its node is up
    argv = [sys.executable, "-m", "sparktui.runtime.cluster.ray_head", str(ready), str(len(start)), *start, *vllm.argv]
    return LaunchCommand(argv, env, secret_env=vllm.secret_env)


def worker_profile(profile: Profile, rank: int, head_temp_dir: Path | None = None) -> Profile:
    """The copy of the profile a worker's supervisor loads: its rank, the head's address and Ray temp dir."""
    cluster = profile.cluster
    assert cluster is not None
    settings = dataclasses.replace(
        cluster,
        rank=rank,
        master_addr=head_address(cluster),
        head_ray_temp_dir=str(head_temp_dir) if head_temp_dir else None,
    )
    return dataclasses.replace(profile, cluster=settings)


RAY_HEAD_WAIT_S = 180.0  # the head's supervisor starts, then `ray start --head`: seconds on a loaded machine


def ray_ready(temp_dir: Path) -> bool:
    """Whether the Ray of this node is up: `ray start` writes the cluster's address into its temp
    dir once its node runs."""
    return (temp_dir / "ray_current_cluster").exists()


def wait_for_head(port: int, alive: Callable[[], bool], timeout: float = RAY_HEAD_WAIT_S) -> None:
    """Until the head's Ray is up (here, on the head); a UserError when its supervisor ended first."""
    deadline = time.monotonic() + timeout
    while not ray_ready(ray_temp_dir(port)):
        if not alive():
            raise UserError(
                f"the head's Ray did not start; see `sparktui status --port {port}` and the server's log there"
            )
        if time.monotonic() > deadline:
            raise UserError(f"the head's Ray did not start within {timeout:.0f} s; see `sparktui status --port {port}`")
        time.sleep(0.1)


def start_workers(profile: Profile, port: int, launch_id: str) -> list[str]:
    """Start every worker's own supervisor (detached; `ray start --address … --block`) over SSH;
    the hosts started. Each gets its copy of the profile on stdin (its rank, the head's address),
    and the head's `launch_id` (runtime/records/launch_id.py). On a failure the ones already started are
    stopped and a UserError names the node."""
    from sparktui.core.profiles import dumps_profile
    from sparktui.runtime.cluster.ssh import ssh_run, stop_workers

    cluster = profile.cluster
    assert cluster is not None
    started: list[str] = []
    for rank, host in enumerate(cluster.nodes[1:], start=1):
        copy = worker_profile(profile, rank, ray_temp_dir(port))
        remote = ["sparktui", "node-serve", "--launch-id", launch_id]
        code, _, err = ssh_run(host, remote, stdin=dumps_profile(copy))
        if code != 0:
            stop_workers(started, port, launch_id)
            detail = (err.strip().splitlines() or [f"exit {code}"])[-1]
            raise UserError(f"node {host}: its Ray node did not start: {detail}")
        started.append(host)
    return started


def head_profile(profile: Profile, serve: ServeConfig) -> tuple[Profile, ServeConfig]:
    """The head's own profile (rank 0) and `vllm serve` flags (the Ray executor), checked before
    anything starts: the tensor parallelism spans the nodes, and the head's address is known."""
    cluster = profile.cluster
    assert cluster is not None
    tp, nodes = int(serve.tensor_parallel_size or 1), len(cluster.nodes)
    if tp < nodes or tp % nodes:
        raise UserError(
            f"--tensor-parallel-size {tp} over {nodes} nodes: each DGX Spark has one GPU, so the ranks must "
            f"split evenly over the nodes; set --tensor-parallel-size {nodes}"
        )
    settings = dataclasses.replace(cluster, rank=0, master_addr=head_address(cluster))
    return dataclasses.replace(profile, cluster=settings), with_ray_backend(serve)

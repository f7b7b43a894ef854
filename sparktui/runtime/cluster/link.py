"""Two (or more) Sparks serving one model: what the head asks of every node before a launch.

The head reaches each worker with the system's own `ssh` (BatchMode: never a password prompt; the
user's ~/.ssh/config, or the file SPARKTUI_SSH_CONFIG names), and runs `sparktui node-check` there:
one round trip answers whether the node is reachable, which vLLM it would run, whether the
server's port and the master port are free, and its memory. The head answers the same questions
in-process. Every problem is reported with the node it is on.

Our side never uses a shell; ssh joins the remote words with spaces for the remote shell, so each
word is quoted (shlex.quote) before it goes.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui import __version__
from sparktui.errors import UserError
from sparktui.runtime.cluster.report import NodeReport
from sparktui.runtime.cluster.ssh import SSH_TIMEOUT_S, ssh_argv, ssh_run, stop_workers
from sparktui.runtime.launch.ranks import node_rank

if TYPE_CHECKING:
    from collections.abc import Callable

    from sparktui.core.cluster import ClusterSettings
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile, RunnerSettings
    from sparktui.runtime.cluster.node_stream import WorkerStream


def port_in_use(port: int) -> bool:
    """Whether a listener holds `port` on any address of this node (a bind on the wildcard fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


@dataclass(frozen=True)
class NodeAsk:
    """What the head asks every node about besides its vLLM and ports."""

    model: str | None = None  # its files' page cache is measured
    machine: str = "dgx-spark"  # the profile's [machine], for older servers' reservations
    interface: str | None = None  # [cluster] interface: up, with which addresses
    master_addr: str | None = None  # the route to it leaves through which interface
    ray: bool = False  # backend "ray": which Ray this node would run

    @classmethod
    def of(cls, profile: Profile, serve: ServeConfig, host: str) -> NodeAsk:
        """What to ask node `host` (its own interface name, with [cluster.interfaces])."""
        cluster = profile.cluster
        assert cluster is not None
        interface = cluster.interface_of(host)
        return cls(serve.model, str(profile.machine), interface, cluster.master_addr, cluster.backend == "ray")


def node_check(ports: list[int], executable: str, venv: str | None, ask: NodeAsk | None = None) -> dict[str, Any]:
    """What this node would run and whether it can: the answer `sparktui node-check` prints."""
    from sparktui.runtime.cluster.node_checks import memory_facts
    from sparktui.runtime.host.interfaces import interface_facts
    from sparktui.runtime.host.memory import read_memory
    from sparktui.runtime.launch.runner import resolve_native_executable
    from sparktui.runtime.launch.vllm_version import from_executable, from_site_packages

    out: dict[str, Any] = {"sparktui": __version__, "vllm_version": None, "vllm_source": None, "vllm_error": None}
    try:
        exe = resolve_native_executable(executable, venv)
        found = (from_site_packages(Path(os.path.expanduser(venv))) if venv else None) or from_executable(exe)
        if found:
            out["vllm_version"], out["vllm_source"] = found
        else:
            out["vllm_error"] = f"`{exe} --version` did not print a vLLM version"
    except UserError as exc:
        out["vllm_error"] = str(exc)
    if ask is not None and ask.ray:
        from sparktui.runtime.cluster.ray_backend import ray_version

        out["ray_version"], out["ray_error"] = ray_version(executable, venv)
    out["ports_in_use"] = [p for p in ports if port_in_use(p)]
    sample = read_memory(psi=False)
    out["mem_available"], out["mem_total"] = sample.mem_available, sample.mem_total
    if ask is not None:
        out.update(memory_facts(ask.model, ask.machine))
        if ask.interface:
            out["interface"] = interface_facts(ask.interface, ask.master_addr)
    return out


def node_check_argv(ports: list[int], runner: RunnerSettings, ask: NodeAsk | None = None) -> list[str]:
    argv = ["sparktui", "node-check", "--executable", runner.executable or "vllm"]
    if runner.venv:
        argv += ["--venv", runner.venv]
    for port in ports:
        argv += ["--port", str(port)]
    if ask is not None:
        argv += ["--machine", ask.machine] + (["--model", ask.model] if ask.model else [])
        argv += ["--interface", ask.interface] if ask.interface else []
        argv += ["--master-addr", ask.master_addr] if ask.master_addr else []
        argv += ["--ray"] if ask.ray else []
    return argv


def check_remote(host: str, ports: list[int], runner: RunnerSettings, ask: NodeAsk | None = None) -> NodeReport:
    argv = ssh_argv(host, node_check_argv(ports, runner, ask))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return NodeReport(host, False, "no `ssh` client on this machine (apt-get install openssh-client)")
    except subprocess.TimeoutExpired:
        return NodeReport(host, False, f"no answer over SSH within {SSH_TIMEOUT_S:.0f} s")
    if done.returncode == 255:  # ssh's own failure: connection, host key or authentication
        detail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "ssh exit 255"
        return NodeReport(host, False, f"not reachable over SSH: {detail}")
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return NodeReport(
            host, True, f"`sparktui node-check` failed there (exit {done.returncode}: {detail}); is sparktui installed?"
        )
    return NodeReport.from_json(host, data)


def serve_ports(serve: ServeConfig, cluster: ClusterSettings, head: bool) -> list[int]:
    """The ports a node's rank needs free: the head the API server's and the master port (with
    Ray, the Ray head's port)."""
    rendezvous = cluster.ray_port if cluster.backend == "ray" else cluster.master_port
    return [int(serve.port or 8000), rendezvous] if head else []


def check_nodes(profile: Profile, serve: ServeConfig) -> list[NodeReport]:
    """Every node's report, the head (this machine) first."""
    cluster = profile.cluster
    assert cluster is not None
    head_ports = serve_ports(serve, cluster, head=True)
    ask = NodeAsk.of(profile, serve, cluster.head)
    head_data = node_check(head_ports, profile.runner.executable or "vllm", profile.runner.venv, ask)
    reports = [NodeReport.from_json(cluster.head, head_data)]
    reports += [check_remote(host, [], profile.runner, NodeAsk.of(profile, serve, host)) for host in cluster.nodes[1:]]
    return reports


def problems(reports: list[NodeReport]) -> list[str]:
    """What stops a cluster launch, each naming its node."""
    out: list[str] = []
    for r in reports:
        if r.error:
            out.append(f"node {r.host}: {r.error}")
            continue
        if r.vllm_error:
            out.append(f"node {r.host}: {r.vllm_error}")
        if r.ray_error:
            out.append(f"node {r.host}: {r.ray_error}")
        for port in r.ports_in_use:
            out.append(f"node {r.host}: port {port} is in use; stop what holds it or choose another port")
    ours = {r.host: r.sparktui for r in reports if r.sparktui}
    if len(set(ours.values())) > 1:  # node-serve and node-check are a protocol between them
        listed = ", ".join(f"{host} has {v}" for host, v in ours.items())
        out.append(f"the nodes run different sparktui versions ({listed}); install the same one on every node")
    versions = {r.host: r.vllm_version for r in reports if r.vllm_version}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{host} has {v}" for host, v in versions.items())
        out.append(f"the nodes run different vLLM versions ({listed}); every node must run the same one")
    rays = {r.host: r.ray_version for r in reports if r.ray_version}
    if len(set(rays.values())) > 1:  # Ray refuses a node of another version, late and obscurely
        listed = ", ".join(f"{host} has {v}" for host, v in rays.items())
        out.append(f"the nodes run different Ray versions ({listed}); install the same Ray on every node")
    return out


@dataclass
class ClusterPreflight:
    reports: list[NodeReport]
    warnings: list[str]
    summaries: list[str]  # one line per node: its memory against its rank


def preflight(profile: Profile, serve: ServeConfig, force: bool = False) -> ClusterPreflight:
    """Every node's report, judged against the rank it would run; a UserError listing each node's
    problem when any has one (--force lets memory problems through as warnings)."""
    from sparktui.core.cluster import open_ports_note
    from sparktui.runtime.cluster.node_checks import judge_nodes

    reports = check_nodes(profile, serve)
    found = problems(reports)
    judged = judge_nodes(profile, serve, [r for r in reports if not r.error])
    found += judged.interface_problems
    if judged.memory_problems and not force:
        found += [f"{p} (or pass --force)" for p in judged.memory_problems]
    if found:
        raise UserError("cluster preflight failed:\n  " + "\n  ".join(found))
    warnings = judged.warnings + [f"{p} (--force given)" for p in judged.memory_problems]
    assert profile.cluster is not None  # check_nodes refuses a profile without [cluster]
    warnings.append(open_ports_note(profile.cluster))
    return ClusterPreflight(reports, warnings, judged.summaries)


# ---------------------------------------------------------------- launching (backend "mp")

LINK_EVERY_S = 2.0  # how often a worker looks at its head's rendezvous port
STREAM_RECHECK_S = 30.0  # the head acts on its workers' news at once; this only bounds its sleep
HEAD_LOST_AFTER = 2  # a worker stops itself after this many failed looks at a head it once reached


def rank_flags(cluster: ClusterSettings, rank: int) -> list[str]:
    """vLLM's own multi-node flags (vLLM 0.32 arg_utils: --nnodes, --node-rank, --master-addr,
    --master-port; a rank other than 0 runs --headless: no API server)."""
    if not cluster.master_addr:
        raise UserError(
            "[cluster] master-addr: needed for the mp backend; set it to the head's address on the link "
            'between the nodes, e.g. master-addr = "192.168.100.1"'
        )
    flags = ["--nnodes", str(len(cluster.nodes)), "--node-rank", str(rank)]
    flags += ["--master-addr", cluster.master_addr, "--master-port", str(cluster.master_port)]
    return flags + (["--headless"] if rank else [])


def with_rank(serve: ServeConfig, cluster: ClusterSettings, rank: int) -> ServeConfig:
    from sparktui.core.config import parse_serve_command

    merged = parse_serve_command([*serve.to_argv(), *rank_flags(cluster, rank)])
    # the API key never travels in argv (to_argv leaves it out): carry it over
    return merged if serve.api_key is None else merged.replace(api_key=serve.api_key)


def start_workers(profile: Profile, serve: ServeConfig, launch_id: str) -> list[str]:
    """Start every worker's own supervisor (detached, headless rank) over SSH; the hosts started.
    The profile travels on stdin, so a worker needs no copy of it; `launch_id` (the head's, see
    runtime/records/launch_id.py) is recorded in each one's state. On a failure the ones already started are
    stopped and a UserError names the node."""
    from sparktui.core.profiles import dumps_profile

    cluster = profile.cluster
    assert cluster is not None
    text = dumps_profile(profile)
    started: list[str] = []
    for rank, host in enumerate(cluster.nodes[1:], start=1):
        remote = ["sparktui", "node-serve", "--launch-id", launch_id, *rank_flags(cluster, rank)]
        code, _, err = ssh_run(host, remote, stdin=text)
        if code != 0:
            stop_workers(started, serve.port, launch_id)
            detail = (err.strip().splitlines() or [f"exit {code}"])[-1]
            raise UserError(f"node {host}: its rank {rank} did not start: {detail}")
        started.append(host)
    return started


@dataclass
class NodePhase:
    host: str
    rank: int
    status: str  # the node supervisor's status (starting, running, exited…), or "unreachable"
    phase: str | None = None
    exit_reason: str | None = None
    available_gib: float | None = None  # MemAvailable there, from its guard


def nodes_file(port: int) -> Path:
    from sparktui.runtime.records import state as st

    return st.state_dir() / "cluster" / f"{port}.json"


class Link:
    """A node supervisor's view of the rest of its cluster.

    The head keeps one SSH session per worker that carries the worker supervisor's state changes as
    they happen (runtime/cluster/node_stream.py: `sparktui node-watch` there), so a trip, stop or kill on a
    worker reaches the head within a second and nothing is polled at rest. It records every node's
    phase for `status`, and asks its supervisor to stop when a worker's server has ended; on its own
    end it stops every worker. A worker watches the head's rendezvous port (--master-addr:
    --master-port; with Ray, the Ray head's GCS port) every LINK_EVERY_S: once reached, losing it
    means the head is gone, and the worker stops itself."""

    def __init__(
        self,
        profile: Profile,
        serve: ServeConfig,
        rank: int,
        wake: Callable[[], None] | None = None,
        launch_id: str | None = None,
    ) -> None:
        cluster = profile.cluster
        assert cluster is not None
        self.cluster, self.rank, self.port = cluster, rank, int(serve.port or 8000)
        self.launch_id = launch_id  # the cluster's (every node's supervisor has it): the head acts on its own only
        self.wake: Callable[[], None] = wake or (lambda: None)
        self.next_at = 0.0
        self.seen: set[str] = set()
        self.head_reached = False
        self.ready = False  # the head: its /health answered, and the workers are told
        self.head_misses = 0
        self.streams: list[WorkerStream] = []
        self._recorded: list[NodePhase] | None = None
        self.ray_dir: Path | None = None  # the temp dir this worker's Ray keeps its sessions in (backend "ray")
        self.runner = (profile.runner.executable, profile.runner.venv)

    def due(self, now: float) -> bool:
        return now >= self.next_at or any(s.news for s in self.streams)

    def check(self, now: float) -> tuple[bool, str | None]:
        """(the rest of the cluster is up, why this node must stop or None)."""
        self.next_at = now + (LINK_EVERY_S if self.rank else STREAM_RECHECK_S)
        return self._check_head() if self.rank else self._check_workers()

    def _check_head(self) -> tuple[bool, str | None]:
        addr = self.cluster.master_addr or ""
        port = self.cluster.ray_port if self.cluster.backend == "ray" else self.cluster.master_port
        try:
            with socket.create_connection((addr, port), timeout=1.0):
                pass
            self.head_reached, self.head_misses = True, 0
        except OSError:
            if self.head_reached:
                self.head_misses += 1
        if self.head_misses >= HEAD_LOST_AFTER:
            return False, f"the head {self.cluster.head} is gone ({addr}:{port} no longer answers)"
        if self.cluster.backend == "ray":
            from sparktui.runtime.cluster.ray_backend import node_temp_dir, ray_ready

            if self.ray_dir is None:
                self.ray_dir = node_temp_dir(self.cluster, self.port, *self.runner)
            return self.head_reached and ray_ready(self.ray_dir), None  # this node's raylet joined
        return self.head_reached, None

    def announce_ready(self) -> None:
        """The head serves (/health answers): every worker hears it on its stream and rests."""
        self.ready = True
        for stream in self.streams:
            stream.say_ready()

    def _check_workers(self) -> tuple[bool, str | None]:
        from sparktui.runtime.cluster.node_stream import ENDED, WorkerStream

        if not self.streams:
            self.streams = [WorkerStream(host, self.port, self.wake, self.launch_id) for host in self.cluster.nodes[1:]]
            for stream in self.streams:
                stream.start()
                if self.ready:
                    stream.say_ready()
        phases = [NodePhase(self.cluster.head, 0, "head")]
        reason = None
        for rank, stream in enumerate(self.streams, start=1):
            host = stream.host
            data, connected = stream.take()
            node = NodePhase(host, rank, "unreachable")
            if data is not None and not self._ours(data):
                node.status = "replaced"
                reason = reason or f"node {host}: port {self.port} there is another server's, not this cluster's rank"
            elif data is not None:
                node.phase = data.get("phase")
                node.exit_reason = data.get("exit_reason")
                node.available_gib = data.get("available_gib")
                status = str(data.get("status") or "unknown")
                if connected or status in ENDED:  # a lost session leaves the last word stale
                    node.status = status
                if status in ("starting", "running"):
                    self.seen.add(host)
                elif status == "none":  # no record there
                    if host in self.seen:
                        reason = reason or f"node {host} no longer runs the server"
                elif host in self.seen or status in ENDED:
                    reason = reason or f"node {host} ended ({node.exit_reason or status})"
            phases.append(node)
        if phases != self._recorded:
            self._record(phases)
            self._recorded = phases
        return True, reason

    def _ours(self, data: dict[str, Any]) -> bool:
        """A worker's line tells of the rank this head launched (or of no record at all): not of
        another server that took the port there after the rank ended."""
        return not self.launch_id or data.get("status") == "none" or data.get("launch_id") == self.launch_id

    def _record(self, phases: list[NodePhase]) -> None:
        from sparktui.atomic import atomic_write_text

        path = nodes_file(self.port)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([dataclasses.asdict(p) for p in phases]))

    def close(self, how: str) -> list[str]:
        """The head's end is the cluster's: every worker's rank it launched is stopped (killed after
        a kill). What did not go as asked, for its log."""
        for stream in self.streams:
            stream.close()
        if self.rank:
            return []
        if not self.launch_id:  # never stop a server this head cannot tell for its own
            return [
                "the workers were not stopped: this head has no launch id to name its ranks by; "
                "each stops itself once the head's rendezvous port is gone"
            ]
        return stop_workers(self.cluster.nodes[1:], self.port, self.launch_id, "kill" if how == "kill" else "stop")


def this_rank(profile: Profile, serve: ServeConfig) -> int | None:
    """Which node of its cluster a node's own supervisor runs (None: not launched on a node yet).
    The mp backend carries it in vLLM's --node-rank; Ray's in the profile's [cluster] node-rank."""
    if profile.cluster is None:
        return None
    return profile.cluster.rank if profile.cluster.backend == "ray" else node_rank(serve)


def link_for(
    profile: Profile, serve: ServeConfig, wake: Callable[[], None] | None = None, launch_id: str | None = None
) -> Link | None:
    """The cluster link of a node's own supervisor (a [cluster] profile launched with a rank);
    `wake` wakes its loop when a worker's news comes in; `launch_id` is the cluster's."""
    rank = this_rank(profile, serve)
    return None if rank is None else Link(profile, serve, rank, wake, launch_id)


NODES_LIMIT = 1 << 20  # a few lines per node


def read_nodes(port: int) -> list[dict[str, Any]]:
    """The cluster's nodes as the head last wrote them; [] when there is no such file, or it is
    damaged or no regular file of sane size (read_regular: a FIFO there hung the panel)."""
    from sparktui.files import read_regular, warn_shared_folder

    warn_shared_folder(nodes_file(port).parent, "cluster node list")  # shown only (status, the panel)
    try:
        data = json.loads(read_regular(nodes_file(port), NODES_LIMIT, "cluster nodes file"))
    except (OSError, UserError, ValueError, RecursionError):
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

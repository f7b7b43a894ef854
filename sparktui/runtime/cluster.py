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

import errno
import json
import os
import shlex
import socket
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparktui import __version__
from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.cluster import ClusterSettings
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile, RunnerSettings

SSH_TIMEOUT_S = 60.0  # node-check asks `vllm --version` when no venv is named: vLLM imports torch first
SSH_CONFIG_ENV = "SPARKTUI_SSH_CONFIG"


def ssh_argv(host: str, remote: list[str]) -> list[str]:
    """`ssh … HOST -- remote…` with every remote word quoted for the remote shell."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if config := os.environ.get(SSH_CONFIG_ENV):
        argv += ["-F", config]
    return [*argv, host, "--", *(shlex.quote(word) for word in remote)]


@dataclass(frozen=True)
class NodeReport:
    """One node's answers (node-check's JSON, or why there are none)."""

    host: str
    reachable: bool
    error: str | None = None  # why the node could not be asked
    sparktui: str | None = None
    vllm_version: str | None = None
    vllm_source: str | None = None
    vllm_error: str | None = None
    ports_in_use: tuple[int, ...] = ()
    mem_available: int | None = None
    mem_total: int | None = None

    @classmethod
    def from_json(cls, host: str, data: dict[str, Any]) -> NodeReport:
        return cls(
            host=host,
            reachable=True,
            sparktui=data.get("sparktui"),
            vllm_version=data.get("vllm_version"),
            vllm_source=data.get("vllm_source"),
            vllm_error=data.get("vllm_error"),
            ports_in_use=tuple(int(p) for p in data.get("ports_in_use", [])),
            mem_available=data.get("mem_available"),
            mem_total=data.get("mem_total"),
        )


def port_in_use(port: int) -> bool:
    """Whether a listener holds `port` on any address of this node (a bind on the wildcard fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def node_check(ports: list[int], executable: str, venv: str | None) -> dict[str, Any]:
    """What this node would run and whether it can: the answer `sparktui node-check` prints."""
    from pathlib import Path

    from sparktui.runtime.memory import read_memory
    from sparktui.runtime.runner import resolve_native_executable
    from sparktui.runtime.vllm_version import from_executable, from_site_packages

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
    out["ports_in_use"] = [p for p in ports if port_in_use(p)]
    sample = read_memory(psi=False)
    out["mem_available"], out["mem_total"] = sample.mem_available, sample.mem_total
    return out


def node_check_argv(ports: list[int], runner: RunnerSettings) -> list[str]:
    argv = ["sparktui", "node-check", "--executable", runner.executable or "vllm"]
    if runner.venv:
        argv += ["--venv", runner.venv]
    for port in ports:
        argv += ["--port", str(port)]
    return argv


def check_remote(host: str, ports: list[int], runner: RunnerSettings) -> NodeReport:
    argv = ssh_argv(host, node_check_argv(ports, runner))
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
    """The ports a node's rank needs free: the head the API server's and the master port."""
    return [int(serve.port or 8000), cluster.master_port] if head else []


def check_nodes(profile: Profile, serve: ServeConfig) -> list[NodeReport]:
    """Every node's report, the head (this machine) first."""
    cluster = profile.cluster
    assert cluster is not None
    head_ports = serve_ports(serve, cluster, head=True)
    head_data = node_check(head_ports, profile.runner.executable or "vllm", profile.runner.venv)
    reports = [NodeReport.from_json(cluster.head, head_data)]
    reports += [check_remote(host, [], profile.runner) for host in cluster.nodes[1:]]
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
        for port in r.ports_in_use:
            out.append(f"node {r.host}: port {port} is in use; stop what holds it or choose another port")
    versions = {r.host: r.vllm_version for r in reports if r.vllm_version}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{host} has {v}" for host, v in versions.items())
        out.append(f"the nodes run different vLLM versions ({listed}); every node must run the same one")
    return out


def preflight(profile: Profile, serve: ServeConfig) -> list[NodeReport]:
    """Every node's report; a UserError listing each node's problem when any has one."""
    reports = check_nodes(profile, serve)
    found = problems(reports)
    if found:
        raise UserError("cluster preflight failed:\n  " + "\n  ".join(found))
    return reports

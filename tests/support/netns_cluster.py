"""A test cluster on this one machine, from real parts: each "node" is a network namespace on a
private subnet (10.213.0.0/24, a veth pair from the first node to every other), with its own sshd
and its own sparktui state dir. Only namespaces, links and processes the harness made are touched,
and `close()` removes them all, whatever the test did.

The nodes share this machine's filesystem, as two Sparks with the same software would look: the
same sparktui (this checkout's venv) and the same vLLM on every node's PATH. What differs per node
is set by that node's sshd (`SetEnv`), as a login on another machine would find it: PATH and
SPARKTUI_STATE_DIR, plus whatever a test passes (a different vLLM, say).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import shm_held_by, wait_for

SUBNET = "10.213.0"
LINK_NAME = "cx{}"  # the link to worker i, in the head's namespace and in the worker's (two nodes: cx1 on both)
SSHD = "/usr/sbin/sshd"
SPARKTUI = str(Path(sys.executable).parent / "sparktui")  # this checkout's, in the test's venv


def missing_tools() -> str | None:
    """Why a netns cluster cannot be built here, or None when it can."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("ip")):
        if not tool or not os.path.exists(tool):
            return "openssh-server, openssh-client and iproute2 are needed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


@dataclass
class Node:
    name: str  # the SSH host alias the profile's [cluster] nodes use
    netns: str
    addr: str
    state_dir: Path
    sshd: subprocess.Popen[bytes] | None = None

    def pids(self) -> set[int]:
        """Every process in this node's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True, check=False)
        return {int(p) for p in out.stdout.split()}

    def pids_besides_sshd(self) -> set[int]:
        return self.pids() - ({self.sshd.pid} if self.sshd else set())


@dataclass
class NetnsCluster:
    root: Path
    nodes: list[Node] = field(default_factory=list)
    ssh_config: Path | None = None
    links: list[str] = field(default_factory=list)

    def exec_argv(self, node: Node, argv: list[str]) -> list[str]:
        """argv run inside a node's namespace (the way its own processes run)."""
        return ["ip", "netns", "exec", node.netns, *argv]

    def ssh(self, node: Node, *remote: str) -> subprocess.CompletedProcess[str]:
        """Run a command on `node` over SSH from the first node, as the head would."""
        assert self.ssh_config is not None
        argv = self.exec_argv(self.nodes[0], ["ssh", "-F", str(self.ssh_config), node.name, "--", *remote])
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    def on_head(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`sparktui ARGS` on the first node, as its user would run it there."""
        head = self.nodes[0]
        env = {**os.environ, "SPARKTUI_STATE_DIR": str(head.state_dir), "SPARKTUI_SSH_CONFIG": str(self.ssh_config)}
        argv = self.exec_argv(head, [SPARKTUI, *args])
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def state_on(self, node: Node, port: int) -> dict[str, Any] | None:
        """The node's server on `port`, as `sparktui status --json` there shows it (None: no server)."""
        if node is self.nodes[0]:
            done = self.on_head("status", "--port", str(port), "--json")
        else:
            done = self.ssh(node, "sparktui", "status", "--port", str(port), "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    def nothing_left(self) -> bool:
        """No process but sshd on any node."""
        return all(not node.pids_besides_sshd() for node in self.nodes)

    def close(self) -> None:
        """Stop every process in the namespaces (they were all started here), then remove them.
        SIGTERM first, so a stub vLLM removes its /dev/shm segment; what a SIGKILL leaves is removed."""
        pids = {pid for node in self.nodes for pid in node.pids()}
        shm = {name for pid in pids for name in shm_held_by(pid)}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            try:
                wait_for(lambda: not any(node.pids() for node in self.nodes), 5, what="the nodes' processes to end")
            except AssertionError:
                continue
            break
        for name in shm:
            Path("/dev/shm", name).unlink(missing_ok=True)
        for node in self.nodes:
            if node.sshd is not None:
                try:
                    node.sshd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True, check=False)
        for link in self.links:  # gone with its namespace; this is for a half-built cluster
            subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


def build(
    root: Path,
    count: int = 2,
    node_env: dict[str, dict[str, str]] | None = None,
    link_names: tuple[str, str] = (LINK_NAME, LINK_NAME),
) -> NetnsCluster:
    """Make `count` nodes named node0 (the head), node1, … under root. The caller must close() it
    (the `netns_cluster` fixture does, even when the test fails); a failed build closes itself.
    `link_names`: the names (formatted with the worker's index) of the link's end on the head and
    on the worker, as two Sparks may name their ConnectX ports differently."""
    tag = f"{os.getpid() % 100000}"
    cluster = NetnsCluster(root)
    try:
        _build(cluster, root, count, tag, node_env or {}, link_names)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _build(
    cluster: NetnsCluster,
    root: Path,
    count: int,
    tag: str,
    node_env: dict[str, dict[str, str]],
    link_names: tuple[str, str],
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    key = root / "id_ed25519"
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    host_key = root / "host_ed25519"
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    venv_bin = str(Path(sys.executable).parent)
    path = f"{venv_bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    ssh_lines: list[str] = []
    for i in range(count):
        node = Node(f"node{i}", f"stt{tag}n{i}", f"{SUBNET}.{i + 1}", root / f"node{i}" / "state")
        node.state_dir.mkdir(parents=True)
        _run("ip", "netns", "add", node.netns)
        cluster.nodes.append(node)
        _run("ip", "-n", node.netns, "link", "set", "lo", "up")
        ssh_lines += [
            f"Host {node.name}",
            f"  HostName {node.addr}",
            "  User root",
            f"  IdentityFile {key}",
            "  IdentitiesOnly yes",
            "  UserKnownHostsFile /dev/null",
            "  StrictHostKeyChecking no",
            "  LogLevel ERROR",
            "  BatchMode yes",
            "  ConnectTimeout 5",
        ]
    head = cluster.nodes[0]
    for i, node in enumerate(cluster.nodes[1:], start=1):
        a, b = f"stt{tag}a{i}", f"stt{tag}b{i}"
        _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        cluster.links.append(a)
        _run("ip", "link", "set", a, "netns", head.netns)
        _run("ip", "link", "set", b, "netns", node.netns)
        # inside the nodes both ends are named as a Spark's ConnectX port would be on each (by
        # default the same name on both)
        link, peer = (name.format(i) for name in link_names)
        _run("ip", "-n", head.netns, "link", "set", a, "name", link)
        _run("ip", "-n", node.netns, "link", "set", b, "name", peer)
        _run("ip", "-n", node.netns, "addr", "add", f"{node.addr}/24", "dev", peer)
        _run("ip", "-n", node.netns, "link", "set", peer, "up")
        _run("ip", "-n", head.netns, "link", "set", link, "up")
        # the head's address on every link (a /32 route to each worker over its own link)
        _run("ip", "-n", head.netns, "addr", "add", f"{head.addr}/32", "dev", link)
        _run("ip", "-n", head.netns, "route", "add", f"{node.addr}/32", "dev", link)
    if len(cluster.nodes) == 1:
        _run("ip", "-n", head.netns, "addr", "add", f"{head.addr}/24", "dev", "lo")
    cluster.ssh_config = root / "ssh_config"
    cluster.ssh_config.write_text("\n".join(ssh_lines) + "\n")
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    for node in cluster.nodes:
        login_env = {"PATH": path, "SPARKTUI_STATE_DIR": str(node.state_dir), **node_env.get(node.name, {})}
        env_words = [f"{k}={v}" for k, v in login_env.items()]
        config = root / f"{node.name}-sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {node.addr}",
                    "Port 22",
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {authorized}",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    f"PidFile {root / (node.name + '-sshd.pid')}",
                    "SetEnv " + " ".join(env_words),
                ]
            )
            + "\n"
        )
        log = open(root / f"{node.name}-sshd.log", "wb")  # noqa: SIM115 - kept open for sshd's life
        node.sshd = subprocess.Popen(
            cluster.exec_argv(node, [SSHD, "-D", "-e", "-f", str(config)]), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
    for node in cluster.nodes:
        wait_for(lambda n=node: cluster.ssh(n, "true").returncode == 0, 20, what=f"sshd on {node.name}", interval=0.2)

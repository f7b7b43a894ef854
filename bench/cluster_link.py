"""What keeping a two-node cluster together costs at rest, and how fast a worker's end reaches the head.

    sudo .venv/bin/python bench/cluster_link.py [--rest 30] [--runs 3] [--json]

Builds the test cluster of tests/support/netns_cluster.py (two network namespaces on a private
subnet, each with its own sshd; needs root) and serves a [cluster] profile (backend "mp") on it
with the stub vLLM (tests/support/stub_vllm), as tests/runtime/test_cluster_launch.py does.

1. Rest: once both ranks run, the CPU time over --rest seconds of every process in each node's
   namespace except the stub vLLM's: the supervisors and reapers, the ssh clients the head runs,
   sshd and what it runs for them (sparktui on the worker). utime + stime + the reaped children's
   (cutime + cstime) from /proc/PID/stat, so short-lived ssh and `sparktui status` runs count.
   Printed as % of one core per node, with the SSH logins each node's sshd accepted in the window.
2. Trip to head: `sparktui set-guard --term-below 100000` on the worker (its guard trips at once);
   the time from the trip (the worker's record: trip.tripped_at) to the head's supervisor writing
   "stopping" (that state file's mtime; both nodes share this machine's clock). Repeated --runs
   times, each on a fresh launch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import netns_cluster as nc  # noqa: E402
from tests.support.stub_vllm import install_stub  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PORT = 8000


def profile(tmp: Path) -> Path:
    stub = install_stub(tmp / "bin")
    path = tmp / "two-sparks.toml"
    path.write_text(
        f'[serve]\nmodel = "/models/tiny"\nport = {PORT}\nmax-model-len = 512\nenforce-eager = true\n'
        "tensor-parallel-size = 2\ngpu-memory-utilization = 0.3\n"  # both nodes share this machine's memory
        f'[runner]\nexecutable = "{stub}"\n'
        '[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-addr = "10.213.0.1"\nmaster-port = 29501\n'
        'interface = "cx1"\n'
        '[env]\nSTUB_VLLM_TIME_SCALE = "0.01"\nSTUB_VLLM_MAX_LIFE_S = "900"\n'
    )
    return path


def on_head(cluster: nc.NetnsCluster, *args: str) -> subprocess.CompletedProcess[str]:
    head = cluster.nodes[0]
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(head.state_dir), "SPARKTUI_SSH_CONFIG": str(cluster.ssh_config)}
    return subprocess.run(
        cluster.exec_argv(head, [nc.SPARKTUI, *args]), capture_output=True, text=True, timeout=120, env=env, check=False
    )


def status(node: nc.Node) -> str | None:
    try:
        return str(json.loads((node.state_dir / "servers" / f"{PORT}.json").read_text()).get("status"))
    except (OSError, ValueError):
        return None


def wait(what: str, cond: Any, timeout: float = 90.0, every: float = 0.05) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")


def launch(cluster: nc.NetnsCluster, tmp: Path) -> None:
    done = on_head(cluster, "serve", "--detach", str(profile(tmp)))
    if done.returncode != 0:
        raise RuntimeError(f"serve failed: {done.stderr.strip()}")
    wait("both ranks running", lambda: all(status(n) == "running" for n in cluster.nodes))


def stopped(cluster: nc.NetnsCluster) -> None:
    on_head(cluster, "stop", "--port", str(PORT))
    wait("nothing left on the nodes", lambda: not any(n.pids_besides_sshd() for n in cluster.nodes), 60)


def _stat(pid: int) -> tuple[float, bool] | None:
    """(CPU seconds of the process and its reaped children, whether it is the stub vLLM)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    stub = "/bin/vllm serve" in cmdline or cmdline.startswith("VLLM::")
    return sum(int(x) for x in fields[11:15]) / TICKS, stub


def _name(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = [w.decode(errors="replace") for w in words if w]
    for i, word in enumerate(text):  # `python -m sparktui serve …`, `sparktui node-watch …`
        if word.endswith("sparktui") or word == "sparktui":
            return " ".join(text[i : i + 2]).rsplit("/", 1)[-1]
    return Path(text[0]).name if text else "?"


def cpu_by_node(cluster: nc.NetnsCluster) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for node in cluster.nodes:
        seen: dict[int, float] = {}
        for pid in node.pids():
            got = _stat(pid)
            if got is not None and not got[1]:
                seen[pid] = got[0]
        out[node.name] = seen
    return out


def logins(cluster: nc.NetnsCluster, node: nc.Node) -> int:
    """SSH logins the node's sshd accepted so far (its log, written with -e)."""
    return (cluster.root / f"{node.name}-sshd.log").read_text(errors="replace").count("Accepted publickey")


def rest(cluster: nc.NetnsCluster, seconds: float) -> dict[str, Any]:
    logins0 = {n.name: logins(cluster, n) for n in cluster.nodes}
    before, t0 = cpu_by_node(cluster), time.monotonic()
    time.sleep(seconds)
    after, t1 = cpu_by_node(cluster), time.monotonic()
    out: dict[str, Any] = {"seconds": round(t1 - t0, 1)}
    for node in cluster.nodes:
        now, then = after[node.name], before[node.name]
        used = sum(cpu - then.get(pid, 0.0) for pid, cpu in now.items())
        top = sorted(((cpu - then.get(pid, 0.0), pid) for pid, cpu in now.items()), reverse=True)[:3]
        out[node.name] = {
            "pct_of_core": round(100 * used / (t1 - t0), 2),
            "ssh_logins": logins(cluster, node) - logins0[node.name],
            "top": [(_name(pid), round(100 * cpu / (t1 - t0), 2)) for cpu, pid in top if cpu > 0],
        }
    return out


def _read_with_mtime(node: nc.Node) -> tuple[dict[str, Any], float] | None:
    """The node's state record and the wall-clock time it was written (one inode: a write replaces it)."""
    try:
        with open(node.state_dir / "servers" / f"{PORT}.json") as f:
            return json.loads(f.read()), os.fstat(f.fileno()).st_mtime
    except (OSError, ValueError):
        return None


def trip_to_head(cluster: nc.NetnsCluster) -> float:
    """Seconds from the worker guard's trip (its record's trip.tripped_at) to the head's supervisor
    recording "stopping" (that write's mtime; read every 5 ms, so it is caught before the "exited")."""
    head, worker = cluster.nodes
    trip = cluster.ssh(worker, "sparktui", "set-guard", "--port", str(PORT), "--term-below", "100000")
    if trip.returncode != 0:
        raise RuntimeError(f"set-guard failed: {trip.stderr.strip()}")
    t_head = None
    end = time.monotonic() + 60
    while time.monotonic() < end and t_head is None:
        got = _read_with_mtime(head)
        if got is not None and got[0].get("status") == "stopping":
            t_head = got[1]
        elif got is not None and got[0].get("status") == "exited":
            raise RuntimeError("the head's 'stopping' went unseen (read every 5 ms); run again")
        time.sleep(0.005)
    if t_head is None:
        raise RuntimeError("the head did not stop within 60 s of the worker's trip")
    wait("nothing left on the nodes", lambda: not any(n.pids_besides_sshd() for n in cluster.nodes), 60)
    record = _read_with_mtime(worker)
    tripped_at = ((record or ({}, 0.0))[0].get("trip") or {}).get("tripped_at")
    if tripped_at is None:
        raise RuntimeError(f"the worker recorded no trip: {record}")
    return float(t_head - tripped_at)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rest", type=float, default=30.0, help="seconds at rest to measure")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after ready before measuring")
    ap.add_argument("--runs", type=int, default=3, help="worker trips to time (each on a fresh launch)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if why := nc.missing_tools():
        print(f"cannot build the test cluster: {why}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="clusterbench-") as name:
        tmp = Path(name)
        # PYTHONPATH=<another checkout> measures that checkout: its nodes' logins get it too
        pythonpath = os.environ.get("PYTHONPATH")
        node_env = {f"node{i}": {"PYTHONPATH": pythonpath} for i in range(2)} if pythonpath else None
        cluster = nc.build(tmp / "cluster", node_env=node_env)
        try:
            launch(cluster, tmp)
            time.sleep(a.settle)  # past the start-up transient
            result["rest"] = rest(cluster, a.rest)
            stopped(cluster)
            delays = []
            for _ in range(a.runs):
                launch(cluster, tmp)
                delays.append(trip_to_head(cluster))
            result["trip_to_head_s"] = [round(d, 3) for d in delays]
        finally:
            cluster.close()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    r = result["rest"]
    for node in ("node0", "node1"):
        print(
            f"at rest over {r['seconds']} s, {node}: {r[node]['pct_of_core']}% of one core "
            f"(besides vLLM), {r[node]['ssh_logins']} SSH logins to it; most: "
            + ", ".join(f"{name} {pct}%" for name, pct in r[node]["top"])
        )
    d = result["trip_to_head_s"]
    if d:
        print(f"worker trip -> head stopping: median {statistics.median(d):.3f} s, max {max(d):.3f} s (n={len(d)})")
    print(f"machine: {result['cpus']} CPUs; load avg before {result['load_before']}, after {result['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

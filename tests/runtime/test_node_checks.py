"""A cluster's preflight per node: each node's memory judged against the rank it would run there,
the page cache a launch would evict, and the link's interface; every problem names its node and
says what to do. The node's side (`sparktui node-check`) is run for real on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.cluster import API_SERVER_BYTES
from sparktui.core.machine import Machine, host_machine
from sparktui.core.pool import Reservation
from sparktui.core.profiles import parse_profile
from sparktui.core.units import GiB
from sparktui.runtime.cluster.link import NodeReport
from sparktui.runtime.cluster.node_checks import (
    InterfaceFacts,
    judge_interface,
    judge_memory,
    judge_nodes,
    rank_request,
)

CLUSTER = (
    '[serve]\nmodel = "/nowhere/tiny"\ntensor-parallel-size = 2\nport = 8000\ngpu-memory-utilization = 0.8\n'
    '[cluster]\nnodes = ["spark-a", "spark-b"]\nbackend = "mp"\ninterface = "enp1s0f0np0"\n'
    'master-addr = "192.168.100.1"\n'
)


def profile(tmp_path: Path, text: str = CLUSTER):  # type: ignore[no-untyped-def]
    return parse_profile(text, tmp_path / "two.toml")


def mem(available: float, free: float | None = None) -> dict[str, int]:
    return {
        "MemTotal": int(121.7 * GiB),
        "MemAvailable": int(available * GiB),
        "MemFree": int((available if free is None else free) * GiB),
    }


def test_a_node_short_of_its_ranks_request_is_named_with_the_fix(tmp_path: Path) -> None:
    p = profile(tmp_path)
    # these nodes are Sparks of 121.7 GiB, whose own total counts: 0.8 × 121.7 GiB is about 97.4 GiB, so the
    # worker has enough at 98.5 GiB, the head not with its API server
    worker = judge_memory(p, p.serve, "spark-b", 1, mem(98.5), None, [], None)
    assert worker.problems == []
    head = judge_memory(p, p.serve, "spark-a", 0, mem(98.5), None, [], None)
    assert len(head.problems) == 1
    problem = head.problems[0]
    assert problem.startswith("node spark-a: MemAvailable is 98.5 GiB")
    assert "for the API server" in problem and "--gpu-memory-utilization" in problem
    assert f"{API_SERVER_BYTES / GiB:.1f} GiB" in problem
    assert "spark-a (head): MemAvailable 98.5 GiB" in head.summary


def test_the_servers_a_node_already_runs_count_against_its_pool(tmp_path: Path) -> None:
    p = profile(tmp_path)
    chat = Reservation(8001, "chat", int(40 * GiB), "--gpu-memory-utilization 0.3 × 119.6 GiB + CUDA context")
    judged = judge_memory(p, p.serve, "spark-b", 1, mem(110), None, [chat], None)
    pool_problem = next(x for x in judged.problems if "reserve" in x)
    assert pool_problem.startswith("node spark-b: the servers already running there reserve 40.0 GiB")
    assert "port 8001 (chat)" in pool_problem and "ssh spark-b sparktui stop --port 8001" in pool_problem
    # one on the cluster's own port is in the way whatever it reserves
    same = Reservation(8000, "old", GiB, "x")
    judged = judge_memory(p, p.serve, "spark-b", 1, mem(110), None, [same], None)
    assert any("already runs a server on port 8000 there (old)" in x for x in judged.problems)


def test_page_cache_the_launch_would_evict_and_the_cache_it_cannot(tmp_path: Path) -> None:
    p = profile(tmp_path)
    # the model's own 30 GiB in the cache are evicted at launch (no root needed): no warning
    ok = judge_memory(p, p.serve, "spark-b", 1, mem(110, free=75), 30 * GiB, [], None)
    assert ok.warnings == [] and "the model's files 30.0 GiB of page cache (evicted at launch)" in ok.summary
    # 35 GiB of other files' pages: vLLM's check on a Spark can fail on them; the fix names the node
    other = judge_memory(p, p.serve, "spark-b", 1, mem(110, free=75), None, [], None)
    assert len(other.warnings) == 1
    assert other.warnings[0].startswith("node spark-b: MemFree is 75.0 GiB but MemAvailable is 110.0 GiB")
    assert "ssh spark-b 'sync; echo 3 | sudo tee /proc/sys/vm/drop_caches'" in other.warnings[0]


def test_the_interface_must_exist_be_up_linked_addressed_and_routed() -> None:
    def facts(**kw: object) -> InterfaceFacts:
        base: dict[str, object] = {"name": "cx1", "exists": True, "up": True, "carrier": True, "operstate": "up"}
        return InterfaceFacts.from_dict({**base, **kw})

    addr = "10.0.0.1"
    assert judge_interface("a", True, facts(addresses=[addr]), addr) == []
    assert judge_interface("b", False, facts(addresses=["10.0.0.2"], route_to_master="cx1"), addr) == []
    cases = [
        (facts(exists=False), True, "node a: no interface cx1"),
        (facts(up=False), False, "node a: interface cx1 is down; bring it up there: sudo ip link set cx1 up"),
        (facts(carrier=False, operstate="lowerlayerdown"), False, "has no link (lowerlayerdown)"),
        (facts(), False, "interface cx1 has no address"),
        (facts(addresses=["10.0.0.9"]), True, "master-addr 10.0.0.1 is not an address of cx1 there"),
        (facts(addresses=["10.0.0.2"], route_to_master="wlan0"), False, "would leave through wlan0, not cx1"),
    ]
    for given, head, wanted in cases:
        found = judge_interface("a", head, given, addr)
        assert len(found) == 1 and wanted in found[0], (given, found)


def test_judge_nodes_takes_each_nodes_own_report(tmp_path: Path) -> None:
    p = profile(tmp_path)
    iface = {"name": "enp1s0f0np0", "exists": True, "up": True, "carrier": True, "operstate": "up"}
    head = NodeReport.from_json("spark-a", {
        "mem_total": int(121.7 * GiB), "mem_available": int(115 * GiB), "mem_free": int(115 * GiB),
        "interface": {**iface, "addresses": ["192.168.100.1"]},
    })  # fmt: skip
    worker = NodeReport.from_json("spark-b", {
        "mem_total": int(121.7 * GiB), "mem_available": int(60 * GiB), "mem_free": int(60 * GiB),
        "interface": {**iface, "addresses": ["192.168.100.2"], "route_to_master": "enp1s0f0np0"},
        "servers": [{"port": 8001, "name": "embed", "bytes": int(50 * GiB), "basis": "b"}],
    })  # fmt: skip
    judged = judge_nodes(p, p.serve, [head, worker])
    assert judged.interface_problems == []
    assert judged.memory_problems and all(x.startswith("node spark-b:") for x in judged.memory_problems)
    assert any("per-node fit was skipped" in w for w in judged.warnings)  # no model here to read
    assert [s.split(":")[0] for s in judged.summaries] == ["node spark-a (head)", "node spark-b (rank 1)"]


def test_a_node_short_of_the_request_only_without_its_per_cpu_free_lists_is_warned_not_refused(
    tmp_path: Path,
) -> None:
    """As preflight: a rank that fits only with the node's just-freed per-CPU pages is a warning."""
    p = profile(tmp_path)
    gib = 1 << 30
    mem = {"MemTotal": int(121.7 * gib), "MemAvailable": 80 * gib, "MemFree": 80 * gib}
    need = rank_request(host_machine(p.machine, Machine.from_reading(mem["MemTotal"], None)), p.serve)
    short = {**mem, "MemAvailable": need - gib, "MemFree": need - gib}
    refused = judge_memory(p, p.serve, "spark-b", 1, short, None, [], None)
    assert refused.problems and "vLLM refuses to start" in refused.problems[0]
    freed = judge_memory(p, p.serve, "spark-b", 1, {**short, "PerCpuFree": 2 * gib}, None, [], None)
    assert freed.problems == []
    assert any("2.0 GiB just freed on its kernel's per-CPU lists" in w for w in freed.warnings)
    report = NodeReport.from_json("spark-b", {"mem_total": 1, "mem_available": 1, "per_cpu_free": 2 * gib})
    assert report.per_cpu_free == 2 * gib
    assert NodeReport.from_json("spark-b", {"per_cpu_free": "lots"}).per_cpu_free == 0  # not a count: none


@pytest.mark.slow  # starts a process
def test_node_check_reports_memory_page_cache_servers_and_interface(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(os.urandom(4 << 20))  # written: in the page cache now
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "sparktui", "node-check", "--executable", "/bin/true", "--model", str(model)]
    argv += ["--interface", "lo", "--master-addr", "127.0.0.1"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["mem_free"] > 0 and data["servers"] == []
    assert data["model_cached"] >= 4 << 20
    lo = data["interface"]
    assert lo["exists"] and lo["up"] and "127.0.0.1" in lo["addresses"] and lo["route_to_master"] == "lo"
    missing = subprocess.run([*argv[:-4], "--interface", "nosuch0"], capture_output=True, text=True, env=env,
                             timeout=120, check=False)  # fmt: skip
    assert json.loads(missing.stdout)["interface"] == {"name": "nosuch0", "exists": False}


def test_nodes_of_the_two_spark_sizes_are_fitted_on_their_own_totals_and_the_smaller_is_named(
    tmp_path: Path,
) -> None:
    """A 121.69 GiB head and a 119.63 GiB worker: each rank is fitted on the MemTotal its node read, and
    the preflight says which node's total every rank's KV cache is held to (vLLM takes the smallest)."""
    p = profile(tmp_path, CLUSTER.replace("/nowhere/tiny", "meta-llama/Llama-3.3-70B-Instruct"))
    iface = {"name": "enp1s0f0np0", "exists": True, "up": True, "carrier": True, "operstate": "up"}

    def reports(worker_kb: int) -> list[NodeReport]:
        nodes = (("spark-a", 127_600_748, "192.168.100.1"), ("spark-b", worker_kb, "192.168.100.2"))
        out = []
        for host, kb, addr in nodes:
            link = {**iface, "addresses": [addr], "route_to_master": "enp1s0f0np0"}
            data = {
                "mem_total": kb * 1024,
                "mem_available": int(115 * GiB),
                "mem_free": int(115 * GiB),
                "interface": link,
            }
            out.append(NodeReport.from_json(host, data))
        return out

    judged = judge_nodes(p, p.serve, reports(125_443_120))
    assert not any("per-node fit was skipped" in w for w in judged.warnings)
    assert judged.kv_limit == judged.summaries[-1]
    assert "tokens per rank, set by worker spark-b (119.63 GiB, its own MemTotal)" in judged.kv_limit
    # the nodes alike: nothing more to say
    assert judge_nodes(p, p.serve, reports(127_600_748)).kv_limit == ""

"""A cluster's preflight, per node: memory against that node's rank, page cache, and the link.

Each node answers for itself (`sparktui node-check` there, in-process on the head): MemAvailable,
MemFree, how much of the model's files its page cache holds (the same mincore measure the local
preflight makes; its own supervisor evicts those pages at launch), what the servers it already runs
reserve (core/pool.py, from their state records), and the named interface: up, its addresses, and
which interface the route to the head's master-addr takes. The head then judges every node against
the rank it will run there: vLLM's start-up request (utilization × total; on the head the API
server too), the pool after the node's other servers, and the per-node fit (core/cluster.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparktui.core import pool
from sparktui.core.machine import Machine, host_machine, machine_from_name
from sparktui.core.units import format_gib
from sparktui.errors import UserError
from sparktui.runtime.host.interfaces import InterfaceFacts

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.machine import Machine
    from sparktui.core.profiles import Profile
    from sparktui.runtime.cluster.report import NodeReport

PAGE_CACHE_WARN_BYTES = 8 << 30  # as the local preflight: only then is other files' cache worth a word


# ---------------------------------------------------------------- what a node says of itself


def memory_facts(model: str | None, machine: str) -> dict[str, Any]:
    """MemAvailable/MemFree, the model's files in the page cache (measured, not evicted), and what
    the servers running here reserve."""
    from sparktui.runtime.host.memory import read_memory, read_per_cpu_free
    from sparktui.runtime.records import state as st
    from sparktui.runtime.records.reservations import reservation_of
    from sparktui.runtime.watch import model_page_cache

    sample = read_memory(psi=False)
    out: dict[str, Any] = {
        "mem_free": sample.mem_free,
        "page_cache": sample.page_cache,
        "per_cpu_free": read_per_cpu_free(),  # just freed, not yet in MemAvailable (as preflight reads)
    }
    if model:
        report = model_page_cache(model, evict=False)
        out["model_cached"] = report.before if report.folder is not None else None
    host = Machine.from_reading(sample.mem_total, sample.mem_available)
    try:
        here = machine_from_name(machine, host)
    except UserError:
        here = host
    out["servers"] = [
        reservation_of(s, here).to_dict() for s in st.list_states() if s.alive and s.running
    ]  # fmt: skip
    return out


# ---------------------------------------------------------------- what the head makes of it


@dataclass
class NodeJudgement:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: str = ""


def _gib(n: int | float) -> str:
    return format_gib(int(n))


def judge_interface(host: str, head: bool, facts: InterfaceFacts | None, master_addr: str | None) -> list[str]:
    """What is wrong with the node's end of the link [cluster] interface names."""
    if facts is None:
        return []
    name = facts.name
    if not facts.exists:
        return [
            f"node {host}: no interface {name} (`ip -brief link` there lists them); set [cluster] interface to "
            "the port that links the nodes, or, where the nodes name it differently, each node's own in "
            f'[cluster.interfaces] ({host} = "…")'
        ]
    if facts.error:
        return [f"node {host}: interface {name}: {facts.error}"]
    if not facts.up:
        return [f"node {host}: interface {name} is down; bring it up there: sudo ip link set {name} up"]
    if not facts.carrier:
        return [
            f"node {host}: interface {name} is up but has no link ({facts.operstate}): check the cable "
            "and that the other node's end is up"
        ]
    if not facts.addresses:
        return [f"node {host}: interface {name} has no address; give it one on the link's subnet (netplan or nmcli)"]
    if head and master_addr and master_addr not in facts.addresses:
        return [
            f"node {host}: [cluster] master-addr {master_addr} is not an address of {name} there (it has "
            f"{', '.join(facts.addresses)}); set master-addr to the head's address on {name}"
        ]
    if not head and master_addr and facts.route_to_master and facts.route_to_master != name:
        return [
            f"node {host}: traffic to master-addr {master_addr} would leave through {facts.route_to_master}, "
            f"not {name}; give {name} an address on the head's subnet (or fix master-addr)"
        ]
    return []


def rank_request(machine: Machine, serve: ServeConfig) -> int:
    """vLLM's start-up request on a node: utilization × what CUDA calls total (it refuses to start
    when free memory is below it)."""
    return math.ceil(serve.gpu_memory_utilization * machine.total)


def judge_memory(
    profile: Profile,
    serve: ServeConfig,
    host: str,
    rank: int,
    mem: dict[str, int],
    model_cached: int | None,
    servers: list[pool.Reservation],
    fit_budget: dict[str, int] | None,
    fit_checked: bool = False,
) -> NodeJudgement:
    """One node's memory against the rank it would run: vLLM's request (unless the per-node fit,
    which holds that rule and more, judged it already), the pool after its other servers, and the
    page cache a launch would have to evict."""
    from sparktui.core.cluster import head_extra_bytes
    from sparktui.core.vllm_log import DROP_CACHES

    cluster = profile.cluster
    assert cluster is not None
    out = NodeJudgement()
    machine = host_machine(profile.machine, Machine.from_reading(mem["MemTotal"], mem.get("MemAvailable")))
    extra = head_extra_bytes(cluster) if rank == 0 else 0
    request = rank_request(machine, serve)
    available, free = mem["MemAvailable"], mem["MemFree"]
    cached = model_cached or 0
    on_head = f" + {_gib(extra)} for the API server{' and the Ray head' if cluster.backend == 'ray' else ''}"
    need = request + extra
    ways = "; ".join(r.describe() for r in servers)
    lists = mem.get("PerCpuFree", 0)
    if need > available and not fit_checked:
        short = (
            f"node {host}: MemAvailable is {_gib(available)} but its rank asks vLLM for {_gib(request)} "
            f"(--gpu-memory-utilization {serve.gpu_memory_utilization:g} × {_gib(machine.total)})"
            f"{on_head if extra else ''}"
        )
        if need <= available + lists:  # as preflight's fit: tight, vLLM's own check reads MemAvailable
            out.warnings.append(
                f"{short}; with the {_gib(lists)} just freed on its kernel's per-CPU lists it is enough, but "
                "vLLM's own check may run before they drain into MemAvailable (start again if it refuses)"
            )
        else:
            out.problems.append(
                f"{short}; vLLM refuses to start below that. "
                + (f"Stop what runs there ({ways}) or lower" if servers else "Free memory there or lower")
                + " --gpu-memory-utilization"
            )
    new, basis = pool.reserved_bytes(machine, serve.gpu_memory_utilization, serve.kv_cache_memory_bytes, fit_budget)
    check = pool.check_pool(machine, new + extra, [r for r in servers if r.port != serve.port])
    if not check.fits:
        stops = " or ".join(f"ssh {host} sparktui stop --port {r.port}" for r in check.others)
        out.problems.append(
            f"node {host}: the servers already running there reserve {_gib(check.reserved_by_others)} ({ways}); "
            f"its rank reserves {_gib(new + extra)} ({basis}{on_head if extra else ''}): "
            f"{_gib(check.reserved_by_others + new + extra)} of its {_gib(check.pool)} pool. "
            f"Stop one ({stops}) or lower --gpu-memory-utilization"
        )
    for r in servers:
        if r.port == serve.port:
            out.problems.append(
                f"node {host}: sparktui already runs a server on port {r.port} there ({r.name}); "
                f"stop it (ssh {host} sparktui stop --port {r.port}) or choose another --port"
            )
    other_cache = max(0, available - free - cached)
    if other_cache >= PAGE_CACHE_WARN_BYTES and free + cached < need:
        out.warnings.append(
            f"node {host}: MemFree is {_gib(free)} but MemAvailable is {_gib(available)}: page cache of other "
            f"files holds {_gib(other_cache)}, and on a DGX Spark vLLM's start-up free-memory check can fail on "
            f"it. Drop the caches there first: ssh {host} '{DROP_CACHES}'"
        )
    cache_note = f", the model's files {_gib(cached)} of page cache (evicted at launch)" if model_cached else ""
    others = f", other servers reserve {_gib(sum(r.bytes for r in servers))}" if servers else ""
    out.summary = (
        f"node {host} ({'head' if rank == 0 else f'rank {rank}'}): MemAvailable {_gib(available)}"
        f"{f' (+ {_gib(lists)} just freed on per-CPU lists)' if lists >= 1 << 30 else ''}, "
        f"MemFree {_gib(free)}{cache_note}{others}; its rank asks {_gib(need)}"
    )
    return out


@dataclass
class ClusterJudgement:
    interface_problems: list[str] = field(default_factory=list)
    memory_problems: list[str] = field(default_factory=list)  # --force lets these through
    warnings: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    kv_limit: str = ""  # where the nodes' totals differ: whose sets every rank's KV cache (the last summary)


def _node_fits(profile: Profile, serve: ServeConfig, reports: list[NodeReport], out: ClusterJudgement) -> list[Any]:
    """The per-node fit (core/cluster.py), each node against its own MemAvailable; None where the
    model cannot be read here (nothing is fetched: the head reads the model as the local fit does)."""
    from sparktui.core import fit as fit_mod
    from sparktui.core.cluster import NodeReading, fit_cluster
    from sparktui.core.modelspec import load_serving_spec

    cluster = profile.cluster
    assert cluster is not None
    try:
        spec = load_serving_spec(serve.model, serve.speculation)
    except UserError as exc:
        out.warnings.append(f"the per-node fit was skipped: {exc}")
        return [None] * len(reports)
    # every node on its own reading in one plan: vLLM gives each rank the smallest rank's KV cache
    readings: dict[str, NodeReading] = {}
    for r in reports:
        mem = _mem_of(r)
        if mem is not None:
            machine = host_machine(profile.machine, Machine.from_reading(mem["MemTotal"], mem.get("MemAvailable")))
            readings[r.host] = NodeReading(machine, mem["MemAvailable"], mem["PerCpuFree"])
    if not readings:
        return [None] * len(reports)
    head = readings.get(cluster.head) or next(iter(readings.values()))
    try:
        planned = fit_cluster(
            serve, spec, head.machine, cluster, head.mem_available, head.free_lists, readings=readings
        )
    except UserError as exc:
        out.memory_problems.append(f"node {next(iter(readings))}: {exc}")
        return [None] * len(reports)
    by_host = {n.host: n.result for n in planned.nodes}
    results: list[Any] = []
    for r in reports:
        result: fit_mod.FitResult | None = by_host.get(r.host) if r.host in readings else None
        results.append(result)
        if result is not None and result.verdict in ("wont_start", "unsafe"):
            reasons = "; ".join(result.reasons) or result.verdict
            out.memory_problems.append(f"node {r.host}: its rank {result.verdict.replace('_', ' ')}: {reasons}")
    if len(readings) == len(cluster.nodes) and len({n.result.kv_cache_bytes for n in planned.nodes}) > 1:
        out.kv_limit = planned.limit_text()  # the nodes differ: say which one every rank is held to
    return results


def _mem_of(r: NodeReport) -> dict[str, int] | None:
    if r.mem_total is None or r.mem_available is None:
        return None
    free = r.mem_free if r.mem_free is not None else r.mem_available
    return {"MemTotal": r.mem_total, "MemAvailable": r.mem_available, "MemFree": free, "PerCpuFree": r.per_cpu_free}


def judge_nodes(profile: Profile, serve: ServeConfig, reports: list[NodeReport]) -> ClusterJudgement:
    """Every reachable node (reports in rank order, the head first) against its rank."""
    cluster = profile.cluster
    assert cluster is not None
    out = ClusterJudgement()
    fits = _node_fits(profile, serve, reports, out)
    for rank, (r, result) in enumerate(zip(reports, fits, strict=True)):
        if cluster.interface_of(r.host):
            out.interface_problems += judge_interface(r.host, rank == 0, r.interface, cluster.master_addr)
        mem = _mem_of(r)
        if mem is None:
            continue
        budget = dict(result.budget) if result is not None else None
        node = judge_memory(
            profile, serve, r.host, rank, mem, r.model_cached, list(r.servers), budget, fit_checked=result is not None
        )
        out.memory_problems += node.problems
        out.warnings += node.warnings
        out.summaries.append(node.summary)
    if out.kv_limit:
        out.summaries.append(out.kv_limit)
    return out


# ---------------------------------------------------------------- the rank's environment

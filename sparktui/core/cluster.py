"""Two (or more) Sparks serving one model: the fit per node.

At tensor parallelism over the nodes each node holds one rank: its share of the weights and of the
KV cache (vLLM shards the cache by KV head, so every rank holds the same number of tokens). The
head node also runs the API server and, with Ray, the Ray head: that load is counted there, so the
head is where the cluster runs short first, as owners report.

Sparks come in two sizes (core.machine.GB10_CUDA_TOTALS), and vLLM sizes every rank's KV cache as the
smallest rank's: vllm/v1/core/kv_cache_utils.py get_kv_cache_configs (0.32) checks one request of
max_model_len against each worker's own available memory, then sets every worker's num_blocks to the
minimum over workers (EngineCore._initialize_kv_caches passes it one figure per worker from
determine_available_memory). So each node is judged on its own total, and the smallest names the limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from sparktui.core.config import ServeConfig
from sparktui.core.fit import VERDICTS, FitResult, fit
from sparktui.core.machine import SPARK_MATCH, Machine, dgx_spark, spark_total
from sparktui.core.modelspec import ModelSpec
from sparktui.core.record import record
from sparktui.core.units import GB, GiB, format_gib
from sparktui.errors import UserError

Backend = Literal["ray", "mp"]
BACKENDS: tuple[str, ...] = ("ray", "mp")

# Estimates, not measurements: vLLM's API server process (tokenizer, HTTP, detokenizer) about
# 1.5 GB resident on a large model; a Ray head (GCS, raylet, dashboard) about 1 GB more.
API_SERVER_BYTES = int(1.5 * GB)
RAY_HEAD_BYTES = 1 * GB


@record
class ClusterSettings:
    """A profile's [cluster]: the nodes by SSH host name (the first is the head), vLLM's backend,
    and the interface or address the ranks talk over."""

    nodes: tuple[str, ...]
    backend: Backend = "ray"
    interface: str | None = None
    master_addr: str | None = None
    master_port: int = 29501
    ray_port: int = 6379  # the Ray head's GCS port (`ray start --head --port`), Ray's own default
    # which node of the cluster this profile runs on: set by the head in the copy each node's own
    # supervisor loads (backend "ray"; the mp backend carries it in vLLM's --node-rank), never by hand
    rank: int | None = None
    # the head's Ray temp dir, set by the head in each worker's copy: a worker's Ray before 2.55
    # ignores its own --temp-dir and keeps its sessions under the head's path (on the worker)
    head_ray_temp_dir: str | None = None
    # [cluster.interfaces]: each node's own name for its end of the link (GB10 nodes can name their
    # ConnectX ports differently); when given it names every node and `interface` is None
    interfaces: tuple[tuple[str, str], ...] = ()

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def has_interface(self) -> bool:
        return bool(self.interface or self.interfaces)

    def interface_of(self, host: str) -> str | None:
        """The link's interface on node `host`: its own ([cluster.interfaces]) or the one name."""
        return dict(self.interfaces).get(host) if self.interfaces else self.interface

    def interface_at(self, rank: int) -> str | None:
        return self.interface_of(self.nodes[rank])


@dataclass(frozen=True)
class NodeReading:
    """What a node said of itself (the preflight's node check): the machine its own MemTotal makes it
    (core.machine.host_machine), its MemAvailable and its per-CPU free lists."""

    machine: Machine
    mem_available: int | None = None
    free_lists: int = 0


@dataclass
class NodeFit:
    host: str
    role: Literal["head", "worker"]
    extra_bytes: int  # what runs there besides the rank (API server, Ray head)
    result: FitResult
    read: bool = False  # its total is its own reading; False: the head's machine, or a Spark planned for

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "host": self.host,
            "role": self.role,
            "extra_bytes": self.extra_bytes,
            "cuda_total": dict(r.cuda_total),
            "total_read": self.read,
            "verdict": r.verdict,
            "reasons": list(r.reasons),
            "weights_bytes": r.weights_bytes,
            "kv_cache_bytes": r.kv_cache_bytes,
            "kv_cache_tokens": r.kv_cache_tokens,
            "max_concurrency": r.max_concurrency,
            "budget": dict(r.budget),
        }


@dataclass
class ClusterFit:
    nodes: list[NodeFit] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """The worst node's: the cluster serves only if every rank starts, and vLLM checks one request of
        max_model_len against each rank's own KV memory (so the smallest node's fit carries that check)."""
        return max((n.result.verdict for n in self.nodes), key=VERDICTS.index)

    @property
    def limiting(self) -> NodeFit:
        """The node whose KV cache every rank gets (vLLM gives each the smallest rank's blocks): the least
        KV memory, then the smallest CUDA total; the first such node (the head) where they are alike."""
        return min(self.nodes, key=lambda n: (n.result.kv_cache_bytes, int(n.result.cuda_total.get("assumed", 0))))

    def limit_text(self) -> str:
        """Which node's total sets every rank's KV cache, and that total (the text and --json say it)."""
        node = self.limiting
        total = node.result.cuda_total
        assumed, low, high = (int(total.get(k, 0)) for k in ("assumed", "low", "high"))
        if low != high:
            said = f"{assumed / GiB:.2f} GiB planned: a Spark reports {low / GiB:.2f} or {high / GiB:.2f} GiB"
        elif node.read:
            said = f"{assumed / GiB:.2f} GiB, its own MemTotal"
        elif node.role == "head" and total.get("basis"):  # a Spark here, or `auto`: this host's reading
            said = f"{assumed / GiB:.2f} GiB, this host's"
        else:
            said = f"{assumed / GiB:.2f} GiB"
        alike = all(n.result.kv_cache_bytes == node.result.kv_cache_bytes for n in self.nodes)
        who = "every node alike" if alike else f"{node.role} {node.host}"
        return f"KV cache {node.result.kv_cache_tokens:,} tokens per rank, set by {who} ({said})"

    def to_dict(self) -> dict[str, Any]:
        node = self.limiting
        return {
            "verdict": self.verdict,
            "kv_cache_tokens": node.result.kv_cache_tokens,
            "limited_by": {
                "host": node.host,
                "role": node.role,
                "cuda_total": dict(node.result.cuda_total),
                "total_read": node.read,
                "text": self.limit_text(),
            },
            "nodes": [n.to_dict() for n in self.nodes],
        }


def open_ports_note(cluster: ClusterSettings) -> str:
    """What listens on every address of a node whatever the link: neither torch's rendezvous store
    (vLLM's --master-port) nor Ray's GCS and raylet take an address to bind (seen with `ss -ltn`:
    `*:PORT`). sparktui can't narrow them, so every cluster launch says so."""
    if cluster.backend == "ray":
        ports = f"Ray's GCS (port {cluster.ray_port}) and its raylet's random ports listen on every node"
    else:
        ports = f"vLLM's rendezvous (--master-port {cluster.master_port}) listens on the head"
    return (
        f"{ports} on every address, not only the link: keep these nodes off untrusted networks, or "
        "let the firewall admit those ports only from the other nodes' link addresses"
    )


def head_extra_bytes(cluster: ClusterSettings) -> int:
    return API_SERVER_BYTES + (RAY_HEAD_BYTES if cluster.backend == "ray" else 0)


def planned_node(machine: Machine) -> Machine:
    """A node other than this host whose total is not read. Where this host (`machine`: its own total, or
    `auto` on one) is a Spark, a Spark of either size: the smaller, the KV range up to the larger; this
    host's own total where it is of the smaller size already (its twin, a reading rather than the public
    figure). A GPU of a given size, or `auto` off a Spark, names every node alike."""
    if machine.name == "dgx-spark" and machine.totals()[0] != machine.totals()[1]:
        return machine  # planned off a Spark already, as every node is
    here = spark_total(machine) if machine.name in ("dgx-spark", "auto") else None
    if here is None:
        return machine
    planned = dgx_spark()
    if abs(here - planned.total) > SPARK_MATCH:
        return planned
    low, high = planned.totals()
    return dataclasses.replace(
        planned,
        total=here,
        mem_total=here,
        mem_available=here - (planned.mem_total - (planned.mem_available or 0)),
        total_low=here,
        total_basis=(
            f"a Spark not read: this Spark's own size ({format_gib(here, 2)}, the smaller of the two totals "
            f"Sparks report, {format_gib(low, 2)} and {format_gib(high, 2)}); the KV range runs to the larger"
        ),
    )


def fit_cluster(
    config: ServeConfig,
    spec: ModelSpec,
    machine: Machine,
    cluster: ClusterSettings,
    mem_available: int | None = None,
    free_lists: int = 0,
    readings: dict[str, NodeReading] | None = None,
) -> ClusterFit:
    """The fit of every node. `machine` is the head's (this host's), with `mem_available` and `free_lists`;
    a node in `readings` (by host) is fitted on what it said of itself; any other is planned for
    (planned_node), since a Spark may be the other size. The head's extra load is taken from what the OS
    keeps, since it lives outside vLLM's request."""
    tp = config.tensor_parallel_size
    if tp % len(cluster.nodes):
        raise UserError(
            f"--tensor-parallel-size {tp} over {len(cluster.nodes)} nodes: each DGX Spark has one GPU, so the "
            f"ranks must split evenly over the nodes; set --tensor-parallel-size {len(cluster.nodes)}"
        )
    out = ClusterFit()
    readings = readings or {}
    for i, host in enumerate(cluster.nodes):
        extra = head_extra_bytes(cluster) if i == 0 else 0
        reading = readings.get(host)
        if reading is not None:
            own, own_available, lists = reading.machine, reading.mem_available, reading.free_lists
        elif i == 0:
            own, own_available, lists = machine, mem_available, free_lists
        else:  # --mem-available names every node's; this host's free lists are not the worker's
            own, own_available, lists = planned_node(machine), mem_available, 0
        node = dataclasses.replace(own, os_need_min=own.os_need_min + extra, os_need=own.os_need + extra)
        available = None if own_available is None else own_available - extra
        result = fit(config, spec, node, mem_available=available, free_lists=lists)
        out.nodes.append(NodeFit(host, "head" if i == 0 else "worker", extra, result, read=reading is not None))
    return out

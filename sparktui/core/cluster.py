"""Two (or more) Sparks serving one model: the fit per node.

At tensor parallelism over the nodes each node holds one rank: its share of the weights and of the
KV cache (vLLM shards the cache by KV head, so every rank holds the same number of tokens). The
head node also runs the API server and, with Ray, the Ray head: that load is counted there, so the
head is where the cluster runs short first, as owners report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from sparktui.core.config import ServeConfig
from sparktui.core.fit import VERDICTS, FitResult, fit
from sparktui.core.machine import Machine
from sparktui.core.modelspec import ModelSpec
from sparktui.core.record import record
from sparktui.core.units import GB
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


@dataclass
class NodeFit:
    host: str
    role: Literal["head", "worker"]
    extra_bytes: int  # what runs there besides the rank (API server, Ray head)
    result: FitResult

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "host": self.host,
            "role": self.role,
            "extra_bytes": self.extra_bytes,
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
        """The worst node's: the cluster serves only if every rank starts."""
        return max((n.result.verdict for n in self.nodes), key=VERDICTS.index)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "nodes": [n.to_dict() for n in self.nodes]}


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


def fit_cluster(
    config: ServeConfig,
    spec: ModelSpec,
    machine: Machine,
    cluster: ClusterSettings,
    mem_available: int | None = None,
    free_lists: int = 0,
) -> ClusterFit:
    """The fit of every node. `machine` is one node (Sparks are alike); the head's extra load is
    taken from what the OS keeps, since it lives outside vLLM's request."""
    tp = config.tensor_parallel_size
    if tp % len(cluster.nodes):
        raise UserError(
            f"--tensor-parallel-size {tp} over {len(cluster.nodes)} nodes: each DGX Spark has one GPU, so the "
            f"ranks must split evenly over the nodes; set --tensor-parallel-size {len(cluster.nodes)}"
        )
    out = ClusterFit()
    for i, host in enumerate(cluster.nodes):
        extra = head_extra_bytes(cluster) if i == 0 else 0
        node = dataclasses.replace(machine, os_need_min=machine.os_need_min + extra, os_need=machine.os_need + extra)
        available = None if mem_available is None else mem_available - extra
        result = fit(config, spec, node, mem_available=available, free_lists=free_lists)
        out.nodes.append(NodeFit(host, "head" if i == 0 else "worker", extra, result))
    return out

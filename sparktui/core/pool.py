"""Several servers on one machine: what each reserves of the pool, whether one more fits, and in
which order the guard stops them.

On unified memory every vLLM claims `gpu_memory_utilization × total` at start-up (or, with
--kv-cache-memory-bytes, its weights + overheads + that KV), whatever the others hold. A second
server that has not allocated yet is invisible in MemAvailable, so two servers that each "fit"
can together hang a DGX Spark. The pool is counted from what each running server reserved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparktui.core.fit import Machine
from sparktui.core.units import format_gib

DEFAULT_UTILIZATION = 0.9  # sparktui always passes one; vLLM's own default differs by version


@dataclass(frozen=True)
class Reservation:
    """What one server takes from the pool."""

    port: int
    name: str  # the profile's name
    bytes: int
    basis: str  # how `bytes` was worked out, for a person
    priority: int = 0  # [guard] priority: the lowest is stopped first when memory runs out

    def describe(self) -> str:
        return f"port {self.port} ({self.name}): {format_gib(self.bytes)} ({self.basis})"

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "name": self.name, "bytes": self.bytes, "basis": self.basis,
                "priority": self.priority}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reservation:
        return cls(int(data["port"]), str(data["name"]), int(data["bytes"]), str(data["basis"]),
                   int(data.get("priority", 0)))  # fmt: skip


def reserved_bytes(
    machine: Machine,
    utilization: float | None,
    kv_cache_memory_bytes: int | None = None,
    fit_budget: Mapping[str, int] | None = None,
) -> tuple[int, str]:
    """(bytes, basis) one server takes: vLLM's request plus its CUDA context, which lives outside it.

    With --kv-cache-memory-bytes vLLM ignores the utilization and takes what it needs: weights,
    activations, workspaces, CUDA graphs and that KV (the fit's budget, when it could be worked out).
    """
    if kv_cache_memory_bytes and fit_budget:
        parts = ("weights", "activation_peak", "non_torch", "cuda_graphs")
        need = sum(int(fit_budget.get(p, 0)) for p in parts) + kv_cache_memory_bytes + machine.cuda_context
        return need, f"--kv-cache-memory-bytes {format_gib(kv_cache_memory_bytes)} + weights and overheads"
    util = DEFAULT_UTILIZATION if utilization is None else utilization
    request = math.ceil(util * machine.total)
    basis = f"--gpu-memory-utilization {util:g} × {format_gib(machine.total)}"
    if kv_cache_memory_bytes:
        basis += " (--kv-cache-memory-bytes given, but its weights are unknown: the request is counted)"
    return request + machine.cuda_context, basis + " + CUDA context"


def pool_bytes(machine: Machine) -> int:
    """What all servers together may reserve: on unified memory the OS keeps its share."""
    if machine.unified:
        return machine.mem_total - machine.os_need_min
    return machine.total


@dataclass(frozen=True)
class PoolCheck:
    pool: int
    others: tuple[Reservation, ...]
    new: int

    @property
    def reserved_by_others(self) -> int:
        return sum(r.bytes for r in self.others)

    @property
    def fits(self) -> bool:
        """Alone, a server is the fit's business (its own budget and vLLM's free-memory check);
        this is about the servers together."""
        return not self.others or self.reserved_by_others + self.new <= self.pool

    def explain(self, new_basis: str) -> str:
        """Why a launch would overcommit, naming every server in the way and what each reserves."""
        ways = "; ".join(r.describe() for r in self.others)
        stop = " or ".join(f"sparktui stop --port {r.port}" for r in self.others)
        return (
            f"the servers already running reserve {format_gib(self.reserved_by_others)} ({ways}); this one "
            f"reserves {format_gib(self.new)} ({new_basis}): {format_gib(self.reserved_by_others + self.new)} "
            f"of a {format_gib(self.pool)} pool. Stop one ({stop}), lower --gpu-memory-utilization, "
            "or pass --force"
        )


def check_pool(machine: Machine, new: int, others: Iterable[Reservation]) -> PoolCheck:
    return PoolCheck(pool_bytes(machine), tuple(others), new)


def stop_order(servers: Iterable[Reservation]) -> list[Reservation]:
    """The guard's order when memory runs out: lowest priority first, then the largest."""
    return sorted(servers, key=lambda r: (r.priority, -r.bytes, r.port))

"""Several servers on one machine: what each reserves of the pool, whether one more fits, and in
which order the guard stops them.

On unified memory every vLLM claims `gpu_memory_utilization × total` at start-up (or, with
--kv-cache-memory-bytes, its weights + overheads + that KV), whatever the others hold. A second
server that has not allocated yet is invisible in MemAvailable, so two servers that each "fit"
can together hang a DGX Spark. The pool is counted from what each running server reserved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.machine import Machine
from sparktui.core.units import format_gib
from sparktui.core.vllm_rules import rules_for

# sparktui passes --gpu-memory-utilization on every launch; a recorded argv without one ran at vLLM's own
# default, of a version the record may not say: the newest rules' (0.92 from vLLM 0.20, 0.9 before), the
# larger, so the pool never counts a server short
DEFAULT_UTILIZATION = rules_for(None).default_utilization


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
    if utilization is None:
        basis += " (not passed: vLLM's own default)"
    if kv_cache_memory_bytes:
        basis += " (--kv-cache-memory-bytes given, but its weights are unknown: the request is counted)"
    return request + machine.cuda_context, basis + " + CUDA context"


def utilization_in(argv: Sequence[str]) -> float | None:
    """--gpu-memory-utilization as a server's recorded argv passed it (None: not passed, or unreadable)."""
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        if name != "--gpu-memory-utilization":
            continue
        text = inline if eq else argv[i + 1] if i + 1 < len(argv) else ""
        try:
            return float(text)
        except ValueError:
            return None
    return None


def recorded_or_counted(
    machine: Machine, port: int, name: str, recorded: Reservation | None, utilization: float | None
) -> Reservation:
    """What a running server reserves: as it recorded at launch, or (older records, which kept none)
    counted from its --gpu-memory-utilization on `machine`."""
    if recorded is not None:
        return recorded
    reserved, basis = reserved_bytes(machine, utilization)
    return Reservation(port, name, reserved, basis)


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

    def verdict_with(self, fit_verdict: str) -> str:
        """The verdict beside the others: won't start when they leave too little of the pool, unless
        the fit already found it unsafe (which says more)."""
        return fit_verdict if self.fits or fit_verdict == "unsafe" else "wont_start"

    def beside_line(self) -> str:
        """What the fit panel says under the verdict."""
        names = ", ".join(f":{r.port} (reserves {format_gib(r.bytes)})" for r in self.others)
        together = f"{format_gib(self.reserved_by_others + self.new)} of a {format_gib(self.pool)} pool"
        if self.fits:
            return f"beside {names}: this one reserves {format_gib(self.new)}, {together}"
        stops = " or ".join(f":{r.port}" for r in self.others)
        return (
            f"won't fit beside {names}: this one reserves {format_gib(self.new)}, {together}; stop {stops}, "
            "or lower --gpu-memory-utilization"
        )


def check_pool(machine: Machine, new: int, others: Iterable[Reservation]) -> PoolCheck:
    return PoolCheck(pool_bytes(machine), tuple(others), new)


@dataclass(frozen=True)
class BesideOthers:
    """The one pool verdict, for a launch's preflight and the fit panel alike: what this server will
    reserve (and how that was worked out), and whether it fits beside the servers already running."""

    check: PoolCheck
    basis: str  # how the new server's reservation was worked out

    @property
    def fits(self) -> bool:
        return self.check.fits

    @property
    def new(self) -> int:
        return self.check.new

    def refusal(self, config: ServeConfig) -> str:
        """Why a launch is refused (unless forced)."""
        return f"--gpu-memory-utilization {config.gpu_memory_utilization:g}: {self.check.explain(self.basis)}"


def beside_others(
    machine: Machine, config: ServeConfig, fit_budget: Mapping[str, int] | None, others: Iterable[Reservation]
) -> BesideOthers:
    """Whether `config` fits beside the servers `others` on `machine` (the machine its fit was judged
    on), counted from what each reserves rather than from MemAvailable, which misses a server that
    has not allocated yet."""
    new, basis = reserved_bytes(machine, config.gpu_memory_utilization, config.kv_cache_memory_bytes, fit_budget)
    return BesideOthers(check_pool(machine, new, others), basis)


def stop_order(servers: Iterable[Reservation]) -> list[Reservation]:
    """The guard's order when memory runs out: lowest priority first, then the largest."""
    return sorted(servers, key=lambda r: (r.priority, -r.bytes, r.port))

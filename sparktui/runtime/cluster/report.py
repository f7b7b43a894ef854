"""One node's answers to node-check, as the head reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparktui.core.pool import Reservation
from sparktui.runtime.host.interfaces import InterfaceFacts


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
    mem_free: int | None = None
    per_cpu_free: int = 0  # just freed on the kernel's per-CPU lists, left out of MemAvailable
    model_cached: int | None = None  # the model's files in its page cache (None: not a local folder there)
    servers: tuple[Reservation, ...] = ()  # what the servers already running there reserve
    interface: InterfaceFacts | None = None  # [cluster] interface as the node sees it
    ray_version: str | None = None  # asked only for backend "ray"
    ray_error: str | None = None

    @classmethod
    def from_json(cls, host: str, data: dict[str, Any]) -> NodeReport:
        iface = data.get("interface")
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
            mem_free=data.get("mem_free"),
            per_cpu_free=lists if isinstance(lists := data.get("per_cpu_free"), int) else 0,
            model_cached=data.get("model_cached"),
            servers=tuple(Reservation.from_dict(r) for r in data.get("servers") or [] if isinstance(r, dict)),
            interface=InterfaceFacts.from_dict(iface) if isinstance(iface, dict) else None,
            ray_version=data.get("ray_version"),
            ray_error=data.get("ray_error"),
        )

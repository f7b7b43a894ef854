"""What vLLM takes for free memory on unified memory, by version: before 0.11.1 it reads
cudaMemGetInfo (≈ MemFree, the page cache left out), from 0.11.1 MemAvailable. The fit compares
vLLM's start-up check with that figure, and says so."""

from __future__ import annotations

from sparktui.core.machine import Machine
from sparktui.core.units import GiB
from sparktui.core.vllm_rules import VllmRules


def _g(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def cuda_free_figure(rules: VllmRules, machine: Machine, mem_available: int | None, mem_free: int | None) -> int | None:
    """vLLM's own free-memory figure where it is below MemAvailable: a vLLM that reads cudaMemGetInfo on
    unified memory (before 0.11.1; vllm/utils/__init__.py MemorySnapshot.measure) sees the free pages
    without the reclaimable page cache (≈ MemFree; some drivers cap it lower still, ~102 of 121.69 GiB
    reported). None where vLLM reads MemAvailable, or where MemFree is not known."""
    if not machine.unified or rules.value("uma_free_memory") != "cuda_free" or mem_free is None:
        return None
    if mem_available is not None and mem_free >= mem_available:
        return None
    return mem_free


def free_memory_note(rules: VllmRules, machine: Machine, free: int | None, vllm_free: int | None) -> list[str]:
    if not machine.unified or rules.value("uma_free_memory") != "cuda_free":
        return []
    if vllm_free is not None:
        return [
            f"vLLM {rules.version} reads free memory with cudaMemGetInfo on a DGX Spark: it sees "
            f"{_g(vllm_free)} (≈ MemFree; some drivers report less) where MemAvailable is {_g(free or 0)}, "
            "so the start-up check uses vLLM's figure (drop the page cache first, or use vLLM 0.11.1 or later)"
        ]
    return [
        f"vLLM {rules.version} reads free memory with cudaMemGetInfo on a DGX Spark, which leaves out "
        "the page cache: it may refuse to start although MemAvailable is enough (drop the page cache "
        "first, or use vLLM 0.11.1 or later); MemFree is not known here, so the fit compares with MemAvailable"
    ]

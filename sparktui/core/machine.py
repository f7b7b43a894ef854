"""The machine a fit is judged on: a DGX Spark, this host (from its memory reading) or a GPU of a
given size, and which of them a launch here is checked against."""

from __future__ import annotations

import math
from functools import partial

from sparktui.core.meminfo import parse_meminfo
from sparktui.core.record import record
from sparktui.core.units import GB, GiB, format_gib
from sparktui.core.vllm_rules import DISCRETE_NON_TORCH, UMA_NON_TORCH
from sparktui.errors import UserError


@record
class Machine:
    """The memory a fit is judged against: the GPU's total, the host's, and what the OS needs."""

    name: str
    total: int  # what CUDA (and so vLLM) calls total memory
    mem_total: int  # host MemTotal; the same pool as `total` on unified memory
    unified: bool  # CPU and GPU share one pool (DGX Spark): the OS lives in it too
    mem_available: int | None = None  # current MemAvailable, when known
    assumed_available: bool = False  # mem_available is a typical idle figure, not a reading
    os_need_min: int = 4 * GB  # OS and services: 4–6 GB
    os_need: int = 6 * GB
    cuda_context: int = int(2.5 * GB)  # outside vLLM's request: 2–3 GB
    # non-torch memory growth inside the request (vllm_rules UMA_NON_TORCH / DISCRETE_NON_TORCH)
    non_torch: int = DISCRETE_NON_TORCH.bytes
    # NVML reports the device's memory (False on GB10: vLLM's batch defaults then take their
    # small-GPU branch, see vllm_rules batch_defaults_gb10)
    device_memory_known: bool = True
    # streaming multiprocessors: they size the V1 sampler's Triton top-k / top-p buffer (None: not known)
    sms: int | None = None
    # the GPU computes FP4 natively (Blackwell: GB10, RTX 50, B200), so vLLM runs NVFP4 MoE on its CUTLASS
    # kernels, which pad the experts (fit_settings.nvfp4_moe_padding); False: Marlin; None: not known
    fp4: bool | None = None
    # the CUDA totals a machine of this name may report, where more than one is seen and nothing in the
    # flags says which (0: `total`); the fit's KV range covers them, its figure takes `total`
    total_low: int = 0
    total_high: int = 0
    total_basis: str = ""  # why `total` is the one assumed ("" where it is simply the machine's)

    def totals(self) -> tuple[int, int]:
        """The lowest and highest CUDA total this machine may report."""
        return (self.total_low or self.total, self.total_high or self.total)

    def describe(self) -> str:
        if self.name == "auto":  # read from this host, which may have no GPU at all
            return (
                f"this host ({format_gib(self.mem_total, 1)} MemTotal, fitted as one unified pool like a "
                f"DGX Spark, {format_gib(self.total, 1)} as CUDA would see it: {self.total_basis})"
            )
        kind = "unified memory" if self.unified else "GPU memory"
        low, high = self.totals()
        if low == high and self.total_basis:  # a Spark at hand: its own total, and why
            return f"{self.name} ({kind}, {format_gib(self.total, 2)} visible to CUDA: {self.total_basis})"
        if low == high:
            return f"{self.name} ({kind}, {format_gib(self.total, 1)} visible to CUDA)"
        return f"{self.name} ({kind}, {format_gib(self.total, 2)} visible to CUDA assumed: {self.total_basis})"

    def label(self, planned: str | float | int) -> str:
        """The machine in a few words, as the panel shows it: what the fit assumes, and the other CUDA total
        it covers where nothing in the flags says which (`planned`: the profile's machine keyword)."""
        size = format_gib(self.mem_total, 1)
        if str(planned).strip().lower() == "auto":
            return f"this host ({size}, fitted as one unified pool like a Spark)"
        if not self.unified:
            return f"a GPU with {self.total / GiB:.0f} GiB"
        high = self.totals()[1]
        if self.name == "dgx-spark" and high == self.total and self.total_basis:  # the Spark at hand
            return f"DGX Spark, {spark_here(self.total)}"
        if high != self.total:  # the figures on this total, the KV range up to the other (the fit's reasons)
            return f"DGX Spark, {size} ({high / GiB:.1f} on some)"
        return f"DGX Spark ({size} unified memory)"

    def span_note(self, utilization: float) -> str:
        """What the fit's request line adds where this machine may report another CUDA total."""
        low, high = self.totals()
        if low == high:
            return ""
        return (
            f"; {self.total_basis}: ceil({utilization:g} × {format_gib(high, 2)}) = "
            f"{format_gib(math.ceil(utilization * high), 2)} there"
        )

    def total_dict(self) -> dict[str, int | str]:
        """The CUDA total the fit assumed, the span it covers and why (--json `cuda_total`)."""
        low, high = self.totals()
        return {"assumed": self.total, "low": low, "high": high, "basis": self.total_basis}

    @classmethod
    def from_reading(cls, total: int, available: int | None) -> Machine:
        """This host ("auto") from its MemTotal and MemAvailable in bytes: fitted as one unified
        pool like a DGX Spark, whose CUDA total is its MemTotal (GB10_CUDA_TOTALS)."""
        if total <= 0:
            raise UserError("/proc/meminfo has no MemTotal; use --machine dgx-spark or a size in GiB")
        return cls(
            "auto",
            total,
            total,
            unified=True,
            mem_available=available,
            non_torch=UMA_NON_TORCH.bytes,
            device_memory_known=False,
            sms=GB10_SMS,
            fp4=True,
            total_basis="on GB10 CUDA's total is MemTotal, read on this host",
        )

    @classmethod
    def from_meminfo(cls, text: str | None) -> Machine | None:
        """This host from /proc/meminfo text the caller read (None: it could not be read)."""
        if not text:
            return None
        info = parse_meminfo(text)
        return cls.from_reading(info["mem_total"], info["mem_available"])


# What CUDA (cudaMemGetInfo, so vLLM's total_memory) reports on a DGX Spark is its MemTotal, and Sparks
# come in two: 119.63 GiB (MemTotal ~125,44x,xxx kB; "Free memory on device (112.04/119.63 GiB)", fixtures
# vllm-logs spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log) and 121.69 GiB (~127,60x,xxx kB;
# spark3x_v0.2x_free-memory-less-than-desired_wrapped_excerpt.log), 2.06 GiB apart. Public readings put
# the gap in the firmware's reservation, not the driver (121.69 on both 580.173 and 610.43) nor the
# flags (tests/fixtures/machines/SOURCES.md).
GB10_CUDA_TOTALS = (int(119.63 * GiB), int(121.69 * GiB))
DGX_SPARK_CUDA_TOTAL = GB10_CUDA_TOTALS[0]
DGX_SPARK_MEM_TOTAL = DGX_SPARK_CUDA_TOTAL  # the same box: MemTotal is CUDA's total
GB10_SMS = 48  # GB10's Blackwell GPU: 6,144 CUDA cores, 128 per SM


# How far a host's MemTotal may lie from one of GB10_CUDA_TOTALS and still be that kind of Spark: the
# public readings of each kind spread 0.08 GiB (119.60–119.68, 121.69–121.71; machines/SOURCES.md)
SPARK_MATCH = int(0.15 * GiB)


def spark_total(host: Machine | None) -> int | None:
    """This host's CUDA total when it is a DGX Spark (its MemTotal lies on one of the two Spark sizes):
    on GB10 CUDA's total is MemTotal. None for any other host, or none read."""
    if host is None or not any(abs(host.mem_total - t) <= SPARK_MATCH for t in GB10_CUDA_TOTALS):
        return None
    return host.mem_total


def spark_here(total: int) -> str:
    """A Spark at hand's total, as the text, --json and the panel all say it."""
    return f"this Spark: {format_gib(total, 1)}"


def dgx_spark(host: Machine | None = None) -> Machine:
    """A DGX Spark. On a Spark (`host`, this host's reading, is one) its own total: nothing left to span.
    Not at hand: the smaller of its two CUDA totals (a pool no larger than any Spark's), the KV range up
    to the larger. An idle Spark keeps about MemTotal − 4 GB available (the OS and services)."""
    here = spark_total(host)
    gb10 = partial(
        Machine,
        "dgx-spark",
        unified=True,
        assumed_available=True,
        non_torch=UMA_NON_TORCH.bytes,
        device_memory_known=False,
        sms=GB10_SMS,
        fp4=True,
    )
    if here is not None:
        return gb10(
            here,
            here,
            mem_available=here - 4 * GB,
            total_basis=f"{spark_here(here)} (its MemTotal, which CUDA reports as its total on GB10)",
        )
    low, high = GB10_CUDA_TOTALS
    return gb10(
        DGX_SPARK_CUDA_TOTAL,
        DGX_SPARK_MEM_TOTAL,
        mem_available=DGX_SPARK_MEM_TOTAL - 4 * GB,
        total_low=low,
        total_high=high,
        total_basis=(
            f"the smaller of the two totals Sparks report ({format_gib(low, 2)} and {format_gib(high, 2)}, "
            "set by the box's firmware, not by the flags); the KV range runs to the larger. "
            "on a Spark sparktui reads its own"
        ),
    )


SPARK_NAMES = ("dgx-spark", "spark", "gb10")


def reads_host(name: str | float | int) -> bool:
    """Whether `machine_from_name(name, host)` uses this host's reading: `auto`, and a Spark (which takes
    this host's total when it is one). The callers read /proc/meminfo only then."""
    return str(name).strip().lower() in ("auto", *SPARK_NAMES)


def host_for(name: str | float | int, meminfo: str | None) -> Machine | None:
    """This host from its /proc/meminfo text, for `machine_from_name(name, …)`: `auto` needs a MemTotal
    (UserError without one); a Spark's profile on a reading without one is planned for, as off the box."""
    if str(name).strip().lower() == "auto":
        return Machine.from_meminfo(meminfo)
    try:
        return Machine.from_meminfo(meminfo)
    except UserError:
        return None


def machine_from_name(name: str | float | int, host: Machine | None = None) -> Machine:
    """`dgx-spark` (this host's own total when `host`, the caller's memory reading, is a Spark), `auto`
    (this host: `host`), or a size in GiB (a GPU with that much memory, not shared with the OS)."""
    if isinstance(name, (int, float)) and not isinstance(name, bool):
        text = str(name)
    else:
        text = str(name).strip().lower()
    if text in SPARK_NAMES:
        return dgx_spark(host)
    if text == "auto":
        if host is None:
            raise UserError(
                "--machine auto needs /proc/meminfo, which could not be read; use --machine dgx-spark or a size in GiB"
            )
        return host
    try:
        size = float(text.removesuffix("gib").strip())
    except ValueError:
        raise UserError(f"--machine: got {name!r}; expected dgx-spark, auto, or a size in GiB such as 80") from None
    if not (1 <= size <= 100_000):
        raise UserError(f"--machine: got {name!r}; expected a size in GiB between 1 and 100000")
    total = int(size * GiB)
    return Machine(f"{size:g} GiB GPU", total, total, unified=False)


def reading_applies(machine: Machine, host_mem_total: int) -> bool:
    """Whether this host's MemAvailable is `machine`'s free memory: only for unified memory of the
    same size. A Spark profile opened on a laptop is judged against an idle Spark, not the laptop."""
    return machine.unified and abs(machine.mem_total - host_mem_total) <= 0.03 * machine.mem_total


def host_machine(planned: str | float | int, host: Machine, warnings: list[str] | None = None) -> Machine:
    """The machine vLLM will start on: the profile's `planned` one, unless it was planned for another
    size of unified memory (a Spark profile on a smaller box is checked against the box it runs on,
    with a warning saying so)."""
    machine = machine_from_name(planned, host)
    if machine.unified and not reading_applies(machine, host.mem_total):
        if warnings is not None:
            warnings.append(
                f"the profile is planned for {machine.name} ({machine.mem_total / 2**30:.1f} GiB) but this "
                f"host has {host.mem_total / 2**30:.1f} GiB: the fit check uses this host"
            )
        machine = host
    return machine

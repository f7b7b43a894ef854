"""Shared by the app tests: a backend with fixed sample data for the parts that read the live
machine (memory, GPU, host name), so screens are deterministic; everything else is real."""

from __future__ import annotations

from types import SimpleNamespace

from sparktui.core.units import GiB
from sparktui.ui.backend import Backend
from sparktui.ui.widgets.gauge import GpuView

# A DGX Spark at rest: MemTotal ≈ 121.7 GiB (DESIGN.md), 2 GiB swap.
SPARK_IDLE = dict(
    mem_total=int(121.7 * GiB),
    mem_available=int(112.4 * GiB),
    mem_free=int(96.3 * GiB),
    page_cache=int(14.8 * GiB),
    swap_total=16 * GiB,
    swap_free=16 * GiB,
    psi_some_avg10=0.0,
    psi_full_avg10=0.0,
    time=0.0,
)


def sample(**changes):
    return SimpleNamespace(**{**SPARK_IDLE, **changes})


class SampleBackend(Backend):
    """Live everywhere except the machine readings, which are fixed."""

    def __init__(self, memory=None, gpu=None):
        self.memory_sample = memory or sample()
        self.gpu_reading = gpu or GpuView(
            util="3%", temp="41°C", power="11.5 W", memory="n/a (unified)", note="NVIDIA GB10"
        )

    def host(self) -> str:
        return "spark-test"

    def memory(self):
        return self.memory_sample

    def gpu(self):
        return self.gpu_reading

"""Memory sampling against the real /proc/meminfo, and NVML absent / Not Supported / real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import psutil
import pynvml
import pytest

from sparktui.runtime.host.memory import (
    PSI_MEMORY,
    GpuSampler,
    PsiTrigger,
    open_pressure_trigger,
    parse_psi,
    read_gpu,
    read_mem_available,
    read_memory,
    tree_memory,
)

MiB = 1024**2


def kernel_page_cache() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[name].split()[0]) * 1024 for name in ("Cached", "Buffers"))


def between(value: int, a: int, b: int, slack: int = 64 * MiB) -> bool:
    return min(a, b) - slack <= value <= max(a, b) + slack


def test_read_memory_matches_the_kernel():
    # Live readings of a busy machine: ours must lie between the kernel's just before and just after.
    before = psutil.virtual_memory()
    cache_before = kernel_page_cache()
    s = read_memory()
    after = psutil.virtual_memory()
    assert s.mem_total == before.total
    assert 0 < s.mem_available <= s.mem_total and 0 < s.mem_free <= s.mem_total
    assert between(s.mem_available, before.available, after.available)
    # psutil's "cached" adds SReclaimable; ours is the kernel's Cached + Buffers, read independently here.
    assert between(s.page_cache, cache_before, kernel_page_cache())
    assert abs(read_mem_available() - s.mem_available) < 256 * MiB
    assert s.swap_total == psutil.swap_memory().total
    if Path("/proc/pressure/memory").exists():
        assert s.psi_some_avg10 is not None and s.psi_some_avg10 >= 0 and s.psi_full_avg10 is not None
    d = s.to_dict()
    assert d["mem_used"] == s.mem_total - s.mem_available and "time" in d


def test_parse_psi_text():
    psi = b"some avg10=1.50 avg60=0.20 avg300=0.00 total=5\nfull avg10=0.75 avg60=0.00 avg300=0.00 total=1\n"
    assert parse_psi(psi) == (1.5, 0.75)
    assert parse_psi(None) == (None, None)


@pytest.mark.slow  # starts a process
def test_read_memory_in_a_forked_child_uses_its_own_fd():
    read_memory()  # opens the cached fd in this process
    code = "import os, sys; from sparktui.runtime.host.memory import read_memory; read_memory(); pid = os.fork()\nif pid == 0:\n    read_memory(); os._exit(0)\nos.waitpid(pid, 0); print(read_memory().mem_total > 0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "True", out.stderr


def _nvml_initialises() -> bool:
    try:
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


HAVE_NVML = _nvml_initialises()


@pytest.mark.skipif(HAVE_NVML, reason="this machine has NVML; the no-driver path is tested where there is none")
def test_no_nvml_says_why_and_never_raises():
    r = GpuSampler().sample()
    assert r.available is False and r.gpus == [] and not r.unified
    assert r.reason and ("NVML" in r.reason or "driver" in r.reason)
    assert read_gpu().available is False
    assert r.to_dict()["reason"] == r.reason


def test_missing_pynvml_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import now raises ImportError
    r = GpuSampler().sample()
    assert not r.available and "nvidia-ml-py" in r.reason


class _Util:
    gpu, memory = 37, 5


def _not_supported(*_a):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def fake_gb10(monkeypatch, *, memory_info=_not_supported, processes=None):
    """pynvml as it answers on a DGX Spark (GB10): device memory Not Supported, the rest works."""
    calls = []
    procs = (
        processes
        if processes is not None
        else [
            types.SimpleNamespace(pid=4242, usedGpuMemory=3 * 1024**3),
            types.SimpleNamespace(pid=4243, usedGpuMemory=None),
        ]
    )
    patches = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: "580.95.05",
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: ("handle", i),
        "nvmlDeviceGetName": lambda h: "NVIDIA GB10",
        "nvmlDeviceGetUUID": lambda h: "GPU-2dee1e25",
        "nvmlDeviceGetUtilizationRates": lambda h: _Util(),
        "nvmlDeviceGetTemperature": lambda h, s: 40,
        "nvmlDeviceGetPowerUsage": lambda h: 4123,
        "nvmlDeviceGetPowerManagementLimit": _not_supported,  # "N/A" on GB10
        "nvmlDeviceGetClockInfo": lambda h, t: {pynvml.NVML_CLOCK_SM: 2418, pynvml.NVML_CLOCK_MEM: 4266}[t],
        "nvmlDeviceGetMemoryInfo": memory_info,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: procs,
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_gb10_memory_not_supported_is_unified(monkeypatch):
    calls = fake_gb10(monkeypatch)
    sampler = GpuSampler()
    r = sampler.sample()
    assert r.available and r.reason is None and r.driver_version == "580.95.05"
    (g,) = r.gpus
    assert g.name == "NVIDIA GB10" and g.utilization_pct == 37 and g.temperature_c == 40
    assert (
        g.power_w == pytest.approx(4.123)
        and g.power_limit_w is None
        and g.unavailable["power_limit_w"] == "Not Supported"
    )
    assert g.sm_clock_mhz == 2418 and g.mem_clock_mhz == 4266
    assert g.memory_total is None and g.memory_used is None and g.unified and r.unified
    assert g.memory_text() == "n/a (unified)"
    assert g.unavailable["memory_total"] == "Not Supported"
    assert r.process_memory() == {4242: 3 * 1024**3}
    assert g.process_memory() == {4242: 3 * 1024**3, 4243: None}
    assert r.to_dict()["gpus"][0]["memory_text"] == "n/a (unified)"
    sampler.sample()
    assert calls == ["init"]  # NVML stays initialised between samples
    sampler.close()
    assert calls == ["init", "shutdown"]


def test_discrete_gpu_reports_device_memory(monkeypatch):
    mem = types.SimpleNamespace(total=80 * 1024**3, used=10 * 1024**3, free=70 * 1024**3)
    fake_gb10(monkeypatch, memory_info=lambda h: mem)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: "NVIDIA H100 80GB HBM3")
    g = GpuSampler().sample().gpus[0]
    assert not g.unified and g.memory_total == 80 * 1024**3 and g.memory_text() == "10.0 GiB / 80.0 GiB"


def test_every_nvml_call_failing_still_gives_a_report(monkeypatch):
    fake_gb10(monkeypatch)
    for name in (
        "nvmlDeviceGetName",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetComputeRunningProcesses",
    ):
        monkeypatch.setattr(
            pynvml, name, lambda *a: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST))
        )
    r = GpuSampler().sample()
    g = r.gpus[0]
    assert r.available and g.name is None and g.processes is None and g.utilization_pct is None
    assert "lost" in g.unavailable["name"].lower()
    # Init failing like a machine without a driver.
    monkeypatch.setattr(
        pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    )
    r = GpuSampler().sample()
    assert not r.available and r.reason == "NVIDIA driver not loaded"
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert GpuSampler().sample().reason == "NVML error: boom"


@pytest.mark.skipif(not HAVE_NVML, reason="NVML does not initialise here (no NVIDIA driver)")
def test_real_nvml():
    r = read_gpu()
    assert r.available and r.gpus, r.reason
    for g in r.gpus:
        assert g.name and g.uuid
        if g.memory_total is None:  # GB10: Not Supported, the pool is host memory
            assert "memory_total" in g.unavailable and g.memory_text().startswith("n/a")
        else:  # a discrete GPU such as the H200
            assert not g.unified and 0 <= g.memory_used <= g.memory_total
            assert g.memory_text().endswith("GiB")
        assert g.processes is not None or "processes" in g.unavailable
    assert r.to_dict()["gpus"][0]["name"] == r.gpus[0].name


@pytest.mark.slow  # starts a process
def test_tree_memory_counts_a_child_and_its_grandchild(monkeypatch):
    code = (
        "import subprocess, sys, time\n"
        "buf = bytearray(b'x') * (96 << 20)\n"
        "kid = subprocess.Popen([sys.executable, '-c', \"b = bytearray(b'y') * (64 << 20); print('ok', flush=True); import time; time.sleep(20)\"], stdout=subprocess.PIPE)\n"
        "kid.stdout.readline(); print(kid.pid, flush=True); time.sleep(20)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    kid = None
    try:
        kid = int(p.stdout.readline())
        fake_gb10(monkeypatch, processes=[types.SimpleNamespace(pid=kid, usedGpuMemory=5 * MiB)])
        gpu = GpuSampler().sample()
        t = tree_memory(p.pid, gpu)
        assert set(t.pids) == {p.pid, kid}
        assert t.per_process[p.pid]["rss"] >= 96 * MiB and t.per_process[kid]["rss"] >= 64 * MiB
        assert t.rss_bytes >= 160 * MiB and t.gpu_bytes == 5 * MiB and t.total_bytes == t.rss_bytes + 5 * MiB
        no_gpu = tree_memory(p.pid, None)
        assert no_gpu.gpu_bytes is None and no_gpu.rss_bytes >= 160 * MiB
    finally:
        if kid is not None:
            os.kill(kid, signal.SIGKILL)
        p.kill()
        p.wait()


# -- PSI triggers


def test_psi_trigger_spec_and_the_unprivileged_window():
    asked = PsiTrigger("some", 150_000, 1_000_000)
    assert asked.spec() == b"some 150000 1000000\0"
    assert asked.unprivileged() == PsiTrigger("some", 300_000, 2_000_000)  # the same 15% of a wider window
    assert PsiTrigger("full", 100_000, 3_000_000).unprivileged() == PsiTrigger("full", 133_333, 4_000_000)
    assert PsiTrigger("some", 500_000, 2_000_000).unprivileged().window_us == 2_000_000
    for bad in ({"kind": "most"}, {"window_us": 100_000}, {"stall_us": 0}, {"stall_us": 2_000_000}):
        with pytest.raises(ValueError):
            PsiTrigger(**bad)


@pytest.mark.skipif(not Path(PSI_MEMORY).exists(), reason="this kernel has no PSI")
def test_psi_trigger_arms_on_the_kernel_window_it_allows():
    asked = PsiTrigger("some", 150_000, 1_000_000)
    with open_pressure_trigger(asked) as trigger:
        # As root with CAP_SYS_RESOURCE the 1 s window is taken; without it (containers), 2 s.
        assert trigger.trigger in (asked, asked.unprivileged())
        assert trigger.fileno() >= 0
        trigger.fired(0.0)  # polls without error (whether the machine stalls right now is its own)
    with pytest.raises(ValueError):
        trigger.fileno()  # closed


def test_psi_trigger_on_a_missing_file_names_it(tmp_path):
    with pytest.raises(OSError, match=r"missing/memory.pressure"):
        open_pressure_trigger(path=str(tmp_path / "missing" / "memory.pressure"))

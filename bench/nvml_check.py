"""Check sparktui's NVML reading on a real NVIDIA machine and print JSON for the record.

Needs only python3 with nvidia-ml-py and psutil, and this checkout (no network, no torch):

    python3 bench/nvml_check.py > nvml_check.json

It reads the GPU through sparktui.runtime.host.memory.read_gpu() (first call includes nvmlInit), times
repeated samples, then starts a child that makes a CUDA context and allocates device memory
through the driver API (libcuda via ctypes, so no torch) and checks that the child shows up in
the per-process GPU memory and in tree_memory(). Where a step is impossible it says why.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparktui.runtime.host.memory import GpuSampler, read_gpu, read_memory, tree_memory

ALLOC_MIB = 512

# The child: CUDA driver API through ctypes. cuInit -> primary context -> cuMemAlloc, then wait.
CUDA_CHILD = f"""
import ctypes, sys, time
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("ERR no libcuda:", e, flush=True); sys.exit(1)
def ck(name, rc):
    if rc != 0:
        s = ctypes.c_char_p(); cuda.cuGetErrorString(rc, ctypes.byref(s))
        print("ERR", name, rc, s.value, flush=True); sys.exit(1)
ck("cuInit", cuda.cuInit(0))
dev = ctypes.c_int(); ck("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
integrated = ctypes.c_int(); cuda.cuDeviceGetAttribute(ctypes.byref(integrated), 18, dev)  # CU_DEVICE_ATTRIBUTE_INTEGRATED
ctx = ctypes.c_void_p(); ck("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
ck("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
ptr = ctypes.c_uint64(); ck("cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t({ALLOC_MIB} << 20)))
ck("cuMemsetD8_v2", cuda.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t({ALLOC_MIB} << 20)))
ck("cuCtxSynchronize", cuda.cuCtxSynchronize())
print("READY", integrated.value, flush=True)
sys.stdin.read()
"""


def timed(fn, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return {
        "n": n,
        "p50_ms": round(statistics.median(times), 3),
        "max_ms": round(max(times), 3),
        "mean_ms": round(statistics.fmean(times), 3),
    }


def raw_nvml() -> dict:
    """What NVML answers directly, beside sparktui's reading, for the record."""
    out: dict = {}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for name, fn in (
            ("memory_info", lambda: pynvml.nvmlDeviceGetMemoryInfo(h)),
            ("addressing_mode", lambda: pynvml.nvmlDeviceGetAddressingMode(h)),
            ("nvml_version", pynvml.nvmlSystemGetNVMLVersion),
            ("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion),
        ):
            try:
                v = fn()
                out[name] = {k: getattr(v, k) for k in ("total", "free", "used")} if name == "memory_info" else v
            except Exception as exc:  # record the answer, whatever it is
                out[name] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> int:
    result: dict = {"python": sys.version.split()[0], "host": os.uname().nodename, "kernel": os.uname().release}
    t = time.perf_counter()
    first = read_gpu()
    result["first_read_gpu_ms"] = round((time.perf_counter() - t) * 1e3, 2)
    result["read_gpu"] = first.to_dict()
    result["raw_nvml"] = raw_nvml()
    if first.available:
        result["timing_read_gpu_with_processes"] = timed(lambda: read_gpu(), 50)
        result["timing_read_gpu_no_processes"] = timed(lambda: read_gpu(processes=False), 50)
        s = GpuSampler()
        t = time.perf_counter()
        s.sample()
        result["fresh_sampler_first_sample_ms"] = round((time.perf_counter() - t) * 1e3, 2)
        s.close()
    result["timing_read_memory"] = timed(read_memory, 2000)
    result["memory_sample"] = read_memory().to_dict()

    child = subprocess.Popen(
        [sys.executable, "-c", CUDA_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline().strip()
        cuda: dict = {"child_pid": child.pid, "child_says": line}
        if line.startswith("READY"):
            cuda["cu_device_attribute_integrated"] = int(line.split()[1])
            # NVML may take a moment to list a new context.
            deadline = time.monotonic() + 5
            seen = None
            while time.monotonic() < deadline:
                report = read_gpu()
                procs = {p.pid: p.used_bytes for g in report.gpus for p in g.processes or ()}
                cuda["nvml_processes"] = {str(k): v for k, v in procs.items()}
                if child.pid in procs:
                    seen = procs[child.pid]
                    break
                time.sleep(0.2)
            cuda["child_listed_by_nvml"] = seen is not None
            cuda["child_gpu_bytes"] = seen
            cuda["child_gpu_bytes_ge_alloc"] = seen is not None and seen >= ALLOC_MIB << 20
            if seen is None and cuda.get("nvml_processes"):
                cuda["note"] = "NVML lists other pids: likely another pid namespace (container), so pids differ"
            tm = tree_memory(child.pid, report)
            cuda["tree_memory"] = tm.to_dict()
        result["cuda_child"] = cuda
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

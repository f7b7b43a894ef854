"""Memory and GPU sampling.

Host memory comes from /proc/meminfo read directly: on GB10 the GPU has no memory of its own,
so MemAvailable is the truth for the whole pool (vLLM uses it as "free" on integrated GPUs).
Measured on the dev box (bench/guard_latency.py prints it again): one pread of /proc/meminfo and
a parse of MemAvailable ~8 µs, a whole MemorySample ~16 µs (22 µs with PSI), psutil.virtual_memory()
~44 µs. The guard reads at up to 500 Hz when close to its lines, so the direct read it is.

The GPU comes from NVML (nvidia-ml-py). Every call can fail independently (GB10 answers
NVML_ERROR_NOT_SUPPORTED for device memory; no driver on CI): each field is None when not
available and the report says why; nothing here raises.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, field
from typing import Any, Literal

from sparktui.core.meminfo import kib_field, parse_meminfo, per_cpu_free_pages
from sparktui.core.record import record
from sparktui.core.units import GiB, format_gib

MEMINFO = "/proc/meminfo"
PSI_MEMORY = "/proc/pressure/memory"
ZONEINFO = "/proc/zoneinfo"
UNIFIED_TEXT = "n/a (unified)"


@record
class MemorySample:
    """One reading of host memory, in bytes; `time` is time.monotonic()."""

    mem_total: int
    mem_available: int
    mem_free: int
    page_cache: int  # Cached + Buffers: mostly reclaimable
    swap_total: int
    swap_free: int
    psi_some_avg10: float | None  # % of time some task stalled on memory (None: no PSI)
    psi_full_avg10: float | None
    time: float

    @property
    def mem_used(self) -> int:
        return self.mem_total - self.mem_available

    @property
    def swap_used(self) -> int:
        return self.swap_total - self.swap_free

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mem_used"] = self.mem_used
        return d


class _ProcFile:
    """A /proc file kept open and re-read with pread (saves the open/close per sample)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = -1

    def read(self) -> bytes | None:
        # After a fork the fd is shared with the child; reopen per process to stay independent.
        if self._fd is None or self._pid != os.getpid():
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            self._pid = os.getpid()
        try:
            return os.pread(self._fd, 8192, 0)
        except OSError:
            return None


_meminfo = _ProcFile(MEMINFO)
_psi = _ProcFile(PSI_MEMORY)


def parse_psi(raw: bytes | None) -> tuple[float | None, float | None]:
    if not raw:
        return None, None
    values: dict[str, float] = {}
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split()
        if parts and parts[0] in ("some", "full"):
            for kv in parts[1:]:
                if kv.startswith("avg10="):
                    values[parts[0]] = float(kv[6:])
    return values.get("some"), values.get("full")


def parse_psi_totals(raw: bytes | None) -> tuple[int | None, int | None]:
    """The cumulative stall times (µs) of `some` and `full`: exact over any window, unlike avg10."""
    if not raw:
        return None, None
    values: dict[str, int] = {}
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split()
        if parts and parts[0] in ("some", "full"):
            for kv in parts[1:]:
                if kv.startswith("total="):
                    values[parts[0]] = int(kv[6:])
    return values.get("some"), values.get("full")


def read_psi_full_total() -> int | None:
    """Microseconds every non-idle task has stalled on memory since boot (None: no PSI)."""
    return parse_psi_totals(_psi.read())[1]


def read_mem_available() -> int:
    """MemAvailable in bytes, as cheaply as possible (the guard's hot path, ~8 µs)."""
    raw = _meminfo.read()
    if raw is None:
        raise OSError(f"cannot read {MEMINFO}: sparktui needs Linux /proc to watch memory")
    value = kib_field(raw, b"MemAvailable:")
    if value is None:
        value = parse_meminfo(raw)["mem_available"]
    return value


def read_per_cpu_free(path: str = ZONEINFO) -> int:
    """Bytes of free pages on the kernel's per-CPU free lists (core.meminfo.per_cpu_free_pages), 0
    where /proc/zoneinfo cannot be read. Up to 1/8 of memory right after a process's teardown (2.3 GiB
    on a 2-CPU 24 GB box, ~15 GiB on a 20-CPU Spark), left out of MemAvailable until the lists drain.
    Read where sparktui decides whether there is room or memory came back (~25 µs here); never by
    the guard, which keeps to MemAvailable (lower, so it only errs early)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return 0
    return per_cpu_free_pages(raw) * _PAGE


def read_memory(*, psi: bool = True) -> MemorySample:
    raw = _meminfo.read()
    if raw is None:
        raise OSError(f"cannot read {MEMINFO}: sparktui needs Linux /proc to watch memory")
    f = parse_meminfo(raw)
    some, full = parse_psi(_psi.read()) if psi else (None, None)
    return MemorySample(
        mem_total=f["mem_total"],
        mem_available=f["mem_available"],
        mem_free=f["mem_free"],
        page_cache=f["cached"] + f["buffers"],
        swap_total=f["swap_total"],
        swap_free=f["swap_free"],
        psi_some_avg10=some,
        psi_full_avg10=full,
        time=time.monotonic(),
    )


# --- PSI triggers: be woken by the kernel when tasks stall on memory -------------------------------

# Without CAP_SYS_RESOURCE the kernel takes only windows that are a multiple of 2 s (EINVAL
# otherwise); with it, any window from 0.5 s to 10 s. Containers often lack that capability even as root.
PSI_UNPRIVILEGED_WINDOW_US = 2_000_000
PSI_MIN_WINDOW_US = 500_000
PSI_MAX_WINDOW_US = 10_000_000


@record
class PsiTrigger:
    """Fire when tasks stalled on memory for more than `stall_us` within any `window_us`:
    "some" (at least one task stalled) or "full" (every non-idle task stalled at once)."""

    kind: Literal["some", "full"] = "some"
    stall_us: int = 150_000
    window_us: int = 1_000_000

    def __post_init__(self) -> None:
        if self.kind not in ("some", "full"):
            raise ValueError(f"PSI trigger kind must be 'some' or 'full', got {self.kind!r}")
        if not PSI_MIN_WINDOW_US <= self.window_us <= PSI_MAX_WINDOW_US:
            raise ValueError(f"PSI window must be 0.5 s to 10 s, got {self.window_us} µs")
        if not 0 < self.stall_us <= self.window_us:
            raise ValueError(f"PSI stall threshold must be within the window, got {self.stall_us} µs")

    def spec(self) -> bytes:
        """What is written to the pressure file (NUL-terminated, as the kernel reads it)."""
        return f"{self.kind} {self.stall_us} {self.window_us}".encode() + b"\0"

    def unprivileged(self) -> PsiTrigger:
        """The nearest trigger an unprivileged writer may set: the window rounded up to a multiple
        of 2 s, the threshold scaled with it (the same share of the window)."""
        window = -(-self.window_us // PSI_UNPRIVILEGED_WINDOW_US) * PSI_UNPRIVILEGED_WINDOW_US
        window = min(window, PSI_MAX_WINDOW_US - PSI_MAX_WINDOW_US % PSI_UNPRIVILEGED_WINDOW_US)
        return PsiTrigger(self.kind, max(1, self.stall_us * window // self.window_us), window)


class PressureTrigger:
    """An armed PSI trigger on a pressure file (/proc/pressure/memory, or a cgroup's
    memory.pressure). Its fd reports select.POLLPRI when the trigger fires (at most once per
    window while the stall lasts); POLLERR when the kernel dropped it (its cgroup was removed).
    Open with `open_pressure_trigger()`."""

    def __init__(self, fd: int, trigger: PsiTrigger, path: str) -> None:
        self._fd: int | None = fd
        self.trigger = trigger  # what the kernel accepted (the window may be wider than asked)
        self.path = path
        self.fired_count = 0

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("the PSI trigger is closed")
        return self._fd

    def fired(self, timeout_s: float = 0.0) -> bool:
        """Wait up to `timeout_s` for the trigger; True if it fired (the event is consumed)."""
        poller = select.poll()
        poller.register(self.fileno(), select.POLLPRI)
        for _, revents in poller.poll(max(0.0, timeout_s) * 1000):
            if revents & (select.POLLERR | select.POLLNVAL):
                raise OSError(errno.ENODEV, f"{self.path}: the PSI trigger was dropped by the kernel")
            if revents & select.POLLPRI:
                self.fired_count += 1
                return True
        return False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> PressureTrigger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pressure_trigger(trigger: PsiTrigger = PsiTrigger(), path: str = PSI_MEMORY) -> PressureTrigger:
    """Arm `trigger` on `path`. Where the kernel refuses the window (unprivileged: a multiple of
    2 s), arms the nearest one it allows instead (`.trigger` says which). OSError when the kernel
    has no PSI, or no triggers (before 5.2), or the file cannot be opened for writing."""
    tries = [trigger]
    if trigger.window_us % PSI_UNPRIVILEGED_WINDOW_US:
        tries.append(trigger.unprivileged())
    last: OSError | None = None
    for attempt in tries:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open {path} for a PSI trigger: {exc.strerror}") from None
        try:
            os.write(fd, attempt.spec())
        except OSError as exc:
            os.close(fd)
            last = exc
            if exc.errno in (errno.EINVAL, errno.EPERM):
                continue  # the window this writer may not use: try the unprivileged one
            break
        return PressureTrigger(fd, attempt, path)
    code = last.errno if last is not None and last.errno is not None else errno.EINVAL
    raise OSError(code, f"{path}: the kernel refused PSI trigger {trigger.spec()[:-1].decode()!r}: {os.strerror(code)}")


# --- GPU (NVML) ----------------------------------------------------------------------------------

# Integrated GPUs whose memory is the host's (NVML cannot report device memory for them).
_INTEGRATED_NAMES = ("GB10", "Jetson", "Orin", "Thor")


@record(frozen=False)
class GpuProcess:
    """A process holding GPU memory, as NVML lists it."""

    pid: int
    used_bytes: int | None  # None: NVML could not say


@record(frozen=False)
class GpuInfo:
    """One GPU's figures as NVML reports them (None: not reported)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    memory_total: int | None = None  # None on unified memory (GB10): see MemorySample instead
    memory_used: int | None = None
    unified: bool = False
    processes: list[GpuProcess] | None = None  # None: NVML could not list them
    unavailable: dict[str, str] = field(default_factory=dict)  # field -> why it is None

    def memory_text(self) -> str:
        if self.memory_total is None:
            return UNIFIED_TEXT if self.unified else "n/a"
        return f"{format_gib(self.memory_used)} / {format_gib(self.memory_total)}"

    def process_memory(self) -> dict[int, int | None]:
        return {p.pid: p.used_bytes for p in self.processes or ()}


@record(frozen=False)
class GpuReport:
    """What NVML could tell. `available` False means no GPU data at all; `reason` says why."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    time: float = field(default_factory=time.monotonic)

    @property
    def unified(self) -> bool:
        """The GPU's memory is host memory: watch MemAvailable, not device memory."""
        return any(g.unified for g in self.gpus)

    def process_memory(self) -> dict[int, int]:
        """pid -> GPU bytes over all GPUs (only pids NVML gave a figure for)."""
        out: dict[int, int] = {}
        for g in self.gpus:
            for p in g.processes or ():
                if p.used_bytes is not None:
                    out[p.pid] = out.get(p.pid, 0) + p.used_bytes
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unified"] = self.unified
        for g, gd in zip(self.gpus, d["gpus"], strict=False):
            gd["memory_text"] = g.memory_text()
        return d


def _nvml_reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc) or name
    if "LibraryNotFound" in name:
        return "NVML library not found (no NVIDIA driver installed)"
    if "DriverNotLoaded" in name:
        return "NVIDIA driver not loaded"
    if "NoPermission" in name:
        return "no permission to query NVML"
    return f"NVML error: {text}"


class GpuSampler:
    """Keeps NVML initialised between samples (nvmlInit costs milliseconds). Thread-safe;
    never raises: `sample()` returns a GpuReport that says why data is missing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml = None
        self._init_error: str | None = None
        self._initialised = False

    def _init(self) -> None:
        if self._initialised:
            return
        self._initialised = True
        try:
            import pynvml  # from nvidia-ml-py
        except ImportError:
            self._init_error = "nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError subclasses, or OSError from ctypes
            self._init_error = _nvml_reason(exc)
            return
        self._nvml = pynvml

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:
                    pass
            self._nvml = None
            self._initialised = False

    def sample(self, *, processes: bool = True) -> GpuReport:
        with self._lock:
            try:
                self._init()
                if self._nvml is None:
                    return GpuReport(available=False, reason=self._init_error)
                return self._sample(self._nvml, processes)
            except Exception as exc:  # never let a monitoring read take the caller down
                return GpuReport(available=False, reason=_nvml_reason(exc))

    def _sample(self, nv: Any, processes: bool) -> GpuReport:
        report = GpuReport(available=True)
        report.driver_version = _call(nv.nvmlSystemGetDriverVersion, {}, "driver_version")
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            return GpuReport(available=False, reason="NVML found no NVIDIA GPU", driver_version=report.driver_version)
        for index in range(count):
            report.gpus.append(self._device(nv, index, processes))
        return report

    def _device(self, nv: Any, index: int, processes: bool) -> GpuInfo:
        g = GpuInfo(index=index)
        why = g.unavailable
        h = _call(nv.nvmlDeviceGetHandleByIndex, why, "handle", index)
        if h is None:
            return g
        g.name = _call(nv.nvmlDeviceGetName, why, "name", h)
        g.uuid = _call(nv.nvmlDeviceGetUUID, why, "uuid", h)
        util = _call(nv.nvmlDeviceGetUtilizationRates, why, "utilization_pct", h)
        if util is not None:
            g.utilization_pct, g.memory_utilization_pct = int(util.gpu), int(util.memory)
        g.temperature_c = _call(nv.nvmlDeviceGetTemperature, why, "temperature_c", h, nv.NVML_TEMPERATURE_GPU)
        mw = _call(nv.nvmlDeviceGetPowerUsage, why, "power_w", h)
        g.power_w = None if mw is None else mw / 1000.0
        mw = _call(nv.nvmlDeviceGetPowerManagementLimit, why, "power_limit_w", h)
        g.power_limit_w = None if mw is None else mw / 1000.0
        g.sm_clock_mhz = _call(nv.nvmlDeviceGetClockInfo, why, "sm_clock_mhz", h, nv.NVML_CLOCK_SM)
        g.mem_clock_mhz = _call(nv.nvmlDeviceGetClockInfo, why, "mem_clock_mhz", h, nv.NVML_CLOCK_MEM)
        mem = _call(nv.nvmlDeviceGetMemoryInfo, why, "memory_total", h)
        if mem is not None and int(mem.total) > 0:
            g.memory_total, g.memory_used = int(mem.total), int(mem.used)
        else:
            if mem is not None:
                why["memory_total"] = "NVML reported 0 bytes of device memory"
            why["memory_used"] = why["memory_total"]
        # Unified: NVML has no device memory to report (GB10 answers Not Supported), or a known
        # integrated part. Then the pool is host memory.
        g.unified = g.memory_total is None and (
            "Not Supported" in why.get("memory_total", "")
            or "0 bytes" in why.get("memory_total", "")
            or any(n in (g.name or "") for n in _INTEGRATED_NAMES)
        )
        if processes:
            procs = _call(nv.nvmlDeviceGetComputeRunningProcesses, why, "processes", h)
            if procs is not None:
                g.processes = [
                    GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs
                ]
        return g


def _call(fn: Callable[..., Any], why: dict[str, Any], name: str, *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception as exc:
        text = str(exc) or type(exc).__name__
        why[name] = "Not Supported" if "NotSupported" in type(exc).__name__ or "Not Supported" in text else text
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value


_default_sampler = GpuSampler()


def read_gpu(*, processes: bool = True) -> GpuReport:
    """One GPU reading through a shared, lazily initialised NVML session. Never raises."""
    return _default_sampler.sample(processes=processes)


# --- process-tree accounting ----------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def descendants(root_pid: int) -> list[int]:
    """root_pid and every live process below it (by parent links, read now)."""
    from sparktui.runtime.host.proc import scan_processes

    children: dict[int, list[int]] = {}
    for p in scan_processes():
        if not p.dead:
            children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


@record(frozen=False)
class TreeMemory:
    """Memory held by a process tree. RSS counts shared pages in each process that maps them."""

    pids: list[int]
    rss_bytes: int
    gpu_bytes: int | None  # None: NVML gave no per-process figures
    per_process: dict[int, dict[str, int | None]] = field(default_factory=dict)  # pid -> {"rss": .., "gpu": ..}

    @property
    def total_bytes(self) -> int:
        return self.rss_bytes + (self.gpu_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_bytes"] = self.total_bytes
        return d


def tree_memory(pids: Iterable[int] | int, gpu: GpuReport | None = None) -> TreeMemory:
    """RSS (and NVML per-process GPU memory, where `gpu` has it) of the given pids, or of a root
    pid and all its descendants when given one int."""
    pid_list = descendants(pids) if isinstance(pids, int) else list(pids)
    gpu_mem = gpu.process_memory() if gpu is not None and gpu.available else None
    total_rss, total_gpu = 0, 0
    per: dict[int, dict[str, int | None]] = {}
    for pid in pid_list:
        rss = rss_bytes(pid)
        g = None if gpu_mem is None else gpu_mem.get(pid)
        if rss is None and g is None:
            continue
        total_rss += rss or 0
        total_gpu += g or 0
        per[pid] = {"rss": rss, "gpu": g}
    has_gpu = gpu is not None and gpu_mem is not None and any(g.processes is not None for g in gpu.gpus)
    return TreeMemory(pids=list(per), rss_bytes=total_rss, gpu_bytes=total_gpu if has_gpu else None, per_process=per)


def gib_text(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GiB:.1f} GiB"

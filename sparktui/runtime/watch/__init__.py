"""Watching a server for what the memory guard cannot see, and leaving a trace when all else fails.

- `WedgeDetector` (pure): a server is suspect when requests are running but nothing moves for
  `wedge-after-s`. The supervisor then sends a 1-token probe with its own timeout; a probe that
  gets no answer confirms the wedge. A long prefill is not a wedge: vLLM 0.32 counts a request's
  prompt tokens (`vllm:prompt_tokens_total`) and its first token only when the prefill ends, so
  during a prefill the generation counter is still; what moves is the KV-cache usage as chunked
  prefill allocates blocks chunk by chunk. Requests without a first token yet are told apart
  from decoding ones by the TTFT histogram's count less the finished requests.
- `CrashLoopBreaker` (pure): automatic restarts stop after N failures in the same phase within
  a window.
- `FlightRecorder`: once a second while a server runs, a compact record (MemAvailable, PSI,
  phase, tree memory, last log lines) goes into a fixed-size ring file, fdatasync'd at most once
  a second, so that after a hard reset the last minutes are on disk.
- Post-mortem: at the next start of any sparktui command (or `sparktui postmortem`), a flight
  record whose boot id is not this boot's and that has no clean stop is analysed: memory
  trajectory, phase, last log lines, kernel messages of the previous boot, a verdict.
- Page cache without root: how much of the model's files the page cache holds (mincore through
  mmap) and evicting exactly those pages with posix_fadvise(DONTNEED).

The room's modules: wedge, crash_loop, flight, postmortem, page_cache, server_watch; their public names
are re-exported here."""

from sparktui.runtime.watch.crash_loop import BreakerFailure, BreakerVerdict, CrashLoopBreaker
from sparktui.runtime.watch.flight import (
    BOOT_ID_ENV,
    BOOT_ID_FILE,
    LOG_LINE_CHARS,
    LOG_LINES,
    SLOT_BYTES,
    SLOTS,
    FlightHeader,
    FlightRecord,
    FlightRecorder,
    current_boot_id,
    flight_dir,
    read_ring,
)
from sparktui.runtime.watch.page_cache import (
    FileCache,
    PageCacheReport,
    evict_file,
    measurable,
    model_files,
    model_folder,
    model_page_cache,
    resident_bytes,
)
from sparktui.runtime.watch.postmortem import (
    EXHAUSTED_BYTES,
    EXHAUSTED_HORIZON_S,
    KERNEL_PATTERN,
    LOADING_PHASES,
    PROFILING_PHASES,
    KernelLog,
    PostMortem,
    Verdict,
    analyse,
    check_after_reboot,
    kernel_lines,
    postmortem_from_dict,
    read_previous_boot_kernel_log,
    saved_postmortems,
)
from sparktui.runtime.watch.server_watch import ProbeResult, ServerWatch, gpu_evidence, probe_completion
from sparktui.runtime.watch.wedge import FINISHED, EngineCounters, WedgeDetector, WedgeState, WedgeView

__all__ = [
    "BOOT_ID_ENV",
    "BOOT_ID_FILE",
    "EXHAUSTED_BYTES",
    "EXHAUSTED_HORIZON_S",
    "FINISHED",
    "KERNEL_PATTERN",
    "LOADING_PHASES",
    "LOG_LINES",
    "LOG_LINE_CHARS",
    "PROFILING_PHASES",
    "SLOTS",
    "SLOT_BYTES",
    "BreakerFailure",
    "BreakerVerdict",
    "CrashLoopBreaker",
    "EngineCounters",
    "FileCache",
    "FlightHeader",
    "FlightRecord",
    "FlightRecorder",
    "KernelLog",
    "PageCacheReport",
    "PostMortem",
    "ProbeResult",
    "ServerWatch",
    "Verdict",
    "WedgeDetector",
    "WedgeState",
    "WedgeView",
    "analyse",
    "check_after_reboot",
    "current_boot_id",
    "evict_file",
    "flight_dir",
    "gpu_evidence",
    "kernel_lines",
    "measurable",
    "model_files",
    "model_folder",
    "model_page_cache",
    "postmortem_from_dict",
    "probe_completion",
    "read_previous_boot_kernel_log",
    "read_ring",
    "resident_bytes",
    "saved_postmortems",
]

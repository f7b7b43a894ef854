"""What watching costs: the guard's sampling per phase, one flight record, evicting a model's page cache.

    python bench/watch_costs.py [--seconds 3] [--records 60] [--gib 1] [--dir /var/tmp] [--json]

- guard sampling per phase: a Guard (real /proc/meminfo and /proc/pressure/memory reads, the real
  decider) watches an idle `sleep` with plenty of headroom, with its phase set to each of vLLM's
  phases in turn for --seconds; the figures are samples/s, CPU µs per sample and the guard
  thread's CPU as % of one core (thread CPU time, not wall time). The tree's /proc scan (every
  0.25 s in the supervisor) is left out: it is the same in every phase.
- flight record: ServerWatch.record_once against this process and a child (MemAvailable, PSI,
  tree RSS, last log lines), each record fdatasync'd as it is at one a second; ms per record and
  % of a core at 1 Hz. The ring file's size is fixed: printed too.
- eviction: a --gib file on disk (not tmpfs: --dir) is read into the page cache, then measured
  (mmap + mincore, per file) and evicted (posix_fadvise DONTNEED); seconds per GiB for each, and
  what was left resident.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.core.guard_lines import GuardLines  # noqa: E402
from sparktui.core.units import GiB  # noqa: E402
from sparktui.runtime.guard.guard import Guard  # noqa: E402
from sparktui.runtime.host.memory import read_mem_available, read_psi_full_total  # noqa: E402
from sparktui.runtime.host.proc import spawn  # noqa: E402
from sparktui.runtime.watch import (  # noqa: E402
    FlightHeader,
    ServerWatch,
    model_page_cache,
    resident_bytes,
)

PHASES = ("starting", "loading_weights", "profiling", "kv_cache", "cuda_graphs", "prefill", "ready")


def guard_costs(seconds: float, tmp: Path) -> list[dict[str, float | str]]:
    tree = spawn(["sleep", str(int(len(PHASES) * seconds + 30))], tmp / "sleep.log")
    out: list[dict[str, float | str]] = []
    try:
        for phase in PHASES:
            calls: list[float] = []

            def read(calls: list[float] = calls) -> int:
                calls.append(time.thread_time())
                return read_mem_available()

            a0 = read_mem_available() / GiB
            lines = GuardLines(warn_below_gib=max(0.0, a0 - 6), term_below_gib=max(0.0, a0 - 8), kill_below_gib=0.0)
            guard = Guard(tree, lines, read_available=read, read_pressure=read_psi_full_total, track_interval=1e9)
            guard.set_phase(phase)
            thread = guard.start()
            time.sleep(seconds)
            guard.close()
            thread.join()
            n = len(calls)
            cpu = calls[-1] - calls[0] if n > 1 else 0.0
            wall = seconds
            out.append(
                {
                    "phase": phase,
                    "samples_per_s": round(n / wall, 1),
                    "cpu_us_per_sample": round(cpu / max(1, n - 1) * 1e6, 1),
                    "cpu_pct_of_core": round(100 * cpu / wall, 3),
                }
            )
    finally:
        tree.kill()
    return out


def read_costs() -> dict[str, float]:
    """µs per call of what one guard sample does, measured apart."""
    import timeit

    from sparktui.runtime.guard.guard import GuardDecider

    n = 20000
    decider = GuardDecider(GuardLines())
    clock = [0.0]

    def feed() -> None:
        clock[0] += 0.02
        decider.feed(clock[0], 100 * GiB, 5)

    return {
        "read_mem_available_us": round(timeit.timeit(read_mem_available, number=n) / n * 1e6, 1),
        "read_psi_us": round(timeit.timeit(read_psi_full_total, number=n) / n * 1e6, 1),
        "decider_feed_us": round(timeit.timeit(feed, number=n) / n * 1e6, 1),
    }


def record_costs(records: int, tmp: Path) -> dict[str, float]:
    settings = SimpleNamespace(
        wedge_after_s=30.0,
        probe_timeout_s=5.0,
        restart_on=[],
        max_failures=3,
        failure_window_s=600.0,
        flight_recorder=True,
        evict_page_cache=True,
    )
    watch = ServerWatch(settings, url="http://127.0.0.1:9", api_key=None, model="m", say=lambda _: None)
    for i in range(3):
        watch.on_line(
            f"(APIServer pid=1) INFO 11-30 09:00:0{i} [loggers.py:257] Engine 000: Avg prompt throughput: 0.0 tokens/s"
        )
    child = subprocess.Popen(["sleep", "60"])
    header = FlightHeader(
        port=1, profile="bench", model="m", boot_id="x", started_at=time.time(), supervisor_pid=os.getpid()
    )
    watch.start_recording(tmp, header, lambda: ("ready", "running", [os.getpid(), child.pid]))
    watch._stop.set()  # no background thread: this bench drives record_once itself
    assert watch.recorder is not None
    recorder = watch.recorder
    times, cpu = [], []
    clock = 0.0
    try:
        for _ in range(records):
            clock += 1.0
            started, cpu0 = time.perf_counter(), time.thread_time()
            # the recorder's clock a second on each time: every record is fdatasync'd, as at 1 Hz
            watch.record_once(lambda: ("ready", "running", [os.getpid(), child.pid]), now=clock)
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - cpu0)
        size = recorder.ring_path.stat().st_size
    finally:
        child.kill()
        watch.close(clean=True)
    return {
        "ms_per_record_median": round(statistics.median(times) * 1e3, 3),
        "ms_per_record_p95": round(sorted(times)[int(0.95 * (len(times) - 1))] * 1e3, 3),
        "cpu_ms_per_record_median": round(statistics.median(cpu) * 1e3, 3),
        "cpu_pct_of_core_at_1hz": round(statistics.median(cpu) * 100, 3),
        "ring_bytes": size,
    }


def eviction_costs(gib: float, folder: Path) -> dict[str, float]:
    model = Path(tempfile.mkdtemp(prefix="sparktui-evict-", dir=folder))
    path = model / "model-00001-of-00001.safetensors"
    size = int(gib * GiB)
    block = os.urandom(16 << 20)
    try:
        with open(path, "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())  # clean pages: DONTNEED drops only clean ones
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass
        size = path.stat().st_size
        started = time.perf_counter()
        before = resident_bytes(path)
        measure_s = time.perf_counter() - started
        report = model_page_cache(str(model), evict=True)
        return {
            "file_gib": round(size / GiB, 3),
            "resident_before_gib": round(before / GiB, 3),
            "measure_s_per_gib": round(measure_s / (size / GiB), 4),
            "measure_and_evict_s_per_gib": round(report.seconds / (size / GiB), 4),
            "freed_gib": round(report.freed / GiB, 3),
            "left_resident_mib": round(report.after / (1 << 20), 2),
        }
    finally:
        path.unlink(missing_ok=True)
        model.rmdir()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="seconds of guard sampling per phase")
    p.add_argument("--records", type=int, default=60, help="flight records to time")
    p.add_argument("--gib", type=float, default=1.0, help="size of the file to evict")
    p.add_argument("--dir", default="/var/tmp", help="a folder on disk (not tmpfs) for the eviction file")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reads = read_costs()
        guard = guard_costs(a.seconds, Path(tmp))
        record = record_costs(a.records, Path(tmp))
    evict = eviction_costs(a.gib, Path(a.dir))
    if a.json:
        print(json.dumps({"reads": reads, "guard": guard, "flight_record": record, "eviction": evict}, indent=1))
        return 0
    print(
        f"one guard sample's parts: MemAvailable read {reads['read_mem_available_us']} µs, PSI read "
        f"{reads['read_psi_us']} µs (at most every 50 ms), decider {reads['decider_feed_us']} µs"
    )
    print("guard sampling per phase (idle tree, plenty of headroom):")
    print(f"  {'phase':<16}{'samples/s':>10}{'µs/sample':>11}{'% of a core':>13}")
    for row in guard:
        print(
            f"  {row['phase']:<16}{row['samples_per_s']:>10}{row['cpu_us_per_sample']:>11}{row['cpu_pct_of_core']:>13}"
        )
    print(
        f"flight record: {record['ms_per_record_median']} ms median, {record['ms_per_record_p95']} ms p95 wall per record "
        f"(fdatasync included), {record['cpu_ms_per_record_median']} ms CPU: {record['cpu_pct_of_core_at_1hz']}% of a "
        f"core at 1 Hz; ring {record['ring_bytes']:,} bytes"
    )
    print(
        f"eviction of a {evict['file_gib']} GiB file ({evict['resident_before_gib']} GiB resident): measure "
        f"{evict['measure_s_per_gib']} s/GiB, measure+evict+re-measure {evict['measure_and_evict_s_per_gib']} s/GiB, "
        f"freed {evict['freed_gib']} GiB, {evict['left_resident_mib']} MiB left resident"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

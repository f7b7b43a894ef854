"""How many vLLM log lines per second sparktui's tail + parser sustain, and with how much memory.

    python3 bench/log_ingest.py [--lines 1000000] [--keep 5000]

Builds a big log from the real fixture logs (tests/fixtures/vllm-logs and vllm-cpu, every
line as captured: colours, prefixes, tracebacks, progress bars), repeated to --lines, then:
  1. parser only: LogSummary.feed over the lines already in memory;
  2. tail + parser: LogTail.poll() reading the file in batches, every line fed to a LogSummary;
  3. live: a separate writer process appends the log while tail + parser follow it;
  4. the peak Python heap of (2) under tracemalloc, and the peak RSS of a process doing only (2).
Goal: ≥ 100k lines/s for tail + parser with memory that does not grow with the log.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparktui.core.vllm_log import LogSummary  # noqa: E402
from sparktui.runtime.server.logtail import LogTail  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"

WRITER = r"""
import sys
path, src, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
with open(path, "ab") as out:
    for _ in range(times):
        out.write(data)
        out.flush()
"""


def peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: that one keeps the forking parent's peak across exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fixture_lines() -> list[bytes]:
    lines: list[bytes] = []
    for folder in ("vllm-logs", "vllm-cpu"):
        for path in sorted((FIXTURES / folder).glob("*.log")):
            data = path.read_bytes()
            if not data.endswith(b"\n"):
                data += b"\n"
            # split on "\n" only: progress bars keep their carriage returns inside a line
            lines.extend(line + b"\n" for line in data.split(b"\n")[:-1])
    return lines


def build_log(path: Path, n_lines: int) -> tuple[int, int]:
    base = fixture_lines()
    block = b"".join(base)
    repeats, extra = divmod(n_lines, len(base))
    with open(path, "wb") as fh:
        for _ in range(repeats):
            fh.write(block)
        fh.write(b"".join(base[:extra]))
    return len(base), path.stat().st_size


class Clock:
    """Wall time and this process's CPU time (the machine may be shared: CPU time is what we cost)."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def rate(n: int, clock: Clock) -> str:
    return f"{n / clock.cpu:>10,.0f} lines/s of CPU, {n / clock.wall:>10,.0f} lines/s wall"


def parse_only(path: Path) -> tuple[int, Clock]:
    lines = path.read_bytes().decode("utf-8", "replace").split("\n")[:-1]
    summary = LogSummary()
    with Clock() as clock:
        for line in lines:
            summary.feed(line)
    return len(lines), clock


def tail_and_parse(path: Path, keep: int) -> tuple[int, Clock, LogSummary]:
    summary = LogSummary()
    with Clock() as clock, LogTail(path, keep=keep) as tail:
        n = 0
        while batch := tail.poll():
            for line in batch:
                summary.feed(line)
            n += len(batch)
        for line in tail.flush():
            summary.feed(line)
            n += 1
    return n, clock, summary


def live(path: Path, src: Path, times: int, keep: int) -> tuple[int, Clock]:
    """A separate process appends `src` `times` times while we follow the file."""
    summary = LogSummary()
    tail = LogTail(path, keep=keep)
    stop = threading.Event()
    with Clock() as clock:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(src), str(times)])
        threading.Thread(target=lambda: (writer.wait(), stop.set()), daemon=True).start()
        n = 0
        for batch in tail.follow(interval_s=0.01, stop=stop):
            for line in batch:
                summary.feed(line)
            n += len(batch)
    tail.close()
    return n, clock


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines in the generated log")
    parser.add_argument("--keep", type=int, default=5000, help="LogTail ring buffer size")
    parser.add_argument("--rss-of-tail", metavar="LOG", help=argparse.SUPPRESS)  # child mode: print peak RSS
    args = parser.parse_args()
    if args.rss_of_tail:
        tail_and_parse(Path(args.rss_of_tail), args.keep)
        print(peak_rss_mib())
        return 0

    with tempfile.TemporaryDirectory(prefix="sparktui-bench-") as tmp:
        big = Path(tmp) / "big.log"
        distinct, size = build_log(big, args.lines)
        print(f"log: {args.lines:,} lines ({distinct:,} distinct fixture lines repeated), {size / 2**20:.1f} MiB")

        n, clock = parse_only(big)
        print(f"parser only:        {rate(n, clock)}  ({n:,} lines)")

        n, clock, summary = tail_and_parse(big, args.keep)
        print(f"tail + parser:      {rate(n, clock)}  ({n:,} lines, {size / 2**20 / clock.wall:.0f} MiB/s wall)")
        print(f"  events counted: warnings={summary.warnings:,} errors={summary.errors:,} ready={summary.ready}")

        block = Path(tmp) / "block.log"
        block.write_bytes(b"".join(fixture_lines()))
        times = max(1, args.lines // len(fixture_lines()))
        n, clock = live(Path(tmp) / "live.log", block, times, args.keep)
        print(f"live (writer proc): {rate(n, clock)}  ({n:,} lines; wall includes the writer)")

        tracemalloc.start()
        tail_and_parse(big, args.keep)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        small_n = max(10_000, args.lines // 10)
        small = Path(tmp) / "small.log"
        build_log(small, small_n)
        tracemalloc.start()
        tail_and_parse(small, args.keep)
        _, small_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"peak Python heap during tail + parser: {peak / 2**20:.1f} MiB for {args.lines:,} lines, "
            f"{small_peak / 2**20:.1f} MiB for {small_n:,} lines (keep={args.keep})"
        )
        for path, n in ((big, args.lines), (small, small_n)):
            child = subprocess.run(
                [sys.executable, __file__, "--rss-of-tail", str(path), "--keep", str(args.keep)],
                capture_output=True,
                text=True,
                check=True,
            )
            print(f"peak RSS of a process that only tails + parses {n:,} lines: {float(child.stdout):.0f} MiB")
        print(f"cpu: {os.cpu_count()} logical, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

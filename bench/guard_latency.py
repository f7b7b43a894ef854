"""How much later than ideal does the guard stop a fast memory hog, and what does it cost idle?

    python bench/guard_latency.py [--runs 10] [--rate 3072] [--procs 2] [--depth 1.5] [--idle 20] [--json]

Each run is a pair:
- ideal: a hog (tests/support/procs/hog.py, touching memory at --rate MiB/s over --procs processes)
  runs in its own process group; this bench samples MemAvailable at ~1 kHz and SIGKILLs the group
  the instant it sees the kill line (start - --depth GiB) crossed. Crossing -> tree gone is the
  kernel's teardown: the limit.
- guard: the same hog under `sparktui guard --kill-below LINE -- hog ...`; the same ~1 kHz
  sampler only watches. Crossing -> tree gone, minus the paired ideal, is the guard's delay.
"Gone" is when every hog process has exited (pidfds readable). A guard that kills on a
predicted crossing before the sampler sees the line counts as 0 ms from crossing.

--kernel stop|warn|off: the guard's kernel tripwire (default stop, as users get it); with
--kernel-compare each run is done with the tripwire off and on, interleaved, and both delays and
both idle costs are printed side by side (the tripwire is a thread blocked on the kernel log: it
should change neither).

--control pairs two ideal runs instead: the spread of the paired difference with no guard at
all, i.e. how much of the guard's figure is the machine's teardown noise.

Then the idle cost: `sparktui guard -- sleep` with default lines, the guard's CPU time over
--idle seconds as % of one core. Memory stays within depth + 1.5 GiB of what is available. Each
hog also gets the free pages parked on the per-CPU lists at its start (per_cpu_free): MemAvailable
leaves them out and the hog takes them first, so without them a run after a teardown could end
0.3-0.7 GiB short of the line.
Goals (issue 3): p95 delay over ideal <= 50 ms; idle CPU <= 0.5% of a core.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.runtime.host.memory import read_mem_available, read_memory  # noqa: E402
from sparktui.runtime.host.proc import read_stat, scan_processes, spawn  # noqa: E402

GiB = 1024**3
HOG = REPO / "tests" / "support" / "procs" / "hog.py"
TICKS = os.sysconf("SC_CLK_TCK")


def wait_started(log: Path, procs: int, timeout=15.0) -> None:
    end = time.monotonic() + timeout
    while not log.exists() or log.read_text().count("started") < procs:
        if time.monotonic() > end:
            raise RuntimeError(f"hog did not start (log {log})")
        time.sleep(0.005)


def group_pids(pgid: int) -> list[int]:
    return [p.pid for p in scan_processes() if p.pgrp == pgid and not p.dead]


def _gone(pid: int) -> bool:
    info = read_stat(pid)
    return info is None or info.dead


PAGE = os.sysconf("SC_PAGE_SIZE")
RSS_EVERY_S = 0.02


def resident(pids: list[int]) -> int:
    """Bytes the hog processes hold (their RSS), 0 for the ones gone."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def hog_child(parent: int) -> int:
    """The guard's child that runs the hog. Not simply its first child: `sparktui guard` also
    starts its reaper (runtime/server/reaper.py) as a child, and watching that one's process group
    timed the reaper's exit, not the hog tree's."""
    for p in scan_processes():
        if p.ppid != parent:
            continue
        try:
            argv = Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(HOG).encode() in argv:
            return p.pid
    raise RuntimeError(f"no child of the guard (pid {parent}) runs {HOG}")


def watch(pids: list[int], kill_line: int, on_cross=None, timeout=60.0) -> dict:
    """Sample MemAvailable at ~1 kHz until every pid has exited (pidfds; /proc polling without).
    Also the hog's own RSS every RSS_EVERY_S: how fast it really touched memory, whatever other
    programs on the machine did to MemAvailable meanwhile."""
    fds, polled = {}, set()
    poller = select.poll()
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except (OSError, AttributeError):  # no pidfd (old kernel, gVisor): poll /proc instead
            polled.add(pid)
            continue
        fds[fd] = pid
        poller.register(fd, select.POLLIN)
    t_cross = t_cross_wall = t_gone = None
    low = None
    samples = []
    rss: list[tuple[float, int]] = []
    next_rss = 0.0
    end = time.monotonic() + timeout
    while (fds or polled) and time.monotonic() < end:
        a = read_mem_available()
        now = time.monotonic()
        samples.append((now, a))
        if now >= next_rss and t_cross is None:
            rss.append((now, resident(pids)))
            next_rss = now + RSS_EVERY_S
        low = a if low is None else min(low, a)
        if t_cross is None and a < kill_line:
            t_cross, t_cross_wall = now, time.time()
            if on_cross is not None:
                on_cross()
        if fds:
            for fd, _ in poller.poll(1):
                poller.unregister(fd)
                os.close(fd)
                del fds[fd]
        else:
            time.sleep(0.001)
        polled = {p for p in polled if not _gone(p)}
        if not fds and not polled:
            t_gone = time.monotonic()
    for fd in fds:
        os.close(fd)
    # The hog's rate: from a third of the way down to the line until the crossing.
    rate = None
    if t_cross is not None:
        before = [s for s in samples if s[0] <= t_cross]
    else:  # never crossed (killed on a prediction): up to the lowest point
        before = samples[: min(range(len(samples)), key=lambda i: samples[i][1]) + 1] if samples else []
    if before:
        third = before[0][1] - (before[0][1] - kill_line) / 3
        mid = next((s for s in before if s[1] < third), None)
        if mid is not None and before[-1][0] > mid[0]:
            rate = (mid[1] - before[-1][1]) / (before[-1][0] - mid[0]) / GiB
    touched = max((b for _, b in rss), default=0)
    touch_rate = None
    if len(rss) > 1:
        t_max = next(t for t, b in rss if b == touched)
        first = next(((t, b) for t, b in rss if b > 0), rss[0])
        if t_max > first[0]:
            touch_rate = (touched - first[1]) / (t_max - first[0]) / GiB
    return {
        "t_cross": t_cross,
        "t_cross_wall": t_cross_wall,
        "t_gone": t_gone,
        "low": low,
        "rate_gib_s": rate,
        "touched_gib": touched / GiB,
        "touch_rate_gib_s": touch_rate,
        "timed_out": bool(fds or polled),
        "sample_hz": round(len(samples) / (samples[-1][0] - samples[0][0]), 0) if len(samples) > 1 else None,
    }


def settle(level: int, timeout=5.0) -> None:
    """Wait for the last hog's memory to come back, counting what sits on the per-CPU lists: those
    pages reach MemAvailable only gradually, and each run's hog is sized for them anyway."""
    end = time.monotonic() + timeout
    while read_mem_available() + per_cpu_free() < level and time.monotonic() < end:
        time.sleep(0.05)


def per_cpu_free() -> int:
    """Bytes of free pages parked on the per-CPU free lists (/proc/zoneinfo's pageset counts).
    The kernel counts them in neither MemFree nor MemAvailable. Since Linux 6.7 a CPU that frees a
    lot (a killed hog's teardown) grows its list (all CPUs together: up to 1/8 of the zone, 2.3 GiB
    on the 2-CPU, 24 GB box) and drains it only gradually: the next hog's first GiBs come from there
    and MemAvailable does not move."""
    try:
        text = Path("/proc/zoneinfo").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines() if line.strip().startswith("count:")) * PAGE


def hog_args(a, hidden: int = 0) -> list[str]:
    # 1.5 GiB past the line, held 60 s: the hog crosses even when other programs free some memory
    # meanwhile, and is still there when a slow machine gets it across; plus the free pages that
    # MemAvailable does not show (per_cpu_free), which the hog takes first without moving it
    cap_mib = int((a.depth + 1.5) * 1024 + hidden / 2**20)
    return [sys.executable, str(HOG), str(a.rate), str(cap_mib), "--procs", str(a.procs), "--hold", "60"]


def ideal_run(a, tmp: Path) -> dict:
    hidden, a0 = per_cpu_free(), read_mem_available()
    line = a0 - int(a.depth * GiB)
    log = tmp / "ideal.log"
    log.unlink(missing_ok=True)
    tree = spawn(hog_args(a, hidden), log, pdeathsig=True)
    wait_started(log, a.procs)
    pids = group_pids(tree.pgid)
    r = watch(pids, line, on_cross=lambda: os.killpg(tree.pgid, signal.SIGKILL))
    tree.popen.wait()
    r["line"] = line
    r["start"] = a0
    r["hidden"] = hidden
    settle(a0 - int(0.2 * GiB))
    return r


def guard_run(a, tmp: Path, kernel: str = "stop") -> dict:
    hidden, a0 = per_cpu_free(), read_mem_available()
    line = a0 - int(a.depth * GiB)
    log = tmp / "guard.log"
    log.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "sparktui",
        "guard",
        "--json",
        "--kernel",
        kernel,
        "--warn-below",
        "off",
        "--term-below",
        "off",
        "--kill-below",
        f"{line / GiB:.4f}",
        "--log",
        str(log),
        "--",
        *hog_args(a, hidden),
    ]
    g = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_started(log, a.procs)
    root = hog_child(g.pid)
    r = watch(group_pids(root), line)
    if r["timed_out"]:  # never tripped: the guard stops its tree on SIGTERM, as a person's Ctrl-C
        g.send_signal(signal.SIGTERM)
    err = g.communicate(timeout=30)[1]
    r["exit"] = g.returncode
    r["line"] = line
    r["start"] = a0
    r["hidden"] = hidden
    try:
        r["report"] = json.loads(err.strip().splitlines()[-1])
    except (ValueError, IndexError):
        r["report"] = {"stderr": err[-500:]}
    settle(a0 - int(0.2 * GiB))
    return r


def idle_cpu(seconds: float, kernel: str = "stop") -> dict:
    g = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "guard", "--kernel", kernel, "--", "sleep", str(seconds + 10)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)  # past the interpreter's start-up

    def cpu() -> float:
        with open(f"/proc/{g.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime

    c0, t0 = cpu(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu(), time.monotonic()
    g.send_signal(signal.SIGTERM)
    g.wait(timeout=30)
    return {
        "seconds": round(t1 - t0, 1),
        "cpu_s": round(c1 - c0, 3),
        "pct_of_core": round(100 * (c1 - c0) / (t1 - t0), 3),
    }


def read_costs() -> dict:
    import psutil

    out = {}
    for name, fn in (
        ("read_mem_available", read_mem_available),
        ("read_memory", read_memory),
        ("psutil.virtual_memory", psutil.virtual_memory),
    ):
        n = 3000
        out[name + "_us"] = round(min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6, 1)
    return out


def pct(values, q):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def measure_pairs(a, tmp: Path, *, echo: bool = True) -> dict:
    """--runs pairs (ideal, guard), or (ideal, ideal) with --control; the per-pair figures and
    the delay summary: {"pairs", "delay_ms", "detect_ms", ...}."""
    summary: dict = {}
    pairs = []
    for i in range(a.runs):
        ideal = ideal_run(a, tmp)
        if a.control:  # ideal vs ideal: how much the paired difference varies with no guard at all
            guard = dict(ideal_run(a, tmp), exit=97, report={"reason": "control"})
        else:
            guard = guard_run(a, tmp, getattr(a, "kernel", "stop"))
        ideal_ms = (
            None if ideal["t_gone"] is None or ideal["t_cross"] is None else (ideal["t_gone"] - ideal["t_cross"]) * 1e3
        )
        void = (
            guard["exit"] != 97 or ideal["t_cross"] is None
        )  # the hog never reached the line: other programs freed memory meanwhile
        predicted_early = guard["t_cross"] is None and not void
        if void or guard["t_gone"] is None:
            guard_ms = None
        elif predicted_early:
            guard_ms = None  # killed on a predicted crossing before the sampler saw the line
        else:
            guard_ms = (guard["t_gone"] - guard["t_cross"]) * 1e3
        pair = {
            "ideal_ms": None if ideal_ms is None else round(ideal_ms, 1),
            "guard_ms": None if guard_ms is None else round(guard_ms, 1),
            # Never later than ideal when the guard stopped the hog before the line was crossed: 0.
            "delay_ms": 0.0
            if predicted_early and ideal_ms is not None
            else None
            if None in (ideal_ms, guard_ms)
            else round(guard_ms - ideal_ms, 1),
            "void": void,
            "rate_gib_s": round(guard["rate_gib_s"] or 0, 2),
            # the hog's own RSS: what it touched and how fast, whatever MemAvailable said
            "hog_touched_gib": round(guard["touched_gib"], 2),
            "hog_touch_rate_gib_s": None if guard["touch_rate_gib_s"] is None else round(guard["touch_rate_gib_s"], 2),
            "mem_available_fell_gib": round((guard["start"] - guard["low"]) / GiB, 2),
            # free pages on the per-CPU lists at the guard run's start, which MemAvailable leaves out
            "hidden_free_gib": round(guard["hidden"] / GiB, 2),
            "ideal_below_line_gib": round((ideal["line"] - ideal["low"]) / GiB, 3),
            "guard_below_line_gib": round((guard["line"] - guard["low"]) / GiB, 3),
            "guard_low_gib": round(guard["low"] / GiB, 2),
            "guard_exit": guard["exit"],
            "guard_reason": guard["report"].get("reason"),
            "detect_ms": None
            if guard["t_cross_wall"] is None or "tripped_at" not in guard["report"]
            else round((guard["report"]["tripped_at"] - guard["t_cross_wall"]) * 1e3, 1),
            "sampler_hz": guard["sample_hz"],
            "guard_gone_after_ms": None
            if guard["report"].get("gone_after_s") is None
            else round(guard["report"]["gone_after_s"] * 1e3, 1),
        }
        pairs.append(pair)
        if echo:
            print(
                f"run {i + 1:2d}: ideal {pair['ideal_ms']} ms, guard {pair['guard_ms']} ms, delay {pair['delay_ms']} ms, "
                f"detect {pair['detect_ms']} ms, hog {pair['rate_gib_s']} GiB/s, past the line: ideal {pair['ideal_below_line_gib']} GiB / guard "
                f"{pair['guard_below_line_gib']} GiB ({pair['guard_reason']}, exit {pair['guard_exit']}); "
                f"hog touched {pair['hog_touched_gib']} GiB at {pair['hog_touch_rate_gib_s']} GiB/s, "
                f"MemAvailable fell {pair['mem_available_fell_gib']} GiB ({pair['hidden_free_gib']} GiB free on per-CPU lists at start)",
                flush=True,
            )
    delays = [p["delay_ms"] for p in pairs if p["delay_ms"] is not None]
    summary["delay_ms"] = {
        "p50": round(pct(delays, 0.5), 1) if delays else None,
        "p95": round(pct(delays, 0.95), 1) if delays else None,
        "max": max(delays) if delays else None,
        "n": len(delays),
    }
    detects = [p["detect_ms"] for p in pairs if p["detect_ms"] is not None]
    summary["detect_ms"] = {
        "p50": round(pct(detects, 0.5), 1) if detects else None,
        "p95": round(pct(detects, 0.95), 1) if detects else None,
        "n": len(detects),
        "predicted_before_crossing": sum(1 for p in pairs if p["guard_reason"] == "predicted"),
    }
    summary["ideal_ms_p50"] = round(
        statistics.median([p["ideal_ms"] for p in pairs if p["ideal_ms"] is not None] or [0]), 1
    )
    summary["hog_rate_gib_s_median"] = round(
        statistics.median([p["rate_gib_s"] for p in pairs if not p["void"]] or [0]), 2
    )
    summary["lowest_mem_available_gib"] = min(p["guard_low_gib"] for p in pairs)
    summary["max_past_line_gib"] = {
        "ideal": max(p["ideal_below_line_gib"] for p in pairs),
        "guard": max(p["guard_below_line_gib"] for p in pairs),
    }
    summary["pairs"] = pairs
    return summary


def kernel_compare(a, tmp: Path, result: dict) -> int:
    """Each run once with the kernel tripwire off and once on, interleaved; then the idle cost of
    each: the delays and idle costs side by side."""
    import copy

    runs, pairs = a.runs, {"off": [], "stop": []}
    for i in range(runs):
        for mode in pairs:
            one = copy.copy(a)
            one.runs, one.kernel = 1, mode
            pair = measure_pairs(one, tmp, echo=False)["pairs"][0]
            pairs[mode].append(pair)
            if not a.json:
                print(
                    f"run {i + 1:2d} kernel {mode:4}: delay {pair['delay_ms']} ms ({pair['guard_reason']})", flush=True
                )
    side = {}
    for mode, got in pairs.items():
        delays = [p["delay_ms"] for p in got if p["delay_ms"] is not None]
        side[mode] = {
            "delay_ms": {
                "p50": round(pct(delays, 0.5), 1) if delays else None,
                "p95": round(pct(delays, 0.95), 1) if delays else None,
                "max": max(delays) if delays else None,
                "n": len(delays),
            },
            "idle": idle_cpu(a.idle, mode),
            "pairs": got,
        }
    result["kernel_compare"] = side
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    for mode, r in side.items():
        d = r["delay_ms"]
        print(
            f"kernel tripwire {mode:4}: delay over ideal p50 {d['p50']} ms, p95 {d['p95']} ms, max {d['max']} ms "
            f"(n={d['n']}); idle guard CPU {r['idle']['pct_of_core']}% of a core over {r['idle']['seconds']} s"
        )
    print(f"load avg before {result['load_before']}, after {result['load_after']}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rate", type=float, default=3072, help="hog MiB/s asked (what it reaches is printed)")
    ap.add_argument("--procs", type=int, default=2, help="hog processes sharing the rate")
    ap.add_argument("--depth", type=float, default=1.5, help="kill line, GiB below MemAvailable at each run's start")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds to measure the idle guard's CPU")
    ap.add_argument(
        "--control",
        action="store_true",
        help="pair two ideal runs instead (the noise floor of the paired difference on this machine)",
    )
    ap.add_argument("--kernel", choices=("stop", "warn", "off"), default="stop", help="the guard's kernel tripwire")
    ap.add_argument(
        "--kernel-compare", action="store_true", help="each run with the kernel tripwire off and on, side by side"
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"sparktui-bench-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    result: dict = {
        "cpus": os.cpu_count(),
        "mem_total_gib": round(read_memory().mem_total / GiB, 1),
        "load_before": [round(x, 2) for x in load_before],
        "args": vars(a),
        "read_costs": read_costs(),
    }
    if a.kernel_compare:
        return kernel_compare(a, tmp, result)
    result.update(measure_pairs(a, tmp, echo=not a.json))
    result["idle"] = idle_cpu(a.idle, a.kernel)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        d = result["delay_ms"]
        print(
            f"\nguard delay over ideal: p50 {d['p50']} ms, p95 {d['p95']} ms, max {d['max']} ms (n={d['n']}); "
            f"ideal teardown p50 {result['ideal_ms_p50']} ms"
        )
        dd = result["detect_ms"]
        print(
            f"guard trip after the sampler saw the crossing (wall clock): p50 {dd['p50']} ms, p95 {dd['p95']} ms "
            f"(n={dd['n']}; {dd['predicted_before_crossing']} tripped on a predicted crossing)"
        )
        print(
            f"hog rate (median) {result['hog_rate_gib_s_median']} GiB/s; lowest MemAvailable {result['lowest_mem_available_gib']} GiB; "
            f"most past the kill line: ideal {result['max_past_line_gib']['ideal']} GiB, guard {result['max_past_line_gib']['guard']} GiB"
        )
        print(f"idle guard CPU: {result['idle']['pct_of_core']}% of a core over {result['idle']['seconds']} s")
        print(f"read costs: {result['read_costs']}")
        print(
            f"machine: {result['cpus']} CPUs, {result['mem_total_gib']} GiB; load avg before {result['load_before']}, after {result['load_after']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

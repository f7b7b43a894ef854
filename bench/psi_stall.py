"""How soon does the guard hear of a real memory stall from its 5 s rest, and from which pressure file?

    python bench/psi_stall.py [--trials 3] [--limit-mib 64] [--file-mib 96] [--watch 6] [--json]

A stall that is safe on a shared box: a process in its own cgroup (the scope `proc.spawn` makes for a
tree, the one a supervisor guards; its memory limited to --limit-mib, v2's memory.max or, on a hybrid
mount, a v1 memory cgroup) reads a --file-mib file on disk over and over: each page it reads must
first be reclaimed from its own cgroup (a memory stall), and the pages just dropped are read back.
The rest of the box is untouched (it never holds more than the limit).

Per trial, armed before the stall starts and timed from its first allocation (the hog's own stamp):
- the guard's trigger (guard.PRESSURE_TRIGGER, "some 150 ms in 1 s") on /proc/pressure/memory, the
  file the guard arms today, and the same trigger on the tree's cgroup memory.pressure;
- the "some" and "full" share of the stall's first --watch seconds in each file (from their totals);
- a real Guard on the tree, phase "ready", resting 5 s (the trigger armed; the headroom rule's worst
  fall set to 1 GiB/s here so this 24 GB box allows the 5 s rest a Spark has far from its lines):
  how often the trigger woke it, and whether and when it tripped on the PSI-full line (default 30%);
  then the same guard without the trigger (the 1 s timer).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.core.units import GiB  # noqa: E402
from sparktui.runtime.guard import guard as guard_mod  # noqa: E402
from sparktui.runtime.host import proc  # noqa: E402
from sparktui.runtime.host.memory import PSI_MEMORY, open_pressure_trigger, parse_psi_totals  # noqa: E402

# Reads a file larger than its cgroup's memory limit over and over: every read charges a page the
# cgroup has no room for, so the kernel reclaims inside the cgroup first (a memory stall), and the
# pages it just dropped are read back from disk (refaults). No anonymous memory beyond the interpreter.
HOG = """
import os, sys, time
go, path, until = sys.argv[1], sys.argv[2], float(sys.argv[3])
while not os.path.exists(go):
    time.sleep(0.005)
print("go", time.monotonic(), flush=True)
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
while time.monotonic() < until:
    for off in range(0, size, 1 << 20):
        os.pread(fd, 1 << 20, off)
print("done", time.monotonic(), flush=True)
"""
V1_MEMORY = Path("/sys/fs/cgroup/memory")


def totals(path: str) -> tuple[int, int]:
    some, full = parse_psi_totals(Path(path).read_bytes())
    return some or 0, full or 0


def first_fire(trigger, until: float, out: dict, key: str) -> None:
    poller = select.poll()
    poller.register(trigger.fileno(), select.POLLPRI)
    while time.monotonic() < until:
        for _, ev in poller.poll(50):
            if ev & select.POLLPRI:
                out.setdefault(key, []).append(time.monotonic())
            if ev & (select.POLLERR | select.POLLNVAL):
                return


def trial(a, tmp: Path, mode: str) -> dict:
    go = tmp / f"go-{mode}-{time.monotonic_ns()}"
    log = tmp / f"hog-{mode}-{time.monotonic_ns()}.log"
    fd = os.open(a.file, os.O_RDONLY)  # its pages out of the cache: the hog reads them from disk
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    tree = proc.spawn([sys.executable, "-c", HOG, str(go), str(a.file), str(time.monotonic() + a.watch + 30)], log)
    result: dict = {"mode": mode}
    v1: Path | None = None
    try:
        scope = tree.scope
        if scope is None:
            raise SystemExit("no cgroup scope for the tree here (containment off): nothing to stall in")
        limit = a.limit_mib << 20
        end = time.monotonic() + 5
        while not scope.procs() and time.monotonic() < end:  # the child joins its scope as it starts
            time.sleep(0.005)
        if (scope.path / "memory.max").exists():  # the memory controller on cgroup v2
            (scope.path / "memory.max").write_text(f"{limit}\n")
        elif V1_MEMORY.is_dir():  # a hybrid mount (this box): the memory controller is v1's
            v1 = V1_MEMORY / f"sparktui-psi-bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
            v1.mkdir()
            (v1 / "memory.limit_in_bytes").write_text(f"{limit}\n")
            for pid in scope.procs():
                (v1 / "cgroup.procs").write_text(f"{pid}\n")
        else:
            raise SystemExit("no memory controller to limit the tree with")
        result["cgroup"] = "v1 " + str(v1) if v1 else "v2"
        cg_pressure = str(scope.path / "memory.pressure")
        fired: dict[str, list[float]] = {}
        until = time.monotonic() + a.watch + 2
        triggers = {
            "system": open_pressure_trigger(guard_mod.PRESSURE_TRIGGER, PSI_MEMORY),
            "cgroup": open_pressure_trigger(guard_mod.PRESSURE_TRIGGER, cg_pressure),
        }
        threads = [
            threading.Thread(target=first_fire, args=(t, until, fired, k), daemon=True) for k, t in triggers.items()
        ]
        for t in threads:
            t.start()
        trips: list = []
        psi_seen: list = []
        read_full = guard_mod._read_psi_full

        def recording_psi() -> int | None:
            v = read_full()
            psi_seen.append((time.monotonic(), v))
            return v

        g = guard_mod.Guard(
            tree,
            armed=True,
            read_pressure=recording_psi,
            pressure=guard_mod.PRESSURE_TRIGGER if mode == "rest5" else None,
            on_trip=lambda d: trips.append((time.monotonic(), d.reason, d.psi_full_pct)),
            track_interval=None,
            worst_rate=1 * GiB,
        )
        g.decider.set_phase("ready")
        g.start()
        time.sleep(1.5)  # the guard is at rest: its first samples taken, the long sleep begun
        before = {"system": totals(PSI_MEMORY), "cgroup": totals(cg_pressure)}
        wakes0 = g.pressure_wakes
        go.write_text("go\n")
        t_go = None
        end = time.monotonic() + 5
        while t_go is None and time.monotonic() < end:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("go "):
                    t_go = float(line.split()[1])
            time.sleep(0.01)
        assert t_go is not None, "the hog never started"
        while time.monotonic() < t_go + a.watch and not trips:
            time.sleep(0.05)
        after = {"system": totals(PSI_MEMORY), "cgroup": totals(cg_pressure)}
        span = time.monotonic() - t_go
        g.close()
        g.join(a.watch + 10)
        for t in threads:
            t.join()
        for trig in triggers.values():
            trig.close()
        # the first firing in the stall (the system-wide one also fires on other programs' stalls)
        result["fired_ms"] = {
            k: next((round(1000 * (t - t_go), 1) for t in fired.get(k, []) if t >= t_go), None) for k in triggers
        }
        result["fired_before_stall"] = {k: sum(1 for t in fired.get(k, []) if t < t_go) for k in triggers}
        result["share_pct"] = {
            k: {
                "some": round(100 * (after[k][0] - before[k][0]) / 1e6 / span, 1),
                "full": round(100 * (after[k][1] - before[k][1]) / 1e6 / span, 1),
            }
            for k in after
        }
        result["trigger_armed"] = {k: t.trigger.spec()[:-1].decode() for k, t in triggers.items()}
        result["guard_pressure_wakes"] = g.pressure_wakes - wakes0
        result["guard_samples"] = g.samples_taken
        result["guard_trip"] = (
            {"after_ms": round(1000 * (trips[0][0] - t_go), 1), "reason": trips[0][1], "psi_full_pct": trips[0][2]}
            if trips
            else None
        )
        result["guard_psi_samples_in_stall"] = sum(1 for t, _ in psi_seen if t >= t_go)
        result["watched_s"] = round(span, 2)
        result["hog_log"] = log.read_text(errors="replace").strip().splitlines()[-2:]
    finally:
        tree.kill()
        if v1 is not None:
            for _ in range(100):
                try:
                    v1.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--limit-mib", type=int, default=64, help="the tree's cgroup memory limit")
    ap.add_argument("--file-mib", type=int, default=96, help="the file it reads over and over (on disk)")
    ap.add_argument("--watch", type=float, default=6.0, help="seconds of stall watched per trial")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0 and not os.access("/sys/fs/cgroup", os.W_OK):
        print("needs a writable cgroup2 (root, or a delegated one)", file=sys.stderr)
    out: dict = {"load_before": [round(x, 2) for x in os.getloadavg()], "trials": []}
    with tempfile.TemporaryDirectory(prefix="sparktui-psi-", dir=str(REPO / "bench")) as name:
        a.file = Path(name) / "big.bin"
        with open(a.file, "wb") as f:
            for _ in range(a.file_mib):
                f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        for i in range(a.trials):
            for mode in ("rest5", "timer1"):
                r = trial(a, Path(name), mode)
                out["trials"].append(r)
                if not a.json:
                    trip = r["guard_trip"]
                    print(
                        f"trial {i} {mode}: trigger ({r['trigger_armed']['system']}) fired after {r['fired_ms']['system']} ms on /proc/pressure/memory, "
                        f"{r['fired_ms']['cgroup']} ms on the tree's memory.pressure (system-wide also "
                        f"{r['fired_before_stall']['system']}x in the 1.5 s before); over {r['watched_s']} s of stall "
                        f"some/full {r['share_pct']['system']['some']}/{r['share_pct']['system']['full']}% system, "
                        f"{r['share_pct']['cgroup']['some']}/{r['share_pct']['cgroup']['full']}% cgroup; guard woken by "
                        f"PSI {r['guard_pressure_wakes']}x, "
                        + (f"tripped after {trip['after_ms']} ms ({trip['reason']})" if trip else "did not trip"),
                        flush=True,
                    )
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"load avg before {out['load_before']}, after {out['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

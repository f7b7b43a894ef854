"""Where a resting supervisor's CPU goes, thread by thread (and its reaper's), optionally beside another
checkout's over the same seconds.

    python bench/rest_threads.py [--rest 60] [--baseline DIR ...]

Starts `sparktui serve PROFILE --detach` against the stub vLLM (as bench/supervisor_rest.py does) from
this checkout and, with --baseline, from DIR (another checkout: `git archive REV | tar -x -C DIR`;
give it more than once for several) at the same time; once both are running and quiet, reads every thread's CPU time and run count
(/proc/PID/task/TID/schedstat) over --rest seconds. Each thread is named by what it sleeps in
(/proc/PID/task/TID/syscall): the guard and the loop in poll, the flight recorder on a futex
(Event.wait), the socket in accept. "runs" counts time slices, so on a loaded box a wake can count
more than once: compare the two checkouts, measured together, rather than with another run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import supervisor_rest as sr  # noqa: E402

SLEEPS_IN = {"7": "poll", "202": "futex", "288": "accept4", "0": "read", "61": "wait4", "271": "ppoll"}


def threads(pid: int) -> dict[int, tuple[float, int, str, int]]:
    """{tid: (CPU seconds, time slices, what it sleeps in, times it went to sleep)}. The last is the
    thread's voluntary context switches: its wakes (a blocking write or sync counts too), where
    time slices also count the times a busy box took the CPU away."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns, _, runs = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            call = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()[0]
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            sleeps = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (int(ns) / 1e9, int(runs), SLEEPS_IN.get(call, f"syscall {call}"), sleeps)
    return out


def measure(repo: Path, rest: float, started: threading.Barrier, out: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="sparktui-threads-") as name:
        tmp = Path(name)
        port = sr.free_port()
        state_dir = tmp / "state"
        env = {**os.environ, "SPARKTUI_STATE_DIR": str(state_dir), "SPARKTUI_CONFIG_DIR": str(tmp / "config")}
        profile = sr.write_profile(tmp, port, rest + 300)
        # this checkout's stub, the other checkout's sparktui (python -m sparktui from its folder)
        done = subprocess.run(
            [sys.executable, "-m", "sparktui", "serve", str(profile), "--detach", "--force"],
            env=env, cwd=repo, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            out["error"] = done.stderr.strip()
            started.abort()
            return
        try:
            state = sr.wait_running(state_dir, port)
            time.sleep(3.0)  # past the first scrapes
            pids = {"supervisor": state["supervisor"]["pid"], "reaper": state["reaper"]["pid"]}
            started.wait()
            before = {who: threads(pid) for who, pid in pids.items()}
            t0 = time.monotonic()
            time.sleep(rest)
            after = {who: threads(pid) for who, pid in pids.items()}
            seconds = time.monotonic() - t0
            rows = []
            for who in pids:
                for tid, (cpu, runs, call, sleeps) in sorted(after[who].items()):
                    cpu0, runs0, _, sleeps0 = before[who].get(tid, (0.0, 0, call, 0))
                    rows.append((who, tid, call, cpu - cpu0, runs - runs0, sleeps - sleeps0))
            out.update(seconds=seconds, rows=rows)
        finally:
            subprocess.run(
                [sys.executable, "-m", "sparktui", "stop", "--port", str(port)],
                env=env, cwd=repo, capture_output=True, text=True, timeout=120,
            )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rest", type=float, default=60.0)
    ap.add_argument(
        "--baseline", type=Path, action="append", default=[], help="another checkout, measured over the same seconds"
    )
    a = ap.parse_args()
    names = ["baseline"] if len(a.baseline) == 1 else [f"baseline {i + 1}" for i in range(len(a.baseline))]
    repos = {"this": REPO} | {name: path.resolve() for name, path in zip(names, a.baseline, strict=True)}
    started = threading.Barrier(len(repos))
    results: dict[str, dict] = {name: {} for name in repos}
    load0 = os.getloadavg()
    workers = [threading.Thread(target=measure, args=(r, a.rest, started, results[n])) for n, r in repos.items()]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for name, res in results.items():
        if "error" in res:
            print(f"{name}: {res['error']}")
            continue
        secs = res["seconds"]
        print(f"{name} ({repos[name]}), over {secs:.1f} s:")
        total = {"supervisor": 0.0, "reaper": 0.0}
        for who, tid, call, cpu, runs, sleeps in res["rows"]:
            total[who] += cpu
            if runs:
                print(
                    f"  {who:<10} tid {tid:<7} in {call:<8} {100 * cpu / secs:6.3f}% of a core, "
                    f"{runs / secs:5.2f} runs/s, {sleeps / secs:5.2f} sleeps/s, {1e6 * cpu / runs:6.0f} us/run"
                )
        both = 100 * (total["supervisor"] + total["reaper"]) / secs
        print(
            f"  supervisor {100 * total['supervisor'] / secs:.3f}% + reaper {100 * total['reaper'] / secs:.3f}% "
            f"= {both:.3f}%"
        )
    print(f"load avg before {[round(x, 2) for x in load0]}, after {[round(x, 2) for x in os.getloadavg()]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

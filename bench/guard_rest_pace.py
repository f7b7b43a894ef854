"""Does resting longer at steady state cost the guard any margin? The real Guard thread, in the
"ready" phase far from the lines, then a fall at --rate GiB/s that starts at a random moment between
two samples: how far above the kill line MemAvailable still was when the guard acted, with the PSI
trigger armed (the 5 s rest pace) and without (the 1 s timer).

    python bench/guard_rest_pace.py [--rate 16] [--from-gib 100] [--trials 6]

MemAvailable is simulated (a function of the clock), so a machine of any size can play a Spark with
100 GiB free; the tree is a stand-in that records the guard's signal and kills nothing. The guard's
own loop, pace, PSI trigger (real, on /proc/pressure/memory where the kernel allows one) and
decisions are the real ones. Default lines: term 6 GiB, kill 3.5 GiB.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparktui.core.units import GiB
from sparktui.runtime.guard import guard as guard_mod
from sparktui.runtime.host.proc import StopReport


class StandInTree:
    """What the guard watches and signals: never exits; a stop or kill is recorded, not sent."""

    pid = 0
    popen = None
    recorded: list[object] = []

    def returncode(self) -> None:
        return None

    def refresh(self) -> list[int]:
        return [1]

    def track(self) -> None:
        pass

    def kill(self, on_poll=None, on_signalled=None) -> StopReport:
        if on_signalled is not None:
            on_signalled()
        return StopReport(gone=True)

    def stop(self, grace, on_poll=None, on_signalled=None) -> StopReport:
        return self.kill(on_poll, on_signalled)


def trial(rate_gib_s: float, from_gib: float, armed: bool) -> tuple[float, float, str]:
    """(the rest pace before the fall, GiB above the kill line when the guard acted, why)."""
    start: list[float | None] = [None]

    def available() -> int:
        began = start[0]
        fallen = 0.0 if began is None else rate_gib_s * max(0.0, time.monotonic() - began)
        return int(GiB * (from_gib - fallen))

    acted: dict[str, int] = {}
    guard = guard_mod.Guard(
        StandInTree(),
        guard_mod.GuardLines(),
        read_available=available,
        track_interval=None,
        pressure=guard_mod.PRESSURE_TRIGGER if armed else None,
        on_trip=lambda d: acted.setdefault("at", available()),
    )
    guard.set_phase("ready")
    thread = guard.start()
    time.sleep(random.uniform(1.0, 6.0))  # past the first samples, at a random point of the rest pace
    assert guard.last is not None
    rest = guard.last.next_interval
    start[0] = time.monotonic()
    thread.join(60)
    kill = guard.lines.kill_below_gib or 0.0
    why = f"{guard.report.line} line, {guard.report.reason}" if guard.report else "never acted"
    return rest, acted.get("at", 0) / GiB - kill, why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=16.0, help="GiB/s of the fall (16: the guard's WORST_RATE)")
    ap.add_argument("--from-gib", type=float, default=100.0, help="simulated MemAvailable before the fall")
    ap.add_argument("--trials", type=int, default=6)
    a = ap.parse_args()
    for armed in (True, False):
        runs = [trial(a.rate, a.from_gib, armed) for _ in range(a.trials)]
        margins = [m for _, m, _ in runs]
        print(
            f"PSI trigger {'armed' if armed else 'off'}: rest pace {statistics.median(r for r, _, _ in runs):.2f} s; "
            f"a fall of {a.rate:g} GiB/s from {a.from_gib:g} GiB was acted on {min(margins):.2f} GiB (worst) / "
            f"{statistics.median(margins):.2f} GiB (median) above the kill line ({sorted({w for _, _, w in runs})})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

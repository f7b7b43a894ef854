"""What the supervisor's guard does after each sample, before it may trip: its cost per sample.

    python bench/on_sample_cost.py [--samples 20000] [--baseline DIR ...]

The guard (runtime/guard/guard.py) calls on_sample right after a sample is decided and before a
term or kill is acted on, so whatever the supervisor's wiring does there (the heartbeat, the
reaper's alarm, waking the loop for news) is added to every trip's delay. This times that callback
in-process, on the real GuardWiring with a real heartbeat file, for this checkout and for each
--baseline (another checkout: `git archive REV | tar -x -C DIR`), each in its own process, one
after the other, twice, interleaved: µs per call when a heartbeat is due at every sample (the worst
case: each pays the write) and when it is not (samples closer than the 0.25 s heartbeat pace, as
near a line, where trips happen).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, tempfile, threading, time
os.environ["SPARKTUI_STATE_DIR"] = tempfile.mkdtemp(prefix="sparktui-onsample-")
from types import SimpleNamespace
from sparktui.core.profiles import GuardSettings
from sparktui.runtime.guard.guard import Decision, GuardAction
from sparktui.runtime.server import guard_wiring
from sparktui.runtime.server.guard_wiring import GuardWiring

n = int(sys.argv[1])
wiring = GuardWiring(
    GuardSettings(), 8999, lambda _: None, lock=threading.RLock(), record=lambda: None, save=lambda: True,
    reaper=lambda: None, wake=lambda *_: None, say=lambda _: None,
)
wiring.guard = SimpleNamespace(last=Decision(GuardAction.NONE, 0.002, available=20 << 30))
wiring.open_beat()
if hasattr(wiring, "_shown"):
    wiring._shown = ("none", 20.0, False)  # the loop has recorded this line: no news to tell
callback = getattr(wiring, "_sampled", wiring.beat)
out = {}
for name, every in (("beat due", 0.0), ("no beat due", 1e9)):
    guard_wiring.BEAT_EVERY_S = every
    callback()
    t0 = time.perf_counter()
    for _ in range(n):
        callback()
    out[name] = (time.perf_counter() - t0) / n * 1e6
wiring.close_beat()
print(json.dumps(out))
"""


def run(repo: Path, samples: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(samples)], cwd=repo, capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--baseline", type=Path, action="append", default=[])
    a = ap.parse_args()
    repos = {"this": REPO} | {f"baseline {i + 1}": p.resolve() for i, p in enumerate(a.baseline)}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in repos}
    load0 = os.getloadavg()
    for _ in range(2):
        for name, repo in repos.items():
            results[name].append(run(repo, a.samples))
    for name, runs in results.items():
        cells = ", ".join(f"{k} {min(r[k] for r in runs):.1f} us" for k in runs[0])
        print(f"{name} ({repos[name]}): on_sample per call (best of 2) {cells}")
    print(f"load avg before {[round(x, 2) for x in load0]}, after {[round(x, 2) for x in os.getloadavg()]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

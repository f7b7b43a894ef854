"""The panel's edit-to-verdict latency, and what the fit panel shows before the profile's first fit.

    python3 bench/fit_latency.py [--edits 20] [--runs 5] [--compare OTHER_SOURCE_TREE]

Runs the panel headless in a child process (the live backend: this host's /proc/meminfo, the
shipped profile 70b-dense-single-user). Times (1) from the app's start to the profile's first
real verdict in the fit panel, counting the placeholder views shown before it, and (2) from a
form edit (--max-model-len set, alternating 16384/32768) to the fit panel holding the new fit,
and counts core fits per edit. With --compare, the same child runs against another checkout's
`sparktui` (e.g. an older commit unpacked with `git archive`), interleaved run by run, and
both sets of figures are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import asyncio, json, sys, time
from textual.widgets import Input
from sparktui.core import fit as fit_module
from sparktui.ui.app import SparkApp
from sparktui.ui.panes.config_fit import FitBox

edits = int(sys.argv[1])
events = []
real_fit, real_show = fit_module.fit, FitBox._show_fit

def counted_fit(*a, **k):
    events.append(("fit", time.perf_counter(), None))
    return real_fit(*a, **k)

def counted_show(self, view, saw):
    events.append(("shown", time.perf_counter(), view))
    return real_show(self, view, saw)

fit_module.fit = counted_fit
FitBox._show_fit = counted_show

async def until(pilot, cond, timeout=60.0):
    end = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > end:
            raise SystemExit("timed out")
        await asyncio.sleep(0.0005)

async def main():
    start = time.perf_counter()
    app = SparkApp(profile="70b-dense-single-user")
    async with app.run_test(size=(120, 40)) as pilot:
        first = lambda: any(k == "shown" and v.verdict not in ("n/a", "error") for k, _, v in events)
        await until(pilot, first)
        at = next(t for k, t, v in events if k == "shown" and v.verdict not in ("n/a", "error"))
        placeholders = sum(1 for k, t, v in events if k == "shown" and t < at)
        await asyncio.sleep(1.0)  # the first screen's rest (form rows, download check)
        latencies, fits = [], []
        for i in range(edits):
            length = 16384 if i % 2 == 0 else 32768
            events.clear()
            t0 = time.perf_counter()
            app.query_one("#flag-max_model_len", Input).value = str(length)
            done = lambda: any(
                k == "shown" and v.reasons and f"of {length:,} tokens" in v.reasons[0] for k, _, v in events
            )
            await until(pilot, done)
            latencies.append(next(t for k, t, v in events if k == "shown" and f"of {length:,}" in v.reasons[0]) - t0)
            await asyncio.sleep(0.2)
            fits.append(sum(1 for k, _, _ in events if k == "fit"))
        print(json.dumps({"first_verdict_s": at - start, "placeholders": placeholders,
                          "edit_s": latencies, "fits_per_edit": fits}))

asyncio.run(main())
"""


def run_child(tree: Path, edits: int, tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["SPARKTUI_CONFIG_DIR"] = str(tmp / "config")
    env["SPARKTUI_STATE_DIR"] = str(tmp / "state")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(edits)], env=env, cwd=tmp, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise SystemExit(f"child on {tree} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(name: str, results: list[dict]) -> str:
    edits = [s for r in results for s in r["edit_s"]]
    firsts = [r["first_verdict_s"] for r in results]
    fits = sorted({f for r in results for f in r["fits_per_edit"]})
    holders = sorted({r["placeholders"] for r in results})
    q = statistics.quantiles(edits, n=20) if len(edits) > 1 else edits
    return (
        f"{name}: edit→verdict median {statistics.median(edits) * 1e3:.1f} ms, p95 {q[-1] * 1e3:.1f} ms "
        f"({len(edits)} edits); core fits per edit {fits}; start→first verdict median "
        f"{statistics.median(firsts) * 1e3:.0f} ms; placeholder views before it {holders}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another source tree holding a sparktui/ package")
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({f"compare ({args.compare})": args.compare} if args.compare else {})
    results: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.runs):
            for name, tree in trees.items():
                results[name].append(run_child(tree, args.edits, Path(folder)))
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for name, found in results.items():
        print(summary(name, found))


if __name__ == "__main__":
    main()

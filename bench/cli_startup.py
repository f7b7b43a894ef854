"""How long the quick commands take to start and finish, as a ratio to `python -c 'import textual'`.

    python bench/cli_startup.py [--runs 9] [--profile profiles/70b-dense-single-user.toml] [--json]

One round runs, in turn, `python -c 'import textual'` and each of `sparktui status`, `stop`,
`kill` (no server running: a private empty state dir) and `fit PROFILE`, each as a fresh process
with the same interpreter; --runs rounds alternate them so a busy moment on a shared machine falls
on all of them. Printed: each command's median wall time and the median of its per-round ratios to
`import textual` in the same round. Goal (issue 25): every ratio under 2.
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

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--profile", default=str(REPO / "profiles" / "70b-dense-single-user.toml"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    py = sys.executable
    commands = {
        "import textual": [py, "-c", "import textual"],
        "status": [py, "-m", "sparktui", "status"],
        "stop": [py, "-m", "sparktui", "stop"],
        "kill": [py, "-m", "sparktui", "kill"],
        "fit PROFILE": [py, "-m", "sparktui", "fit", args.profile],
    }
    with tempfile.TemporaryDirectory(prefix="sparktui-startup-") as state:
        env = {**os.environ, "SPARKTUI_STATE_DIR": state, "PYTHONDONTWRITEBYTECODE": "1"}
        for argv in commands.values():  # compile and cache every module once, unmeasured
            timed(argv, {**env, "PYTHONDONTWRITEBYTECODE": ""})
        walls: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                walls[name].append(timed(argv, env))
    base = walls["import textual"]
    rows = {
        name: {
            "median_s": statistics.median(times),
            "ratio": statistics.median(t / b for t, b in zip(times, base, strict=True)),
        }
        for name, times in walls.items()
    }
    if args.json:
        print(json.dumps({"runs": args.runs, "commands": rows}, indent=1))
        return
    print(f"{args.runs} alternating rounds; ratio: the median of each round's wall time / import textual's")
    print(f"{'command':<16} {'median s':>9} {'× textual':>10}")
    for name, row in rows.items():
        print(f"{name:<16} {row['median_s']:>9.3f} {row['ratio']:>10.2f}")


if __name__ == "__main__":
    main()

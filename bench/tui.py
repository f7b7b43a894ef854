"""The control panel's speed: cold start, idle CPU, and key latency under a log flood.

    python3 bench/tui.py [--idle-seconds 60] [--flood-seconds 10] [--rate 100000] [--only NAME]

1. cold start, what a user sees: `sparktui PROFILE` (the installed entry point) on a real
   pseudo-terminal of 80×24, read through a terminal emulator (pyte), timed from just before the
   fork until the screen is full: the header names the profile, the fit shows its verdict, the
   form holds the model and the footer its keys. In the same run, interleaved, a bare Textual app
   (a header, 22 lines of static text, a footer) is timed the same way until its last line and
   its footer are on screen; the ratio of the medians is printed: goal ≤ 1.5×. Both start from
   bytecode written by one warm-up run each (into the run's temporary folder), as an installed
   package would. (`--only start-headless`: the old in-process figure, the app's own first
   compositor pass, which is not what a user sees.)
2. idle CPU: the app headless with the live backend (real /proc/meminfo and NVML sampling every
   second, the gauge redrawn when its figures change, the state dir watched), CPU time of its
   process over --idle-seconds after a 3 s settle; at the same time a bare Textual app (a header,
   36 static lines, a footer) idles beside it, and both figures are printed. Goal ≤ 1% of one core.
3. key latency under flood: once the panel has finished starting (its polls running, every row of
   the form mounted), a writer process appends vLLM-like log lines (the real fixture logs,
   repeated) at --rate lines/s while the app follows the file (LogTail → LogSummary → log view);
   a key bound to a no-op action is pressed every 100 ms and timed from the key event being
   posted to its action running. Goal ≤ 100 ms (p95 and max reported). Then the same flood and
   probe in a bare Textual app (a thread tails the file into Textual's Log widget), with the
   ratios of CPU and key p95.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures"
PROBE_KEY = "f19"  # a key sparktui binds to nothing (sparktui/ui/actions.py)

CHILD_START = r"""
import sys, time, os
sys.path.insert(0, os.environ["SPARKTUI_ROOT"])
from sparktui.ui.app import SparkApp

class FirstFrame(SparkApp):
    def _print_and_exit(self):
        print(f"FIRST_FRAME {time.time():.6f}", flush=True)
        self.exit()

async def pilot(p):
    p.app._print_and_exit()

FirstFrame(profile=sys.argv[1] if len(sys.argv) > 1 else None).run(headless=True, size=(80, 24), auto_pilot=pilot)
"""

CHILD_BARE = r"""
import sys, time
from textual.app import App
from textual.widgets import Footer, Header, Static

class Bare(App):
    def compose(self):
        yield Header()
        for i in range(22):
            yield Static(f"line {i}: some static text, as long as a line of a small panel")
        yield Footer()

    def _print_and_exit(self):
        print(f"FIRST_FRAME {time.time():.6f}", flush=True)
        self.exit()

async def pilot(p):
    p.app._print_and_exit()

Bare().run(headless=True, size=(80, 24), auto_pilot=pilot)
"""

CHILD_IDLE = r"""
import asyncio, sys, time, os, resource
sys.path.insert(0, os.environ["SPARKTUI_ROOT"])
from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.gauge import MemoryGauge
settle, window = float(sys.argv[1]), float(sys.argv[2])
redraws = [0]
_refresh = MemoryGauge.refresh
def counting_refresh(self, *a, **k):
    redraws[0] += 1
    return _refresh(self, *a, **k)
MemoryGauge.refresh = counting_refresh

async def pilot(p):
    await p.pause(settle)
    t0, c0, r0 = time.monotonic(), time.process_time(), redraws[0]
    await asyncio.sleep(window)  # not p.pause: it posts to every widget and paints the screen
    t1, c1 = time.monotonic(), time.process_time()
    samples = len(p.app.query_one(MemoryGauge).history)
    print(f"IDLE {c1 - c0:.4f} {t1 - t0:.4f} {samples} {redraws[0] - r0}", flush=True)
    p.app.exit()

SparkApp(profile=sys.argv[3] if len(sys.argv) > 3 else None).run(headless=True, size=(120, 40), auto_pilot=pilot)
"""

CHILD_BARE_IDLE = r"""
import asyncio, sys, time
from textual.app import App
from textual.widgets import Footer, Header, Static
settle, window = float(sys.argv[1]), float(sys.argv[2])

class Bare(App):
    def compose(self):
        yield Header()
        for i in range(36):
            yield Static(f"line {i}: some static text, as long as a line of a small panel")
        yield Footer()

async def pilot(p):
    await p.pause(settle)
    t0, c0 = time.monotonic(), time.process_time()
    await asyncio.sleep(window)
    t1, c1 = time.monotonic(), time.process_time()
    print(f"IDLE {c1 - c0:.4f} {t1 - t0:.4f} 0 0", flush=True)
    p.app.exit()

Bare().run(headless=True, size=(120, 40), auto_pilot=pilot)
"""

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
src = []
for name in sys.argv[4:]:
    src += open(name, "rb").read().splitlines(keepends=True)
tick = 0.05
per_tick = max(1, int(rate * tick))
written, i, t0 = 0, 0, time.monotonic()
with open(path, "ab", buffering=1 << 20) as out:
    while time.monotonic() - t0 < seconds:
        chunk = []
        for _ in range(per_tick):
            chunk.append(src[i % len(src)])
            i += 1
        out.write(b"".join(chunk))
        out.flush()
        written += per_tick
        delay = t0 + written / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
print(f"WROTE {written} {time.monotonic() - t0:.3f}", flush=True)
"""


def child_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.update(
        SPARKTUI_ROOT=str(ROOT),
        SPARKTUI_CONFIG_DIR=str(tmp / "config"),
        SPARKTUI_STATE_DIR=str(tmp / "state"),
        SPARKTUI_CACHE_DIR=str(tmp / "cache"),  # the stylesheet kept between starts (ui.css_cache): not the user's
    )
    # Both apps start from compiled bytecode, as an installed package does (pip compiles it). With
    # PYTHONDONTWRITEBYTECODE set (as on the development machines) sparktui, installed editable,
    # would be compiled from source on every start while Textual's wheel brought its .pyc files.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def first_frames(tmp: Path, script: str, args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.time()
        out = subprocess.run(
            [sys.executable, "-c", script, *args], env=child_env(tmp), capture_output=True, text=True, timeout=60
        )
        line = next((row for row in out.stdout.splitlines() if row.startswith("FIRST_FRAME")), None)
        if line is None:
            raise SystemExit(f"cold start run failed:\n{out.stderr[-2000:]}")
        times.append(float(line.split()[1]) - t0)
    return times


BARE_APP = CHILD_BARE.replace("Bare().run(headless=True, size=(80, 24), auto_pilot=pilot)", "Bare().run()")


def screen_full_time(argv: list[str], env: dict, full, timeout: float = 60.0) -> tuple[float, float]:
    """(seconds from just before the fork until `full(screen text)` holds on an 80×24 pty, CPU
    seconds the program had used by then). The CPU figure depends less on the machine's load."""
    from tests.support.pty_app import PtyApp

    app = PtyApp(argv, env, 80, 24)
    try:
        wall = app.wait_for(lambda a: full(a.text()), timeout, "the screen to fill")
        return wall, _cpu_seconds(app.pid)
    finally:
        app.close()


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, all its threads (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sparktui_full(profile: str):
    def full(text: str) -> bool:
        lines = text.splitlines()
        return (
            profile[:20] in lines[0]
            and any(v in text for v in ("Fit FITS", "Fit TIGHT", "Fit WON'T", "Fit UNSAFE"))
            and "model " in text
            and "/" in next((line for line in lines if line.startswith("model ")), "")
            and "Quit" in lines[-1]
        )

    return full


def bare_full(text: str) -> bool:
    return "line 21:" in text and "palette" in text.splitlines()[-1]


def baseline_env(tmp: Path, baseline: Path) -> dict:
    """The environment that runs another checkout of sparktui (its folder first on the path)."""
    env = child_env(tmp)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(baseline), env.get("PYTHONPATH", "")) if p)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache-baseline")
    return env


def bench_start_pty(tmp: Path, profile: str, runs: int = 5, baseline: Path | None = None) -> None:
    env = child_env(tmp)
    # -P: the working folder is not put first on the path, so --baseline's PYTHONPATH wins
    sparktui = [sys.executable, "-P", "-m", "sparktui", profile]
    bare = [sys.executable, "-c", BARE_APP]
    old_env = baseline_env(tmp, baseline) if baseline is not None else None
    screen_full_time(sparktui, env, sparktui_full(profile))  # warm-ups: write the bytecode
    screen_full_time(bare, env, bare_full)
    if old_env is not None:
        screen_full_time(sparktui, old_env, sparktui_full(profile))
    ours: list[tuple[float, float]] = []
    firsts: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    olds: list[tuple[float, float]] = []
    for _ in range(runs):  # interleaved, so a busy moment on the machine falls on all alike
        for kept in (tmp / "cache").glob("css-rules-*"):
            kept.unlink()  # a first start (after an install or a Textual upgrade): every stylesheet parsed
        firsts.append(screen_full_time(sparktui, env, sparktui_full(profile)))
        ours.append(screen_full_time(sparktui, env, sparktui_full(profile)))
        theirs.append(screen_full_time(bare, env, bare_full))
        if old_env is not None:
            olds.append(screen_full_time(sparktui, old_env, sparktui_full(profile)))

    def med(runs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(r[i] for r in runs)

    print(
        f"start to a full screen over a pty (80x24, `sparktui {profile}`, stylesheet kept from an earlier start): median "
        f"{med(ours, 0):.3f} s, max {max(r[0] for r in ours):.3f} s over {runs} runs; CPU by then {med(ours, 1):.2f} s"
    )
    print(
        f"  the same, a first start (no stylesheet kept from an earlier start): median {med(firsts, 0):.3f} s; "
        f"CPU by then {med(firsts, 1):.2f} s; ratio to bare {med(firsts, 0) / med(theirs, 0):.2f}x, "
        f"CPU ratio {med(firsts, 1) / med(theirs, 1):.2f}x"
    )
    print(
        f"bare Textual app over a pty (header, 22 static lines, footer): median {med(theirs, 0):.3f} s, "
        f"max {max(r[0] for r in theirs):.3f} s over {runs} runs; CPU by then {med(theirs, 1):.2f} s"
    )
    print(
        f"full-screen ratio sparktui / bare, over a pty: {med(ours, 0) / med(theirs, 0):.2f}x (goal <= 1.5x); "
        f"CPU ratio {med(ours, 1) / med(theirs, 1):.2f}x"
    )
    if olds:
        print(
            f"baseline {baseline}: median {med(olds, 0):.3f} s, max {max(r[0] for r in olds):.3f} s, CPU by then "
            f"{med(olds, 1):.2f} s; ratio to bare {med(olds, 0) / med(theirs, 0):.2f}x, CPU ratio "
            f"{med(olds, 1) / med(theirs, 1):.2f}x (same run, interleaved)"
        )


def bench_start(tmp: Path, profile: str | None, runs: int = 5) -> None:
    # Interleaved, so a busy moment on the machine falls on both alike.
    ours: list[float] = []
    bare: list[float] = []
    first_frames(tmp, CHILD_START, [profile] if profile else [], 1)  # warm-up: writes the bytecode
    first_frames(tmp, CHILD_BARE, [], 1)
    for _ in range(runs):
        ours += first_frames(tmp, CHILD_START, [profile] if profile else [], 1)
        bare += first_frames(tmp, CHILD_BARE, [], 1)
    ratio = statistics.median(ours) / statistics.median(bare)
    print(
        f"cold start to first frame (80x24, headless, profile {profile or 'none'}): "
        f"median {statistics.median(ours):.3f} s, max {max(ours):.3f} s over {runs} runs"
    )
    print(
        f"bare Textual app (header, 22 static lines, footer): median {statistics.median(bare):.3f} s, "
        f"max {max(bare):.3f} s over {runs} runs"
    )
    print(f"first-frame ratio sparktui / bare: {ratio:.2f}x (goal <= 1.5x)")


def bench_idle(tmp: Path, seconds: float, profile: str | None) -> None:
    """The panel idle and a bare Textual app idle, both at once (the same moment of the machine)."""
    ours = subprocess.Popen(
        [sys.executable, "-c", CHILD_IDLE, "3", str(seconds), *([profile] if profile else [])],
        env=child_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    bare = subprocess.Popen(
        [sys.executable, "-c", CHILD_BARE_IDLE, "3", str(seconds)],
        env=child_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    figures = []
    for child in (ours, bare):
        out, err = child.communicate(timeout=seconds + 120)
        line = next((row for row in out.splitlines() if row.startswith("IDLE")), None)
        if line is None:
            raise SystemExit(f"idle run failed:\n{err[-2000:]}")
        figures.append(line.split()[1:])
    cpu, wall, _samples, redraws = figures[0]
    bare_cpu, bare_wall = float(figures[1][0]), float(figures[1][1])
    pct, bare_pct = float(cpu) / float(wall) * 100, bare_cpu / bare_wall * 100
    print(
        f"idle CPU with the gauge live (120x40, memory/GPU sampled every 1 s; the gauge redrew {redraws} "
        f"times in the window, when its figures changed): {float(cpu):.2f} s CPU over {float(wall):.1f} s "
        f"= {pct:.2f}% of one core (goal <= 1%)"
    )
    print(
        f"bare Textual app idle at the same time (header, 36 static lines, footer): {bare_cpu:.3f} s CPU "
        f"= {bare_pct:.3f}% of one core; sparktui / bare {pct / max(bare_pct, 1e-3):.0f}x, "
        f"{pct - bare_pct:.2f} points above it"
    )


async def bench_flood(tmp: Path, seconds: float, rate: int) -> None:
    from textual.binding import Binding

    from sparktui.ui.app import SparkApp
    from sparktui.ui.widgets.logview import LogView

    try:  # the log's tail lives in the server pane's log box since the pane was split
        from sparktui.ui.panes.server_log import ServerLog as Tailing
    except ImportError:  # a --baseline checkout from before the split
        from sparktui.ui.panes import ServerPane as Tailing  # type: ignore[assignment]

    latencies: list[float] = []
    pressed: list[float] = []

    class FloodApp(SparkApp):
        BINDINGS = [*SparkApp.BINDINGS, Binding(PROBE_KEY, "probe", "probe", id="bench.probe", show=False)]

        def action_probe(self) -> None:
            latencies.append(time.perf_counter() - pressed[-1])

    log = tmp / "flood.log"
    log.write_bytes(b"")
    os.environ.update(SPARKTUI_CONFIG_DIR=str(tmp / "config"), SPARKTUI_STATE_DIR=str(tmp / "state"))
    app = FloodApp()
    async with app.run_test(size=(120, 40)) as pilot:
        # A flood comes from a server that is up, long after the panel's start-up: wait for that
        # to end (the polls started, every row of the form mounted), so the keys time the flood
        # and not the form's last rows being laid out.
        from sparktui.ui.widgets.editor import ConfigEditor

        deadline = time.monotonic() + 15
        while not (app.background_started and app.query_one(ConfigEditor).complete):
            if time.monotonic() > deadline:
                raise SystemExit("the panel did not finish starting within 15 s")
            await pilot.pause(0.1)
        await pilot.pause(0.5)
        app.show_pane("server")
        pane = app.query_one(Tailing)
        pane.start_tail(log)
        cpu = await _probe_during_flood(app, log, _flood_sources(), seconds, rate, latencies, pressed)
        await pilot.pause(1.0)  # let the tail catch up
        seen = app.query_one(LogView).total_lines
        kept = app.query_one(LogView).line_count
        pane.stop_tail()
    lat = sorted(latencies)
    bare_cpu, bare_lat, bare_seen = await bench_flood_bare(tmp, seconds, rate)
    print(
        f"log flood at {rate:,} lines/s for {seconds:g} s (120x40, the server pane's log, wrapping): app followed "
        f"{seen:,} lines, kept {kept:,}; app CPU {cpu * 100:.0f}% of a core"
    )
    print(
        f"key latency during the flood ({len(lat)} presses): median {statistics.median(lat) * 1000:.1f} ms, "
        f"p95 {_p95(lat) * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms (goal <= 100 ms)"
    )
    print(
        f"bare Textual app, the same flood into Textual's Log widget (a thread tails the file, hands it the "
        f"newest lines 10 times a second): read "
        f"{bare_seen:,} lines; CPU {bare_cpu * 100:.0f}% of a core; key latency median "
        f"{statistics.median(bare_lat) * 1000:.1f} ms, p95 {_p95(bare_lat) * 1000:.1f} ms, max {bare_lat[-1] * 1000:.1f} ms"
    )
    print(
        f"flood ratio sparktui / bare: CPU {cpu / bare_cpu:.2f}x, key p95 {_p95(lat) / _p95(bare_lat):.2f}x "
        "(run one after the other)"
    )


async def bench_flood_bare(tmp: Path, seconds: float, rate: int) -> tuple[float, list[float], int]:
    """The same flood and probe key in a bare Textual app: a thread tails the file into Textual's
    own Log widget (5000 lines kept, as sparktui's view), the newest lines 10 times a second."""
    import threading

    from textual.app import App
    from textual.binding import Binding
    from textual.widgets import Log

    latencies: list[float] = []
    pressed: list[float] = []

    class BareFlood(App):
        BINDINGS = [Binding(PROBE_KEY, "probe", "probe", show=False)]

        def compose(self):
            yield Log(max_lines=5000)

        def action_probe(self) -> None:
            latencies.append(time.perf_counter() - pressed[-1])

    sources = _flood_sources()
    log_path = tmp / "flood-bare.log"
    log_path.write_bytes(b"")
    stop = threading.Event()
    seen = [0]

    def tail(app: App, view: Log) -> None:
        # Read as fast as the file grows; hand the widget the newest lines 10 times a second (as
        # sparktui's view draws): a write_lines per chunk read would bury the keys.
        loop = app._loop  # the app's loop: the widget is fed on it
        rest = b""
        kept: deque[str] = deque(maxlen=5000)
        handed = time.monotonic()
        with open(log_path, "rb") as fh:
            while not stop.is_set():
                chunk = fh.read(1 << 16)
                if chunk:
                    lines = (rest + chunk).split(b"\n")
                    rest = lines.pop()
                    seen[0] += len(lines)
                    kept.extend(line.decode("utf-8", "replace") for line in lines)
                else:
                    time.sleep(0.02)
                if kept and time.monotonic() - handed >= 0.1:
                    loop.call_soon_threadsafe(view.write_lines, list(kept))
                    kept.clear()
                    handed = time.monotonic()

    sys.setswitchinterval(0.001)  # as sparktui sets it (the reader thread hands the GIL back sooner)
    app = BareFlood()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        reader = threading.Thread(target=tail, args=(app, app.query_one(Log)), daemon=True)
        reader.start()
        cpu = await _probe_during_flood(app, log_path, sources, seconds, rate, latencies, pressed)
        stop.set()
        reader.join()
    return cpu, sorted(latencies), seen[0]


def _flood_sources() -> list[str]:
    sources = [str(p) for p in sorted((FIXTURES / "vllm-logs").glob("*.log"))]
    return sources + [str(p) for p in sorted((FIXTURES / "vllm-cpu").glob("*.log"))]


async def _probe_during_flood(app, log: Path, sources, seconds, rate, latencies, pressed) -> float:
    """Run the writer; press the probe key every 100 ms meanwhile; the app's CPU share."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(rate), str(seconds), *sources], stdout=subprocess.PIPE, text=True
    )
    c0, t0 = time.process_time(), time.monotonic()
    while writer.poll() is None:
        pressed.append(time.perf_counter())
        app.post_message(_key(PROBE_KEY))
        before = len(latencies)
        deadline = time.monotonic() + 10
        while len(latencies) == before:
            if time.monotonic() > deadline:
                raise SystemExit(f"the probe key {PROBE_KEY} never reached its action (bound to something else?)")
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.1)
    share = (time.process_time() - c0) / (time.monotonic() - t0)
    writer.stdout.read()
    return share


def _p95(lat: list[float]) -> float:
    return lat[int(len(lat) * 0.95) - 1] if lat else float("nan")


def _key(key: str):
    from textual import events

    return events.Key(key, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--flood-seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=100_000, help="log lines per second during the flood")
    parser.add_argument("--profile", default="70b-dense-single-user", help="profile to open (shipped name or path)")
    parser.add_argument("--only", choices=("start", "start-headless", "idle", "flood"))
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of sparktui (e.g. `git worktree add /tmp/base main`) measured in the same run, "
        "interleaved, for before/after figures",
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="sparktui-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.only in (None, "start"):
            bench_start_pty(tmp, args.profile, baseline=args.baseline)
        if args.only == "start-headless":
            bench_start(tmp, args.profile)
        if args.only in (None, "idle"):
            bench_idle(tmp, args.idle_seconds, args.profile)
        if args.only in (None, "flood"):
            asyncio.run(bench_flood(tmp, args.flood_seconds, args.rate))


if __name__ == "__main__":
    main()

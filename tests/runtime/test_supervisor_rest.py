"""The supervisor at rest: asleep until something happens, and nothing that happens is missed.

Against the stub vLLM: real processes, a real log file (inotify), real memory (a hog) and the
real /metrics endpoint.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.host.memory import read_mem_available
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client, launcher
from tests.support import PROCS, hog_mib, wait_for

pytestmark = pytest.mark.slow

GiB = 1 << 30


def recorded(port: int) -> dict | None:
    """The state file of `port` as JSON data (what `status --json` prints), or None."""
    state = st.read_state(st.state_path(port))
    return None if state is None else state.to_dict()


def running(port: int) -> dict:
    return wait_for(
        lambda: (s := recorded(port)) and s.get("status") == "running" and s.get("metrics") and s,
        60,
        "the server to be running with metrics",
    )


def at_rest(log_path: Path, quiet_s: float = 1.0) -> None:
    """Wait until the server's log has not grown for quiet_s (start-up and first scrapes are over)."""
    seen = {"size": -1, "since": time.monotonic()}

    def quiet() -> bool:
        size = log_path.stat().st_size
        if size != seen["size"]:
            seen.update(size=size, since=time.monotonic())
        return time.monotonic() - seen["since"] >= quiet_s

    wait_for(quiet, 30, "the server's log to go quiet", interval=0.1)


def scrapes(log_path: Path) -> int:
    return log_path.read_text(errors="replace").count('"GET /metrics ')


def test_at_rest_a_log_line_and_a_memory_fall_are_each_handled_at_once(make_profile, env, tmp_path):
    profile = load_profile(make_profile(guard="grace-s = 2"))
    port = profile.serve.port
    launcher.launch(profile)
    state = running(port)
    log_path = Path(state["log_path"])
    at_rest(log_path)

    # 1. A line in the log while the loop sleeps (its timers are seconds away): in the state within 1 s.
    marker = f"rest-probe-{time.time_ns()}"
    written = time.time()
    with open(log_path, "a") as log:
        log.write(f"(APIServer pid=1) WARNING 11-30 10:00:00 [probe.py:1] {marker}\n")

    def probe_event() -> dict | None:
        s = recorded(port) or {}
        return next((e for e in s.get("events", []) if marker in e.get("text", "")), None)

    event = wait_for(probe_event, 5, "the log line in the recorded events")
    assert event["kind"] == "Warning" and event["t"] - written <= 1.0
    live = client.attach(port)
    assert live.loop is not None and live.loop.wakes.get("log", 0) >= 1  # woken by the write (inotify)

    # 2. Memory falls (another program eats it) while at rest: the guard trips close to its line.
    # The line goes just below MemAvailable now (other tests on a shared machine move it meanwhile).
    a1 = read_mem_available() / GiB
    client.set_guard(port, lines={"warn_below_gib": None, "term_below_gib": round(a1 - 0.6, 2), "kill_below_gib": 0.0})
    at_rest(log_path)
    hog_log = tmp_path / "hog.log"
    hog = proc.spawn([sys.executable, str(PROCS / "hog.py"), "2048", str(hog_mib(1843)), "--hold", "20"], hog_log)
    try:
        final = wait_for(
            lambda: (s := recorded(port)) and s.get("status") == "exited" and s,
            30,
            "the guard to stop the server",
        )
    finally:
        hog.kill()
    trip = final["trip"]
    assert final["exit"]["reason"] == "guard" and trip["line"] == "term" and trip["gone"] is True
    # At the hog's <= 2 GiB/s, 0.3 GiB past the line is <= 0.15 s: the guard was not asleep.
    assert trip["reason"] == "predicted" or trip["mem_available_gib"] >= trip["threshold_gib"] - 0.3, trip
    assert not any(proc.ProcessIdentity(p, t).is_alive() for p, t in final["tree"]["members"])


def test_metrics_are_scraped_when_someone_reads_them_and_back_off_when_idle(make_profile, env):
    profile = load_profile(make_profile())
    port = profile.serve.port
    launcher.launch(profile)
    state = running(port)
    log_path = Path(state["log_path"])
    # Nobody reads and nothing happens: after the first scrape at ready, the idle pace (2 minutes)
    # at once, not every 2 s nor a gap doubling from there (issue 25).
    wait_for(lambda: scrapes(log_path) >= 1, 15, "the first scrape")
    first = time.monotonic()
    time.sleep(6.5)  # the busy pace would have scraped 3 times, the old doubling twice (2 s, 4 s)
    assert scrapes(log_path) == 1
    # The server does something (a request's access-log line): scraped at the busy pace again.
    with open(log_path, "a") as log:
        log.write('INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK\n')
    wait_for(lambda: scrapes(log_path) >= 2, 5, "a scrape after activity")
    assert time.monotonic() - first < 15.0
    # A client asks (`sparktui status`): its reply carries metrics at most 2 s old.
    asked = time.time()
    live = client.attach(port)
    assert live.metrics is not None and live.metrics.at >= asked - 2.5 and live.metrics.kv_cache_usage_pct == 0.0
    stopped = client.stop(port)
    assert stopped.exit is not None and stopped.exit.reason == "stopped"


def test_at_rest_the_guard_wakes_the_loop_for_news_and_no_timer_does(make_profile, env, tmp_path):
    """Issue 25: once ready the loop has no timer of its own for the guard's line: the guard's thread
    wakes it when a sample is news (0.5 GiB from the recorded line), and the state file has it."""
    profile = load_profile(make_profile())
    port = profile.serve.port
    launcher.launch(profile)
    state = running(port)
    at_rest(Path(state["log_path"]))
    recorded_gib = wait_for(lambda: (s := recorded(port)) and s["guard"]["last"], 10, "the guard's line")[
        "available_gib"
    ]
    # 1 GiB taken (far above the lines: the default warn line is 10 GiB) and held
    hog = proc.spawn([sys.executable, str(PROCS / "hog.py"), "2048", str(hog_mib(1024)), "--hold", "30"], None)
    try:
        moved = wait_for(
            lambda: (s := recorded(port)) and abs(s["guard"]["last"]["available_gib"] - recorded_gib) >= 0.5 and s,
            20,
            "the guard's line to move in the state file",
        )
        assert moved["guard"]["last"]["action"] == "none"
        live = client.attach(port)
        assert live.loop is not None and live.loop.wakes.get("guard", 0) >= 1, live.loop
    finally:
        hog.kill()
    assert client.stop(port).exit is not None

"""What sparktui watches, for Prometheus: `sparktui metrics --listen 127.0.0.1:PORT`, or a
profile's `[metrics] listen = "…"` served by its supervisor.

Every scrape reads /proc/meminfo and asks each running supervisor for its state (its socket, not
vLLM's /metrics, so a scrape never adds load on vLLM). Families, labelled by port and profile:

  sparktui_mem_available_bytes / sparktui_mem_total_bytes   /proc/meminfo
  sparktui_pool_bytes / sparktui_pool_reserved_bytes         what all servers may reserve, and do
  sparktui_server_up                                         1 while its supervisor answers
  sparktui_server_reserved_bytes                             utilization × total (+ CUDA context)
  sparktui_guard_armed / sparktui_guard_line_bytes{line}     the guard and its warn/term/kill lines
  sparktui_guard_last_sample_age_seconds                     since the guard's last MemAvailable sample
  sparktui_guard_trips_total                                 trips of this launch (0 or 1)
  sparktui_wedge_state{state} / sparktui_wedge_stalled_seconds   runtime.watch's wedge detector
  sparktui_kv_cache_tokens{source="predicted"|"reported"}    the fit's KV tokens against vLLM's log
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sparktui.errors import UserError
from sparktui.runtime.records import protocol as pr

MEMINFO = Path("/proc/meminfo")
GiB = 1 << 30
WEDGE_STATES = ("idle", "suspect", "wedged")
LABELS = ["port", "profile"]


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets); errors say what was expected."""
    match = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})", text.strip())
    port = int(match.group(3)) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise UserError(f"--listen {text!r}: expected HOST:PORT such as 127.0.0.1:9464")
    return match.group(1) or match.group(2), port


def families(states: list[pr.StateRecord], meminfo_text: str, now: float) -> list[Metric]:
    """The metric families for these states and this /proc/meminfo reading."""
    from sparktui.core import pool
    from sparktui.core.machine import Machine
    from sparktui.core.meminfo import parse_meminfo
    from sparktui.runtime.records.reservations import reservation_of

    mem = parse_meminfo(meminfo_text)
    machine = Machine.from_reading(mem["mem_total"], mem["mem_available"])
    available = GaugeMetricFamily("sparktui_mem_available_bytes", "MemAvailable from /proc/meminfo")
    available.add_metric([], mem["mem_available"])
    total = GaugeMetricFamily("sparktui_mem_total_bytes", "MemTotal from /proc/meminfo")
    total.add_metric([], mem["mem_total"])
    pool_total = GaugeMetricFamily(
        "sparktui_pool_bytes", "what all servers together may reserve (unified memory: MemTotal less the OS's share)"
    )
    pool_total.add_metric([], pool.pool_bytes(machine))
    up = GaugeMetricFamily("sparktui_server_up", "1 while the server's supervisor answers", labels=LABELS)
    reserved = GaugeMetricFamily(
        "sparktui_server_reserved_bytes", "what the server reserves of the pool", labels=LABELS
    )
    armed = GaugeMetricFamily("sparktui_guard_armed", "1 when the server's memory guard is armed", labels=LABELS)
    lines = GaugeMetricFamily(
        "sparktui_guard_line_bytes", "the guard's lines on MemAvailable", labels=[*LABELS, "line"]
    )
    age = GaugeMetricFamily(
        "sparktui_guard_last_sample_age_seconds", "seconds since the guard last sampled MemAvailable", labels=LABELS
    )
    trips = CounterMetricFamily("sparktui_guard_trips", "guard trips of the server's launch", labels=LABELS)
    wedge = GaugeMetricFamily(
        "sparktui_wedge_state", "1 for the wedge detector's state (idle, suspect, wedged)", labels=[*LABELS, "state"]
    )
    stalled = GaugeMetricFamily(
        "sparktui_wedge_stalled_seconds", "seconds running requests have made no progress", labels=LABELS
    )
    kv = GaugeMetricFamily(
        "sparktui_kv_cache_tokens",
        "KV cache tokens: the fit's prediction at launch and what vLLM reported",
        labels=[*LABELS, "source"],
    )
    total_reserved = 0
    for state in states:
        key = [str(state.port), state.profile or "?"]
        up.add_metric(key, 1.0 if state.alive else 0.0)
        if not state.alive:
            continue
        r = reservation_of(state, machine)
        total_reserved += r.bytes
        reserved.add_metric(key, r.bytes)
        guard = state.guard
        armed.add_metric(key, 1.0 if guard.armed else 0.0)
        for name in ("warn", "term", "kill"):
            value = getattr(guard.lines, f"{name}_below_gib")
            if value is not None:
                lines.add_metric([*key, name], value * GiB)
        # the real age of the last sample (the live answer, or the heartbeat file); the record's
        # line is rewritten only for news, so its own time says when memory last moved, not the guard
        if guard.sample_age_s is not None:
            age.add_metric(key, guard.sample_age_s)
        elif guard.last is not None and guard.last.at:
            age.add_metric(key, max(0.0, now - guard.last.at))
        trips.add_metric(key, 1.0 if state.trip else 0.0)
        watch = state.watch.wedge if state.watch is not None else pr.WedgeRecord()
        for name in WEDGE_STATES:
            wedge.add_metric([*key, name], 1.0 if watch.state == name else 0.0)
        stalled.add_metric(key, watch.stalled_s)
        predicted = state.preflight.fit.kv_cache_tokens if state.preflight.fit else None
        if predicted is not None:
            kv.add_metric([*key, "predicted"], float(predicted))
        reported = state.summary.kv_cache_tokens if state.summary else None
        if reported is not None:
            kv.add_metric([*key, "reported"], float(reported))
    reserved_total = GaugeMetricFamily("sparktui_pool_reserved_bytes", "what the running servers reserve together")
    reserved_total.add_metric([], total_reserved)
    return [available, total, pool_total, reserved_total, up, reserved, armed, lines, age, trips, wedge, stalled, kv]


def live_states(timeout: float = 2.0) -> list[pr.StateRecord]:
    """Every recorded server: live from its supervisor where one answers."""
    from sparktui.runtime.records import state as st

    out = []
    for state in st.list_states():
        if not state.running and state.status != "lost":
            continue  # ended: nothing to watch
        live = st.ask_live(state.port, timeout=timeout) if state.alive else None
        out.append(live or state)
    return out


class SparkCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from families(live_states(), MEMINFO.read_text(), time.time())


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SparkCollector())
    return reg


def serve(listen: str) -> Any:
    """Start the exporter on HOST:PORT in a daemon thread; returns the HTTP server (shutdown() ends it)."""
    from prometheus_client import start_http_server

    host, port = parse_listen(listen)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry())
    except OSError as exc:
        raise UserError(f"--listen {listen}: cannot listen there: {exc.strerror or exc}") from None
    return server


def render() -> str:
    """One scrape as Prometheus text."""
    from prometheus_client import generate_latest

    text: str = generate_latest(registry()).decode()
    return text

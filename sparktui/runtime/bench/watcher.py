"""What a level's watcher samples while its requests run: MemAvailable (runtime.host.memory, every
0.1 s), KV-cache usage from /metrics (core.metrics, every 0.5 s once tokens flow; a fraction 0..1,
as vLLM reports it), GPU power from NVML where it reports power (every 0.5 s; joules = power
integrated over the wall time), and, for a server sparktui started, its state record: a server
that exits, or whose guard trips or is disarmed, ends the run."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from sparktui.core.metrics import KV_USAGE, MetricsError, kv_cache_usage_pct, parse_metrics
from sparktui.errors import UserError
from sparktui.runtime.bench.client import Cancelled, ServerGone, StreamClient
from sparktui.runtime.bench.figures import LevelWatch
from sparktui.runtime.host.memory import read_gpu, read_mem_available
from sparktui.runtime.records import state as st

MEM_EVERY_S = 0.1
KV_EVERY_S = 0.5
POWER_EVERY_S = 0.5
STATE_EVERY_S = 0.5


class Watcher:
    def __init__(self, client: StreamClient, cancel: threading.Event) -> None:
        self.client, self.target, self.cancel = client, client.target, cancel
        self.power_ok = True

    async def probe_power(self) -> None:
        """NVML's first use (import, init) takes tens of ms: paid before the run, not inside a level."""
        self.power_ok = await asyncio.to_thread(gpu_power_w) is not None

    async def watch(self, into: LevelWatch, done: asyncio.Event) -> None:
        """Sample memory, KV usage, power and the server's state until `done`."""
        # the first KV reading once a token has come back: before that the cache may still be idle
        next_kv = next_power = next_state = 0.0
        while True:
            if self.cancel.is_set():
                self.client.halt.set()
                raise Cancelled()
            now = time.perf_counter()
            try:
                available = read_mem_available()
                into.min_available = available if into.min_available is None else min(into.min_available, available)
            except OSError:
                pass
            if self.client.generating.is_set() and now >= next_kv:
                next_kv = now + KV_EVERY_S
                usage = await self.kv_usage()
                if usage is not None:
                    into.peak_kv = usage if into.peak_kv is None else max(into.peak_kv, usage)
            if self.power_ok and now >= next_power:
                next_power = now + POWER_EVERY_S
                watts = await asyncio.to_thread(gpu_power_w)
                if watts is None:
                    self.power_ok = False  # no NVML or no power reading: joules stay None
                else:
                    into.power.append((time.perf_counter(), watts))
            if self.target.state_path is not None and now >= next_state:
                next_state = now + STATE_EVERY_S
                self.check_state()
            if done.is_set():
                return
            asleep = time.perf_counter()
            try:
                await asyncio.wait_for(self.client.wake.wait(), MEM_EVERY_S)
            except TimeoutError:
                # woken late: this process was starved, and token timestamps may be late as much
                into.lag_s = max(into.lag_s, time.perf_counter() - asleep - MEM_EVERY_S)
            self.client.wake.clear()

    async def kv_usage(self) -> float | None:
        try:
            reply = await self.client.http.get("/metrics", timeout=5)
            if reply.status_code != 200:
                return None
            pct = kv_cache_usage_pct(parse_metrics(kv_lines(reply.text), time.monotonic()))
        except (httpx.HTTPError, MetricsError):
            return None
        return None if pct is None else pct / 100.0

    def check_state(self) -> None:
        """The supervisor's record: a server that exits or loses its guard ends the run."""
        assert self.target.state_path is not None
        try:
            record = st.read_state(self.target.state_path)
        except UserError:
            return  # a wrong-shaped file: the supervisor rewrites it on its next save
        if record is None:
            return
        state = record.to_dict()
        if state.get("status") in ("exited", "stopping"):
            exit_ = state.get("exit") or {}
            why = "its memory guard stopped it" if exit_.get("reason") == "guard" or state.get("trip") else "it exited"
            raise ServerGone(f"the server on port {self.target.port} stopped mid-run: {why}")
        guard = state.get("guard") or {}
        if guard.get("armed") is False:
            raise ServerGone(f"the memory guard of the server on port {self.target.port} was disarmed mid-run")


def kv_lines(text: str) -> str:
    """Only the KV-usage gauge's lines: parsing all of vLLM's /metrics takes ~20 ms of this
    process's event loop, time in which token timestamps would be late."""
    return "\n".join(line for line in text.splitlines() if any(name in line[:64] for name in KV_USAGE)) + "\n"


def gpu_power_w() -> float | None:
    report = read_gpu(processes=False)
    if not report.available:
        return None
    watts = [g.power_w for g in report.gpus if g.power_w is not None]
    return sum(watts) if watts else None

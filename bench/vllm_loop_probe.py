"""`vllm bench serve` with stamps inside its own process: where does its TTFT's lateness come from?

    VLLM_PYTHON bench/vllm_loop_probe.py OUT.jsonl bench serve ARGS…   (run by bench/ttft_vs_vllm.py)

Runs vLLM's own `vllm bench serve` (its CLI main, unchanged) in vLLM's venv with four stamps per
request, written to OUT.jsonl as one line each (wall-clock seconds, so they compare with the
kernel's receive stamps of bench/ttft_vs_vllm.py's sniffer):
  start        vLLM's own start stamp (`st = time.perf_counter()` in
               vllm/benchmarks/lib/endpoint_request_func.py async_request_openai_completions)
  wake         when the event loop's epoll_wait returned with the first token's bytes ready
               (asyncio's selector, wrapped)
  feed         when aiohttp's protocol callback handed those bytes to the response's StreamReader
               (aiohttp.streams.StreamReader.feed_data, wrapped)
  ttft         vLLM's own figure (output.ttft), so its stamp is start + ttft
and, from /proc/self/task/TID/schedstat and status, how long the loop's thread sat runnable but not
running (run_delay) and how often it was switched out between start and feed. Only single-user runs
are matched request by request (one request in flight). PROBE_AUTOGROUP_NICE=N first sets the
scheduler autogroup's nice of its session (/proc/self/autogroup; root): with sched_autogroup_enabled,
`nice` alone only orders the threads of one session against each other.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import aiohttp.streams
from vllm.benchmarks.lib import endpoint_request_func as erf

OUT = open(sys.argv[1], "w")  # noqa: SIM115  (open for the life of the process)
if os.environ.get("PROBE_AUTOGROUP_NICE"):  # the whole session's weight (nice alone acts inside it only)
    with open("/proc/self/autogroup", "w") as f:
        f.write(os.environ["PROBE_AUTOGROUP_NICE"])
sys.argv = ["vllm", *sys.argv[2:]]
WALL = time.time() - time.perf_counter()  # perf_counter → wall clock (drift over a run: microseconds)
state: dict = {"feed": None}


def task_stats() -> tuple[float, int, int]:
    """(run_delay s, voluntary, involuntary context switches) of this thread."""
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        delay = int(f.read().split()[1]) / 1e9
    with open(f"/proc/self/task/{tid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return delay, int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


_feed = aiohttp.streams.StreamReader.feed_data


def feed_data(self, data, *args, **kwargs):  # type: ignore[no-untyped-def]
    if state["feed"] is None and state.get("open") and b'"choices":[{' in bytes(data):
        state["feed"] = time.perf_counter()
        state["wake_at_feed"] = state.get("wake")
        state["stats_at_feed"] = task_stats()
    return _feed(self, data, *args, **kwargs)


aiohttp.streams.StreamReader.feed_data = feed_data  # type: ignore[method-assign]


def watch_selector() -> None:
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    if getattr(selector, "_probed", False):
        return
    select = selector.select

    def stamped(timeout=None):  # type: ignore[no-untyped-def]
        events = select(timeout)
        if events:
            state["wake"] = time.perf_counter()
        return events

    selector.select = stamped
    selector._probed = True


_completions = erf.ASYNC_REQUEST_FUNCS["openai"]


async def probed(request_func_input, session, pbar=None):  # type: ignore[no-untyped-def]
    watch_selector()
    state.update(feed=None, open=True, wake_at_feed=None)
    before = task_stats()
    output = await _completions(request_func_input=request_func_input, session=session, pbar=pbar)
    state["open"] = False
    after = state.get("stats_at_feed") or before
    row = {
        "start": WALL + output.start_time,
        "ttft": output.ttft,
        "feed": WALL + state["feed"] if state["feed"] is not None else None,
        "wake": WALL + state["wake_at_feed"] if state["wake_at_feed"] is not None else None,
        "run_delay": after[0] - before[0],
        "voluntary": after[1] - before[1],
        "involuntary": after[2] - before[2],
    }
    OUT.write(json.dumps(row) + "\n")
    OUT.flush()
    return output


erf.ASYNC_REQUEST_FUNCS["openai"] = probed

from vllm.entrypoints.cli.main import main  # noqa: E402  (after the patches)

main()

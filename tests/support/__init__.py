"""Helpers shared by every test folder: where things are, and how to wait for them."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"  # real data, copied in with its SOURCES.md
PROCS = Path(__file__).resolve().parent / "procs"  # small programs the tests run as processes

T = TypeVar("T")

# What `sparktui fit --json` and FitResult.to_dict() promise scripts, at the least.
FIT_JSON_KEYS = frozenset(
    {"weights_bytes", "kv_bytes_per_token", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "verdict"}
    | {"predicted_decode_tok_s", "predicted_ttft_s"}
    | {"reasons", "budget", "suggestions"}
)


# What `sparktui bench --json` promises for each concurrency level (issue 12's contract).
BENCH_RUN_KEYS = frozenset(
    {"users", "ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s", "decode_tok_s_per_user", "aggregate_tok_s"}
    | {"requests", "errors", "min_mem_available_gib", "peak_kv_usage", "joules_per_token"}
)

# `vllm bench serve`'s result JSON names for what a level measures (vllm/benchmarks/serve.py,
# 0.32.0: benchmark's result dict and process_one_metric with the default --metric-percentiles 99)
VLLM_BENCH_NAMES = {"duration", "completed", "failed", "max_concurrency", "total_input_tokens", "total_output_tokens"}
VLLM_BENCH_NAMES |= {"request_throughput", "output_throughput", "total_token_throughput"}
VLLM_BENCH_NAMES |= {f"{k}_{m}_ms" for k in ("mean", "median", "std", "p99") for m in ("ttft", "tpot", "itl", "e2el")}


def sweep_recorded_servers() -> None:
    """Kill, by recorded identity, every server tree and supervisor recorded in the current state
    dir: what a failing test leaves running (pid and start time are checked, so nothing else is
    signalled)."""
    import signal

    from sparktui.runtime.host import proc
    from sparktui.runtime.records import state as st
    from sparktui.runtime.records.protocol import ProtocolError

    # Only this state dir's own records: list_states() also finds this user's supervisors of other
    # state dirs by their sockets (another test run, or real servers on a developer's Spark).
    for path in sorted((st.state_dir() / "servers").glob("*.json")):
        try:
            state = st.read_state(path)
        except ProtocolError:
            continue  # a wrong-shaped file a test wrote on purpose
        if state is None:
            continue
        if state.tree:
            proc.sweep_orphans(state.tree.as_proc_record())
        sup = state.supervisor
        if sup.pid and sup.start_time is not None:
            proc.signal_process(proc.ProcessIdentity(sup.pid, sup.start_time), signal.SIGKILL)


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, what: str = "condition", interval: float = 0.02) -> T:
    """Poll until predicate() is truthy; return its value, or fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_file(path: Path, timeout: float = 10.0) -> str:
    """The text of a file once something has written to it."""
    return wait_for(lambda: path.exists() and path.read_text(), timeout, what=f"{path.name} to be written")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shm_held_by(pid: int) -> set[str]:
    """/dev/shm files the process holds open."""
    names: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return names
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/shm/"):
            names.add(target)
    return names


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (PID 1 here reaps slowly)."""
    from sparktui.runtime.host.proc import read_stat

    info = read_stat(pid)
    return info is not None and not info.dead


def hog_mib(mib: float) -> int:
    """A hog's size that lowers MemAvailable by `mib`: plus the free pages on the kernel's per-CPU
    lists, which MemAvailable leaves out and a new process takes first without moving it (up to
    2.4 GiB on the 2-CPU test box right after another test's teardown)."""
    from sparktui.runtime.host.memory import read_per_cpu_free

    return int(mib + read_per_cpu_free() / (1 << 20))

"""The route's servers, through the supervisor as `sparktui serve --detach` and `sparktui stop` use
it: each runs under its own detached supervisor with its guard, and carries the route's launch id,
so a stop names it and nothing else (a port can be taken again by someone's own server). Each
start takes the leak gate's baseline (guard/leakgate.py), so that after its stop the route can
wait until its memory came back before the next server starts.

Blocking calls: the front runs them in threads."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sparktui.core import pool
from sparktui.core.config import ServeConfig
from sparktui.core.machine import Machine, host_machine
from sparktui.core.profiles import Profile
from sparktui.errors import UserError
from sparktui.runtime.guard import leakgate
from sparktui.runtime.host.memory import read_memory
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.reservations import reservation_of
from sparktui.runtime.server import client, launcher
from sparktui.runtime.server import preflight as server_preflight


@dataclass
class Started:
    port: int
    launch_id: str
    supervisor_pid: int
    baseline: leakgate.Baseline  # the machine before the launch, and the tree that ran
    start_s: float  # launch → ready


def _here(profile: Profile) -> Machine:
    sample = read_memory(psi=False)
    return host_machine(profile.machine, Machine.from_reading(sample.mem_total, sample.mem_available))


def need(profile: Profile, serve: ServeConfig) -> tuple[pool.Reservation, int]:
    """What the server would reserve of the pool, as its launch will record it (with
    --kv-cache-memory-bytes, from the fit's budget), and the pool's size."""
    mem = server_preflight.launch_meminfo()  # with the per-CPU free pages a swap's teardown parks
    return server_preflight.reservation_for(profile, serve, mem), pool.pool_bytes(_here(profile))


def others(launch_ids: set[str], profile: Profile) -> list[pool.Reservation]:
    """What the live servers the route did not start reserve (it never stops those)."""
    machine = _here(profile)
    return [
        reservation_of(s, machine) for s in st.list_states() if s.alive and s.running and s.launch_id not in launch_ids
    ]


def start(
    profile: Profile, serve: ServeConfig, launch_id: str, timeout_s: float, closing: threading.Event | None = None
) -> Started:
    """Launch under a detached supervisor and wait until vLLM answers (status "running").
    A refusal or a failed start is a UserError saying why (the supervisor's own words);
    `closing` set (the route ends) stops it and gives up."""
    baseline = leakgate.take_baseline()
    began = time.monotonic()
    state = launcher.launch(profile, serve, launch_id=launch_id)
    deadline = began + timeout_s
    while True:
        try:
            now = st.read_state(st.state_path(serve.port))
        except pr.ProtocolError:
            now = None
        if now is not None and now.launch_id == launch_id:
            if now.status == "running":
                tree = now.tree
                members = [(m[0], m[1]) for m in tree.members] if tree else []
                baseline = leakgate.with_tree(baseline, members, tree.cgroup if tree else None)
                return Started(serve.port, launch_id, state.supervisor.pid, baseline, time.monotonic() - began)
            if now.status == "exited":
                exit_ = now.exit
                why = (exit_.message or exit_.reason) if exit_ else "it exited"
                raise UserError(f"{profile.name} did not start on port {serve.port}: {why}; see {now.log_path}")
        if closing is not None and closing.is_set():
            stop(serve.port, launch_id)
            raise UserError(f"{profile.name}: the route is shutting down; its start was stopped")
        if time.monotonic() > deadline:
            stop(serve.port, launch_id)
            raise UserError(f"{profile.name} was not ready on port {serve.port} within {timeout_s:.0f} s; stopped it")
        time.sleep(0.05)


def memory_back(started: Started | None, pool_bytes: int, final: pr.StateRecord | None = None) -> str | None:
    """After its stop: None once the memory it used came back, otherwise how much did not and what
    holds it. The supervisor's own leak gate has judged when the end record carries its verdict;
    otherwise (a server that ended before the stop, an older supervisor) the route waits here."""
    leak = final.exit.leak if final is not None and final.exit is not None else None
    if leak is not None:
        return leak.summary() if leak.leaked else None
    if started is None:
        return None
    back = leakgate.wait_for_memory_back(started.baseline, pool_bytes=pool_bytes)
    return None if back.back else back.record(started.baseline).summary()


def running(port: int, launch_id: str) -> bool:
    """The route's server on `port` (that launch) still runs, as its supervisor records it."""
    try:
        state = st.read_state(st.state_path(port))
    except pr.ProtocolError:
        return False
    return state is not None and state.launch_id == launch_id and st.with_liveness(state).alive


def stop(port: int, launch_id: str) -> pr.StateRecord | None:
    """Stop the route's server on `port` (its whole tree); None when it had already ended."""
    try:
        return client.stop(port, only_id=launch_id)
    except UserError:
        state = st.read_state(st.state_path(port))
        if state is not None and state.launch_id == launch_id and state.alive:
            raise  # ours, alive, and it would not stop: say so
        return None  # not running any more, or no longer ours

"""Show the servers sparktui runs: profile, port, condition, memory figures from the log, load."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from sparktui.commands.argtypes import tcp_port
from sparktui.core.terminal_text import printable

if TYPE_CHECKING:
    from sparktui.runtime.records.protocol import StateRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, help="only the server on this port")
    parser.add_argument("--json", action="store_true", help="print the recorded state as JSON")
    parser.add_argument("--all", action="store_true", help="include servers that have exited")


def _line(state: StateRecord) -> str:
    from sparktui.core.vllm_events import PHASES, phase_label
    from sparktui.runtime.records.protocol import Condition, condition_of, guard_stop_words

    condition = condition_of(state)
    by_guard = guard_stop_words(state)
    parts = [f"{state.port}", f"{state.profile}", condition.text()]  # the panel's words (ConditionView.text)
    if condition.condition in (Condition.FAILED, Condition.LOST) and state.phase in PHASES[1:-1]:
        parts.append(f"during {phase_label(state.phase)}")  # how far the start got (the panel's phase strip)
    parts.append(f"{state.url}")
    if state.summary and state.summary.kv_cache_tokens:
        parts.append(f"kv {state.summary.kv_cache_tokens:,} tokens")
    if state.metrics and state.metrics.running is not None:
        parts.append(f"running {state.metrics.running:.0f} waiting {state.metrics.waiting or 0:.0f}")
    guard = state.guard
    if guard.stale and guard.beat_doubt and state.alive and state.running:
        parts.append(f"guard UNKNOWN: its heartbeat is not trusted ({guard.beat_doubt})")
    elif guard.stale and state.alive and state.running:
        parts.append(f"guard NOT SAMPLING for {guard.sample_age_s:.0f} s (its supervisor is stopped or starved)")
    elif guard.last and state.alive:
        parts.append(f"guard {guard.state} (MemAvailable {guard.last.available_gib:.1f} GiB)")
    elif state.running or state.status == "lost":
        parts.append("NOT guarded" if not state.alive else f"guard {guard.state}")
    if state.reservation and (state.alive or state.status == "lost"):
        parts.append(f"reserves {state.reservation.bytes / 2**30:.1f} GiB")
    if state.containment and state.alive:
        parts.append(f"contained by {state.containment}")
    wedge = state.watch.wedge if state.watch is not None else None
    if wedge is not None and state.running and state.alive:
        if wedge.state == "wedged":
            since = time.strftime("%H:%M:%S", time.localtime(wedge.since)) if wedge.since else "?"
            parts.append(f"WEDGED since {since} ({wedge.evidence})")
        elif wedge.state == "suspect":
            parts.append(f"suspect: no progress for {wedge.stalled_s:.0f} s, probing")
    exit_ = state.exit
    if exit_ and by_guard:
        # vLLM's error after the guard's SIGTERM is the stop's consequence: the ended line says so
        parts.append(f"exit: guard ({by_guard})")
    elif exit_:
        parts.append(f"exit: {exit_.reason}")
        if exit_.failure:
            parts.append(f"({exit_.failure.kind}: {exit_.failure.message})")
    if exit_ and exit_.breaker:
        parts.append(f"— {exit_.breaker.reason}")
    return "  ".join(parts)


def ended_text(state: StateRecord) -> str | None:
    from sparktui.runtime.records.protocol import how_it_ended

    return how_it_ended(state)


def _guard_news(state: StateRecord) -> list[str]:
    """What the kernel tripwire saw and did, and memory that did not come back after the end."""
    out = []
    tripped_on = state.trip.kernel_line if state.trip is not None else None
    if tripped_on:
        out.append(f"guard stopped it on the kernel log (NVIDIA driver out of memory): {tripped_on}")
    kernel = state.guard.kernel
    if kernel is not None:
        for event in kernel.events:
            if event.kind == "xid":
                out.append(f"kernel log: Xid {event.xid} for pid {event.pid}: {event.line}")
            elif event.kind == "no_memory" and event.line != tripped_on:
                out.append(f"kernel log ({kernel.mode}): NVIDIA driver out of memory: {event.line}")
            elif event.kind not in ("xid", "no_memory"):  # recorded by another sparktui version
                out.append(f"kernel log ({kernel.mode}): {event.kind}: {event.line or ''}".rstrip(": "))
        if kernel.source is None and kernel.mode != "off" and state.alive:
            out.append(kernel.detail or "the guard cannot see driver errors")
    if state.guard.alert and state.alive:
        out.append("guard on alert: the engine stalls while MemAvailable falls (sampling every 10 ms, 1 s grace)")
    leak = state.exit.leak if state.exit is not None else None
    if leak is not None and leak.leaked:
        out.append(f"LEAKED: {leak.summary()}")
    return out


def _leak_fields(state: StateRecord) -> dict[str, object]:
    """`leaked_bytes` and `holders` at the top of a server's JSON once it ended (exit.leak has the rest)."""
    leak = state.exit.leak if state.exit is not None else None
    if leak is None:
        return {}
    return {"leaked_bytes": leak.leaked_bytes, "holders": [h.model_dump() for h in leak.holders]}


def say(line: str) -> None:
    print(printable(line))


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.records import state as st
    from sparktui.runtime.records.protocol import how_it_ended
    from sparktui.runtime.server import client

    problems: list[str] = []
    unreadable: list[StateRecord] = []
    ended_records: list[StateRecord] = []  # servers no longer running whose record is kept: how each ended
    if args.port is not None:
        states = [client.attach(args.port)]
    else:
        listed = st.list_states(problems, salvaged=True)
        # a record that does not read whole is named with its error below; if its supervisor still runs,
        # that is said too, so that "skipped … remove the file" never hides a running server
        unreadable = [s for s in listed if s.salvaged is not None]
        states = [s if not s.alive else client.attach(s.port) for s in listed if s.salvaged is None]
        if not args.all:
            ended_records = [s for s in states if not s.alive and not s.running and s.exit is not None]
            # Lost servers stay listed until relaunched: how they ended is news a person must see.
            states = [
                s
                for s in states
                if s.alive
                or s.status == "lost"
                or (s.exit is not None and s.exit.reason == "supervisor_died")
                or (s.exit is not None and s.exit.leak is not None and s.exit.leak.leaked)  # still news
            ]
    for problem in problems:
        print(printable(f"sparktui: warning: skipped {problem}"), file=sys.stderr)
    for part in unreadable if args.port is None else []:
        if part.alive:
            print(
                printable(
                    f"sparktui: warning: port {part.port}: its supervisor (pid {part.supervisor.pid}) still runs; "
                    f"keep the file: `sparktui stop --port {part.port}` (or kill) ends it from the record"
                ),
                file=sys.stderr,
            )
        elif part.status == "lost":
            print(
                printable(
                    f"sparktui: warning: port {part.port}: its supervisor is gone and its tree may still run; "
                    f"keep the file: `sparktui kill --port {part.port}` sweeps what it left"
                ),
                file=sys.stderr,
            )

    def read_nodes(port: int) -> list[dict[str, Any]]:
        # a cluster's nodes, for a live server only: the cluster room is not imported otherwise
        from sparktui.runtime.cluster.link import read_nodes as nodes_of

        return nodes_of(port)

    # How each port's last server ended, as long as its record is kept (one record per port: the last
    # end), after the running ones; a lost or leaking one is listed among them already.
    shown = {id(s) for s in states}
    ended_records = [s for s in ended_records if id(s) not in shown]
    if args.json:
        out = [
            {
                **s.to_dict(),
                "ended": how_it_ended(s),  # null while it runs; else the line the text prints
                **_leak_fields(s),
                **({"nodes": read_nodes(s.port)} if s.alive and read_nodes(s.port) else {}),
            }
            for s in [*states, *ended_records]
        ]
        print(json.dumps(out if args.port is None else out[0], indent=1, default=str))
        return 0
    if states:
        states = states + ended_records
    if not states:
        print("no server is running")
        for state in ended_records:
            say(f"  port {state.port} ({state.profile}): {how_it_ended(state)}")
        return 0
    for state in states:  # records are other processes' words: printed with control characters escaped
        say(_line(state))
        if state.status == "lost" and state.lost_reason:
            say(f"  LOST: {state.lost_reason}")
        elif state.exit and state.exit.reason == "supervisor_died" and state.exit.message:
            say(f"  lost: {state.exit.message}")
        for node in read_nodes(state.port) if state.alive else []:  # the head of a cluster: every node
            phase = f"/{node['phase']}" if node.get("phase") else ""
            ended = f" exit: {node['exit_reason']}" if node.get("exit_reason") else ""
            mem = f"  MemAvailable {node['available_gib']:.1f} GiB" if node.get("available_gib") is not None else ""
            say(f"  node {node['host']} (rank {node['rank']}): {node['status']}{phase}{ended}{mem}")
        if (how := ended_text(state)) is not None:
            say(f"  {how}")
        for line in _guard_news(state):
            say(f"  {line}")
        say(f"  log: {state.log_path}")
    return 0

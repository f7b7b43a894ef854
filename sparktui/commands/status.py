"""Show the servers sparktui runs: profile, port, phase, memory figures from the log, load."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="only the server on this port")
    parser.add_argument("--json", action="store_true", help="print the recorded state as JSON")
    parser.add_argument("--all", action="store_true", help="include servers that have exited")


def _line(state: dict[str, Any]) -> str:
    summary = state.get("summary") or {}
    metrics = state.get("metrics") or {}
    parts = [
        f"{state.get('port')}",
        f"{state.get('profile')}",
        f"{state.get('status')}/{state.get('phase')}",
        f"{state.get('url')}",
    ]
    if summary.get("kv_cache_tokens"):
        parts.append(f"kv {summary['kv_cache_tokens']:,} tokens")
    if metrics.get("running") is not None:
        parts.append(f"running {metrics['running']:.0f} waiting {metrics.get('waiting', 0):.0f}")
    guard = state.get("guard") or {}
    if guard.get("last"):
        parts.append(f"guard {guard.get('state')} (MemAvailable {guard['last']['available_gib']:.1f} GiB)")
    watch = state.get("watch") or {}
    wedge = watch.get("wedge") or {}
    if wedge.get("state") == "wedged" and state.get("alive", True) and not state.get("exit"):
        since = time.strftime("%H:%M:%S", time.localtime(wedge["since"])) if wedge.get("since") else "?"
        parts.append(f"WEDGED since {since} ({wedge.get('evidence')})")
    elif wedge.get("state") == "suspect":
        parts.append(f"suspect: no progress for {wedge.get('stalled_s', 0):.0f} s, probing")
    exit_ = state.get("exit")
    if exit_:
        parts.append(f"exit: {exit_.get('reason')}")
        if exit_.get("failure"):
            parts.append(f"({exit_['failure']['kind']}: {exit_['failure']['message']})")
        if exit_.get("breaker"):
            parts.append(f"— {exit_['breaker']['reason']}")
    return "  ".join(parts)


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime import state as st
    from sparktui.runtime import supervisor

    if args.port is not None:
        states = [supervisor.attach(args.port)]
    else:
        states = [s if not s["alive"] else supervisor.attach(s["port"]) for s in st.list_states()]
        if not args.all:
            states = [s for s in states if s["alive"] or s.get("status") == "lost"]
    if args.json:
        print(json.dumps(states if args.port is None else states[0], indent=1, default=str))
        return 0
    if not states:
        print("no server is running")
        return 0
    for state in states:
        print(_line(state))
        print(f"  log: {state.get('log_path')}")
    return 0

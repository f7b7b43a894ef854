"""Run vLLM from a profile under the memory guard: in the foreground (systemd-friendly: SIGTERM
stops the whole process tree), or with --detach in a new session that survives the terminal.
Any `vllm serve` flags after the profile override the profile's values."""

from __future__ import annotations

import argparse
import sys
from typing import Any

ACCEPTS_EXTRA_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", help="a profile name (see the TUI's profile list) or a path to a .toml profile")
    parser.add_argument(
        "--detach", action="store_true", help="run in the background; print where to find it and return"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="launch despite a refusal (utilization above 0.90 on unified memory, a failing fit)",
    )


def run(args: argparse.Namespace) -> int:
    from sparktui.core.profiles import load_profile
    from sparktui.runtime import supervisor

    profile = load_profile(args.profile)
    serve = supervisor.effective_serve(profile, args.extra)
    if profile.cluster is not None:
        return serve_cluster(profile, serve)
    if not args.detach:
        return supervisor.serve_foreground(profile, serve, force=args.force)
    state = supervisor.launch(profile, serve, force=args.force)
    for warning in state.preflight_warnings:
        print(f"sparktui: warning: {warning}", file=sys.stderr)
    vllm_pid = state.tree.pid if state.tree else "?"
    print(f"started {state.profile} on {state.url} (supervisor pid {state.supervisor.pid}, vLLM pid {vllm_pid})")
    print(f"log: {state.log_path}")
    print(f"follow with `sparktui status --port {state.port}`; stop with `sparktui stop --port {state.port}`")
    return 0


def serve_cluster(profile: Any, serve: Any) -> int:
    """A profile with [cluster]: every node is checked over SSH; the launch itself is not built yet."""
    from sparktui.errors import UserError
    from sparktui.runtime import cluster

    reports = cluster.preflight(profile, serve)
    for r in reports:
        print(
            f"node {r.host}: ready to launch (vLLM {r.vllm_version}, MemAvailable {(r.mem_available or 0) / 2**30:.1f} GiB)"
        )
    raise UserError(
        f"profile {profile.name}: launching a [cluster] profile over {len(reports)} nodes is not built yet "
        "(preflight passed on every node); remove [cluster] to serve on this machine alone"
    )

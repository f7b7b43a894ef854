"""Run vLLM from a profile under the memory guard: in the foreground (systemd-friendly: SIGTERM
stops the whole process tree), or with --detach in a new session that survives the terminal.
Any `vllm serve` flags after the profile override the profile's values."""

from __future__ import annotations

import argparse
import sys

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

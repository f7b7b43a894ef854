"""Stop a server: SIGTERM to its whole process tree, SIGKILL after the grace period; /dev/shm cleaned."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktui.runtime.protocol import StateRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="the server's port (needed when several run)")


def describe_exit(state: StateRecord) -> str:
    """`profile on port N: exited (reason, gone after X s)` for stop and kill."""
    exit_info = state.exit
    gone_after = ((exit_info.stop if exit_info else None) or {}).get("gone_after_s")
    detail = exit_info.reason if exit_info else "?"
    if gone_after is not None:
        detail += f", gone after {gone_after:.2f} s"
    return f"{state.profile} on port {state.port}: {state.status} ({detail})"


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime import supervisor

    print(describe_exit(supervisor.stop(args.port)))
    return 0

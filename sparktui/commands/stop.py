"""Stop a server: SIGTERM to its whole process tree, SIGKILL after the grace period; /dev/shm cleaned."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="the server's port (needed when several run)")


def describe_exit(state: dict[str, Any]) -> str:
    """`profile on port N: exited (reason, gone after X s)` for stop and kill."""
    exit_info = state.get("exit") or {}
    gone_after = (exit_info.get("stop") or {}).get("gone_after_s")
    detail = exit_info.get("reason") or "?"
    if gone_after is not None:
        detail += f", gone after {gone_after:.2f} s"
    return f"{state.get('profile')} on port {state.get('port')}: {state.get('status')} ({detail})"


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime import supervisor

    print(describe_exit(supervisor.stop(args.port)))
    return 0

"""Stop a server: SIGTERM to its whole process tree, SIGKILL after the grace period; /dev/shm cleaned."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="the server's port (needed when several run)")


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime import supervisor

    state = supervisor.stop(args.port)
    report = (state.get("exit") or {}).get("stop") or {}
    print(f"{state.get('profile')} on port {state.get('port')}: {state.get('status')}"
          f" ({(state.get('exit') or {}).get('reason')}"
          + (f", gone after {report['gone_after_s']:.2f} s" if report.get("gone_after_s") is not None else "")
          + ")")
    return 0

"""Stream this node's rank state to a cluster's head (run by the head over SSH, one long session
per worker): a JSON line now and at every change of status, phase, exit reason or the guard's
MemAvailable; it ends when the rank ended or when its stdin closes (the head hung up)."""

from __future__ import annotations

import argparse

from sparktui.commands.argtypes import launch_id, tcp_port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, required=True, help="the cluster's serving port (its state here)")
    parser.add_argument(
        "--launch-id",
        type=launch_id,
        metavar="ID",
        help="the head's launch id: the head's word that it serves goes only to the rank launched with it",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from sparktui.errors import UserError
    from sparktui.runtime.cluster.node_stream import stream_state

    if sys.stdin is None:  # fd 0 closed: the hang-up it waits for could never be seen (and fd 0 gets reused)
        raise UserError(
            "node-watch: standard input is closed; the head runs it over ssh with stdin open (never ssh -n)"
        )
    return stream_state(args.port, launch_id=args.launch_id)

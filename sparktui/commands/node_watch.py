"""Stream this node's rank state to a cluster's head (run by the head over SSH, one long session
per worker): a JSON line now and at every change of status, phase, exit reason or the guard's
MemAvailable; it ends when the rank ended or when its stdin closes (the head hung up)."""

from __future__ import annotations

import argparse

from sparktui.commands.argtypes import tcp_port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, required=True, help="the cluster's serving port (its state here)")


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.node_stream import stream_state

    return stream_state(args.port)

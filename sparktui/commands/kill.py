"""Kill a server at once: SIGKILL to its whole process tree; /dev/shm cleaned."""

from __future__ import annotations

import argparse

from sparktui.commands.stop import add_arguments, stop_one_or_all  # noqa: F401  (same options)


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.server import client

    return stop_one_or_all(args, client.kill)

"""Kill a server at once: SIGKILL to its whole process tree; /dev/shm cleaned."""

from __future__ import annotations

import argparse

from sparktui.commands.stop import add_arguments, describe_exit, for_all, only_id_of  # noqa: F401  (same options)


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.server import client

    only_id = only_id_of(args)
    if args.all:
        return for_all(client.kill)
    print(describe_exit(client.kill(args.port, only_id=only_id)))
    return 0

"""Stop a server: SIGTERM to its whole process tree, SIGKILL after the grace period; /dev/shm cleaned."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparktui.commands.argtypes import launch_id, tcp_port
from sparktui.core.terminal_text import printable

if TYPE_CHECKING:
    from sparktui.runtime.records.protocol import StateRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--port", type=tcp_port, help="the server's port (needed when several run)")
    which.add_argument("--all", action="store_true", help="every server sparktui runs on this machine")
    parser.add_argument(
        "--only-id",
        type=launch_id,
        metavar="ID",
        help="only if the server on --port was launched with this id (a cluster's head names its workers' "
        "ranks so); another server there is left alone (exit 2)",
    )


def only_id_of(args: argparse.Namespace) -> str | None:
    """--only-id, which names one server: it needs --port (with --all or no port it would pick)."""
    from sparktui.errors import UserError

    if args.only_id is not None and args.port is None:
        raise UserError(
            f"--only-id {args.only_id}: give the server's --port too (e.g. --port 8000 --only-id {args.only_id})"
        )
    only: str | None = args.only_id
    return only


def describe_exit(state: StateRecord) -> str:
    """`profile on port N: exited (reason, gone after X s)` for stop and kill."""
    exit_info = state.exit
    stop = exit_info.stop if exit_info else None
    gone_after = stop.gone_after_s if stop else None
    detail = exit_info.reason if exit_info else "?"
    if gone_after is not None:
        detail += f", gone after {gone_after:.2f} s"
    name = state.profile or "server"  # a record recovered from another version may hold no profile
    return printable(f"{name} on port {state.port}: {state.status} ({detail})")


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.server import client

    return stop_one_or_all(args, client.stop)


def stop_one_or_all(args: argparse.Namespace, action: Callable[..., StateRecord]) -> int:
    """stop's and kill's run: no server where one was asked for is nothing to stop, exit 0, as with
    --all (what a user who wants it stopped has got); several servers without --port, or --only-id
    naming another launch, stay bad input (exit 2)."""
    from sparktui.runtime.records.state import NoLiveServer

    only_id = only_id_of(args)
    if args.all:
        return for_all(action)
    try:
        state = action(args.port, only_id=only_id)
    except NoLiveServer as exc:
        print(printable(f"nothing to stop: {exc}"))
        return 0
    print(describe_exit(state))
    return 0


def for_all(action: Callable[[int], StateRecord]) -> int:
    """Stop or kill every live (or lost) server, each in its own thread so that one slow grace
    period does not hold the others; 1 if any could not be stopped."""
    from concurrent.futures import ThreadPoolExecutor

    from sparktui.errors import UserError
    from sparktui.runtime.records import state as st

    ports = st.ports_to_end()  # each once; a record that does not read whole too (client.stop)
    if not ports:
        print("nothing to stop: no server is running")
        return 0

    def one(port: int) -> tuple[int, str | None, StateRecord | None]:
        try:
            return port, None, action(port)
        except UserError as exc:
            return port, str(exc), None

    failed = 0
    with ThreadPoolExecutor(max_workers=len(ports)) as pool:
        for port, error, state in pool.map(one, ports):
            if state is not None:
                print(describe_exit(state))
            else:
                failed += 1
                said = error if (error or "").startswith(f"port {port}:") else f"port {port}: {error}"
                print(printable(f"sparktui: {said}"), file=sys.stderr)
    return 1 if failed else 0

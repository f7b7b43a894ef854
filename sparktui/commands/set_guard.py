"""Change the memory guard of a running server, live: move its lines, arm or disarm it.

The lines you set win: a current line that would fall out of order with them (warn ≥ term ≥
kill) is turned off, with a note. Lines you set that conflict with each other are refused.
Example: sparktui set-guard --port 8000 --kill-below 8 --term-below 12
"""

from __future__ import annotations

import argparse

from sparktui.commands.argtypes import tcp_port
from sparktui.commands.guard import add_kernel_argument, add_line_arguments, given_lines
from sparktui.core.terminal_text import printable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, help="the server's port (needed when several run)")
    add_line_arguments(parser, defaults=False)
    add_kernel_argument(parser, default=None)
    parser.add_argument(
        "--force",
        action="store_true",
        help="accept a term or kill line above MemAvailable now (the guard stops the server at once)",
    )
    armed = parser.add_mutually_exclusive_group()
    armed.add_argument("--arm", dest="armed", action="store_const", const=True, help="arm the guard")
    armed.add_argument("--disarm", dest="armed", action="store_const", const=False, help="disarm the guard")


def _gib(value: float | None) -> str:
    return "off" if value is None else f"{value:g} GiB"


def run(args: argparse.Namespace) -> int:
    from sparktui.errors import UserError
    from sparktui.runtime.server import client

    lines = given_lines(args)
    if not lines and args.armed is None and args.kernel is None:
        raise UserError(
            "set-guard: nothing to change; give --warn-below, --term-below, --kill-below, --kernel, --arm or --disarm"
        )
    state, notes = client.change_guard(
        args.port, armed=args.armed, lines=lines or None, kernel=args.kernel, force=args.force
    )
    for note in notes:
        print(printable(f"sparktui: note: {note}"))
    g = state.guard
    print(
        f"port {state.port}: guard {'armed' if g.armed else 'DISARMED'}; warn {_gib(g.lines.warn_below_gib)}, "
        f"term {_gib(g.lines.term_below_gib)}, kill {_gib(g.lines.kill_below_gib)}"
        + (f"; kernel tripwire {g.kernel.mode}" if g.kernel is not None else "")
    )
    return 0

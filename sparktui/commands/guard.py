"""Run a command in its own process group under the memory guard.

When MemAvailable falls below the term line, the command's whole process tree gets SIGTERM
(SIGKILL after the grace period); below the kill line, or when the fall rate says the kill line
will be crossed before the next sample, SIGKILL at once. Descendants that left the group are
killed too, and /dev/shm files the tree left are removed. Ctrl-C or SIGTERM to sparktui stops
the whole tree as well (a second Ctrl-C kills it at once). A line set to "off" is not watched.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktui.core.guard_lines import GuardLines, LineName
    from sparktui.runtime.guard.guard import Guard
    from sparktui.runtime.host.proc import ProcessTree

# Exit status when the guard stopped the command (else: the command's own status, or 128+N when
# it died of signal N, as shells report it). Chosen to collide with nothing sparktui or a shell
# uses (1-2 errors, 126/127 exec failures, 128+N signals).
EXIT_GUARD_TRIPPED = 97

EPILOG = f"""exit status: the command's own; 128+N if it died of signal N (or sparktui got signal N);
{EXIT_GUARD_TRIPPED} when the guard stopped it (the trip report is on stderr, JSON with --json);
2 for bad options. Example: sparktui guard --kill-below 4 -- vllm serve Qwen/Qwen3-8B"""


def _gib_or_off(text: str) -> float | None:
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GiB as a number (e.g. 3.5) or 'off', got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of GiB >= 0 (or 'off'), got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text!r}")
    return value


def add_line_arguments(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """--warn-below/--term-below/--kill-below; a line left out stays absent from the namespace, so
    the lines a user sets can win over the defaults (or the current lines)."""
    from sparktui.core.guard_lines import DEFAULT_KILL_GIB, DEFAULT_TERM_GIB, DEFAULT_WARN_GIB

    for flag, default, what in (
        ("--warn-below", DEFAULT_WARN_GIB, "warn when MemAvailable falls below this"),
        ("--term-below", DEFAULT_TERM_GIB, "SIGTERM the tree below this, SIGKILL after the grace period"),
        ("--kill-below", DEFAULT_KILL_GIB, "SIGKILL the tree at once below this"),
    ):
        parser.add_argument(
            flag,
            type=_gib_or_off,
            default=argparse.SUPPRESS,
            metavar="GIB",
            help=f"{what} ('off' turns it off" + (f"; default {default:g})" if defaults else ")"),
        )


def add_kernel_argument(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """--kernel stop|warn|off: the kernel tripwire (the NVIDIA driver's NV_ERR_NO_MEMORY lines)."""
    from sparktui.core.kernel_log import KERNEL_MODES

    parser.add_argument(
        "--kernel",
        choices=KERNEL_MODES,
        default=default,
        help="on a new NVIDIA driver out-of-memory line (NVRM NV_ERR_NO_MEMORY) in the kernel log: stop the "
        "tree at once, warn, or do not read the kernel log" + (f" (default {default})" if default else ""),
    )


def given_lines(args: argparse.Namespace) -> dict[LineName, float | None]:
    """The lines set on the command line, by GuardLines' field names."""
    names: dict[str, LineName] = {
        "warn_below": "warn_below_gib",
        "term_below": "term_below_gib",
        "kill_below": "kill_below_gib",
    }
    return {field: getattr(args, flag) for flag, field in names.items() if hasattr(args, flag)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from sparktui.core.guard_lines import DEFAULT_GRACE_S

    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_line_arguments(parser, defaults=True)
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_S:g})",
    )
    add_kernel_argument(parser, default="stop")
    parser.add_argument("--json", action="store_true", help="events and the trip report as JSON lines on stderr")
    parser.add_argument("--log", metavar="FILE", help="send the command's output to FILE instead of the terminal")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _status(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def run(args: argparse.Namespace) -> int:
    from sparktui.core.guard_lines import GuardLines, resolve_lines
    from sparktui.core.kernel_log import KernelEvent
    from sparktui.errors import UserError
    from sparktui.runtime.guard.guard import Guard
    from sparktui.runtime.guard.kernel_watch import access
    from sparktui.runtime.host.proc import spawn
    from sparktui.runtime.server.reaper import Reaper

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UserError("guard needs a command to run: sparktui guard [OPTIONS] -- COMMAND [ARGS...]")
    if args.log is not None and (Path(args.log).is_dir() or not Path(args.log).parent.is_dir()):
        raise UserError(
            f"--log {args.log}: expected a file to write the command's output to"
            + (", got a directory" if Path(args.log).is_dir() else ", but its folder does not exist")
        )
    try:
        lines, notes = resolve_lines(given_lines(args), GuardLines(grace_s=args.grace), what="default")
    except UserError as exc:
        raise UserError(f"{exc} (change one of the lines you set, or set one to 'off')") from None

    def emit(event: str, text: str, data: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps({"event": event, **data}), file=sys.stderr, flush=True)
        else:
            print(f"sparktui guard: {text}", file=sys.stderr, flush=True)

    for note in notes:
        emit("note", f"note: {note}", {"note": note})
    if args.kernel != "off" and (seen := access()).source is None:
        emit("note", f"warning: {seen.text()}", {"kernel_log": None, "why": seen.detail})

    def on_warn(d) -> None:
        gib = d.available / 2**30
        emit(
            "warn",
            f"warning: MemAvailable {gib:.2f} GiB is below the warn line {lines.warn_below_gib:g} GiB",
            {"mem_available_gib": round(gib, 3), "warn_below_gib": lines.warn_below_gib},
        )

    # Handlers first: a signal that arrives while the command starts must still stop its tree.
    received: list[int] = []
    guard = None

    def on_signal(signum, _frame) -> None:
        # No locks in here (Event.set() would deadlock if the signal interrupted Event.wait()).
        received.append(signum)
        if guard is not None:
            guard.request_stop()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    # The reaper kills the tree (its cgroup, or its recorded processes) if we die, even by SIGKILL.
    reaper = Reaper()
    try:
        tree = spawn(argv, args.log, inherit_stdin=True)
        reaper.tell(tree.to_record())

        def on_kernel(event: KernelEvent) -> None:
            emit("kernel", f"kernel log: {event.line}", event.to_dict())

        guard = Guard(
            tree,
            lines,
            on_warn=on_warn,
            on_track=lambda: reaper.tell(tree.to_record()),
            kernel=args.kernel,
            on_kernel=on_kernel,
        )
        return _watch(args, guard, tree, lines, received, emit)
    finally:
        reaper.dismiss()


def _watch(
    args: argparse.Namespace,
    guard: Guard,
    tree: ProcessTree,
    lines: GuardLines,
    received: list[int],
    emit: Callable[[str, str, dict[str, Any]], None],
) -> int:
    if received:
        guard.request_stop()
    report = guard.run()
    if report is not None:
        if args.json:
            print(json.dumps({"event": "trip", **report.to_dict()}), file=sys.stderr, flush=True)
        else:
            print(report.summary(), file=sys.stderr, flush=True)
        return EXIT_GUARD_TRIPPED
    if received:
        name = signal.Signals(received[0]).name
        # A second Ctrl-C/SIGTERM while stopping: SIGKILL now.
        stop = tree.stop(lines.grace_s, on_poll=lambda: len(received) > 1)
        emit(
            "interrupted",
            f"got {name}: stopped the command's process tree"
            + (f" (gone after {stop.gone_after_s:.2f} s)" if stop.gone_after_s is not None else " (NOT gone)"),
            {"signal": name, "stop": stop.to_dict()},
        )
        return 128 + received[0]
    rc = tree.returncode()
    if tree.refresh() or not tree.is_gone():
        # The command exited but left processes of its tree behind (they would hold memory unguarded).
        stop = tree.stop(lines.grace_s)
        emit(
            "leftovers",
            f"the command exited and left {len(stop.signals)} signal target(s) of its tree: stopped them",
            {"stop": stop.to_dict()},
        )
    elif (swept := tree.kill()).shm_removed:  # nothing left to signal: the /dev/shm files it was seen holding
        emit(
            "leftovers",
            f"the command left {len(swept.shm_removed)} file(s) in /dev/shm that nothing holds: removed them",
            {"stop": swept.to_dict()},
        )
    tree.release()
    return _status(rc if rc is not None else 0)

"""`sparktui` and its subcommands: thin over core and runtime.

Subcommand modules are imported only when used, so `sparktui fit` never pays for Textual.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui import __version__
from sparktui.core.terminal_text import printable
from sparktui.errors import UserError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

# name -> (module under sparktui.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "ui": ("ui", "open the control panel (the default)"),
    "fit": ("fit", "will this vllm serve configuration start, and what KV cache will it get"),
    "advise": ("advise", "which variant of a model to run: fit, predicted speed and longest context of each"),
    "inspect-log": ("inspect_log", "summarise a vLLM log and explain a failed start"),
    "serve": ("serve", "run vLLM from a profile under the memory guard (foreground or --detach)"),
    "status": ("status", "show the servers sparktui runs"),
    "stop": ("stop", "stop a server and its whole process tree"),
    "kill": ("kill", "kill a server's whole process tree at once"),
    "mem": ("mem", "show unified memory, pressure and the GPU (--watch to stream)"),
    "guard": ("guard", "run any command under the memory guard: sparktui guard -- COMMAND"),
    "postmortem": ("postmortem", "what happened when the machine went down while a server ran"),
    "set-guard": ("set_guard", "move the guard lines of a running server, or arm/disarm its guard"),
    "node-check": ("node_check", "what a cluster's head asks each node over SSH before a launch (JSON)"),
    "node-serve": ("node_serve", "start this node's rank of a cluster (run by the head over SSH)"),
    "node-watch": ("node_watch", "stream this node's rank state to its cluster's head (run by the head over SSH)"),
    "route": ("route", "several profiles behind one OpenAI-compatible port, swapped to fit (llama-swap-like)"),
    "metrics": ("metrics", "serve sparktui's memory, guard, wedge and KV figures to Prometheus (/metrics)"),
    "download": ("download", "download a model into the Hugging Face cache (progress, resume, disk check; --to NODE)"),
    "completion": ("completion", "print the tab-completion script for bash, zsh or fish"),
    "service": ("service", "run a profile as a systemd user service: install [--print], remove, status"),
    "profile": ("profile", "write a profile as a vLLM --config file, an eugr or sparkrun recipe; import one"),
    "bench": ("bench", "benchmark the running server: TTFT, tok/s per user and in all, how many users it holds"),
}


def build_parser(command: str | None = None, others: bool = True) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (None: every one), so a quick command
    never pays for the others' imports. The rest are listed by name and help only, or left out
    (`others=False`: argv names the command, so no other can be chosen or listed; their 21
    sub-parsers were ~5 ms of the panel's start)."""
    import argparse  # not for `sparktui [PROFILE]`: main opens the panel without it

    parser = argparse.ArgumentParser(
        prog="sparktui",
        description="Serve LLMs with vLLM on an NVIDIA DGX Spark: fit, launch, watch memory, guard.",
    )
    parser.add_argument("--version", action="version", version=f"sparktui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if command is not None and name != command:
            if others:
                sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"sparktui.commands.{module_name}")
        # the docstrings are laid out for the terminal (example lines, one per line): keep their breaks
        sub_parser = sub.add_parser(
            name, help=help_text, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def _names_a_profile(arg: str) -> bool:
    """A file, or the name of a shipped or user profile (by file name: core.profiles and pydantic
    are not imported before the panel's first frame)."""
    if arg.endswith(".toml") or os.path.isfile(arg):
        return True
    from sparktui.paths import user_profiles_dir
    from sparktui.resources import data_dir

    names = {f"{arg}{suffix}" for suffix in (".toml", ".yaml", ".yml")}
    for folder in (data_dir("profiles"), user_profiles_dir()):
        try:
            if names & set(os.listdir(folder)):
                return True
        except OSError:
            continue
    return False


def main(argv: list[str] | None = None) -> int:
    from sparktui.paths import make_files_private

    make_files_private()  # files 0600, folders 0700, whatever the umask
    if "_ARGCOMPLETE" in os.environ:  # a Tab in a shell with `sparktui completion SHELL` loaded
        from sparktui.commands.completion import complete

        complete(build_parser())  # answers and exits
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (
        argv[0] not in COMMANDS
        and ((argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")) or _names_a_profile(argv[0]))
    ):
        argv = ["ui", *argv]  # `sparktui`, `sparktui --theme X`, `sparktui PROFILE`
    if len(argv) <= 2 and argv[0] == "ui" and not any(a.startswith("-") for a in argv[1:]):
        # `sparktui [ui] [PROFILE]`, what a user types most: the panel, with nothing for argparse
        # to do (its import and the parser were ~7 ms of the panel's start, bench/tui.py)
        from sparktui.commands.ui import open_panel

        return _run(lambda: open_panel(argv[1] if len(argv) == 2 else None))
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return _neither_command_nor_profile(argv[0])
    named = argv[0] in COMMANDS
    parser = build_parser(argv[0] if named else "ui", others=not named)
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        args = parser.parse_args(["ui"])
        extra = []
    module = args._module
    if extra and not getattr(module, "ACCEPTS_EXTRA_ARGS", False):
        # the command's own usage, not the top level's (`sparktui [-h] [--version] COMMAND ...`)
        commands = vars(next(a for a in parser._actions if a.dest == "command"))["choices"]  # name -> sub-parser
        commands[argv[0] if named else "ui"].error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    if args.command not in ("postmortem", "ui"):  # the panel would cover it: left for the next command
        _report_postmortems()
    return _run(lambda: module.run(args))


def _run(command: Callable[[], int | None]) -> int:
    """Run a command; a UserError is said on stderr (not a traceback) and becomes the exit status."""
    try:
        return int(command() or 0)
    except UserError as exc:
        print(printable(f"sparktui: {exc}", keep_newlines=True), file=sys.stderr)  # it may quote a reply or a file
        if error_file := os.environ.get("SPARKTUI_ERROR_FILE"):  # a detached supervisor: launch() reads it
            try:
                Path(error_file).write_text(str(exc))
            except OSError:
                pass
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: the reader left, which is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _may_have_postmortems() -> bool:
    """A first look with json alone: is there a flight header from another boot with neither a
    clean stop nor a post-mortem? Only then is the watch room imported to check properly (its
    import is a tenth of a second every quick command would pay; bench/cli_startup.py)."""
    from sparktui.files import read_json
    from sparktui.paths import state_dir

    try:
        folder = state_dir() / "flight"
        boot = os.environ.get("SPARKTUI_BOOT_ID") or Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        paths = [p for p in folder.glob("*.json") if not p.name.startswith("postmortem-")]
    except (OSError, UserError):
        return True  # let the real check say what is wrong
    for path in paths:
        try:  # read_json: a FIFO there hangs no command, '[[[…' is no RecursionError
            header = read_json(path, 1 << 20, "flight header")  # flight.RECORD_FILE_LIMIT (not imported: slow)
        except (OSError, UserError):
            return True
        if not isinstance(header, dict):
            return True
        if not header.get("clean_stop") and not header.get("postmortem") and header.get("boot_id") != boot:
            return True
    return False


def _neither_command_nor_profile(word: str) -> int:
    """`sparktui WORD` where WORD is no command and no profile: say both, and what is close."""
    import difflib

    from sparktui.core.profiles import list_profiles

    profiles = sorted(ref.name for ref in list_profiles())
    close = difflib.get_close_matches(word, [*COMMANDS, *profiles], n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    print(
        printable(
            f"sparktui: {word!r} is neither a command nor a profile.{hint}\n"
            f"  commands: {', '.join(COMMANDS)}\n"
            f"  profiles: {', '.join(profiles) or 'none'} (or a path to a .toml file)",
            keep_newlines=True,
        ),
        file=sys.stderr,
    )
    return 2


def _report_postmortems() -> None:
    """Once after a reboot that ended a running server: say what happened (on stderr)."""
    if not _may_have_postmortems():
        return
    try:
        from sparktui.runtime.records import state as st
        from sparktui.runtime.watch import check_after_reboot

        found = check_after_reboot(st.state_dir())
    except UserError:  # a state dir it cannot use: the command says so if it needs one
        return
    except Exception as exc:  # a broken flight record must never stop the command asked for
        print(f"sparktui: could not check for a post-mortem: {exc}", file=sys.stderr)
        return
    for pm in found:
        print(pm.render(), file=sys.stderr)
        print("sparktui: shown once; `sparktui postmortem` shows it again", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())

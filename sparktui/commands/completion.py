"""Tab completion for bash, zsh and fish (argcomplete): subcommands, their options, profile names
and the ports of running servers.

  eval "$(sparktui completion bash)"              # in ~/.bashrc
  eval "$(sparktui completion zsh)"               # in ~/.zshrc
  sparktui completion fish | source               # in ~/.config/fish/config.fish

The script asks `sparktui` itself at each Tab (argcomplete's protocol: _ARGCOMPLETE and COMP_LINE in
the environment); cli.main answers before anything else runs, from the same argparse parser.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to write the completion script for")


def run(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["sparktui"], shell=args.shell))
    return 0


def profile_names(**_: Any) -> list[str]:
    from sparktui.core.profiles import list_profiles

    try:
        return [ref.name for ref in list_profiles()]
    except Exception:  # a completion never fails the shell
        return []


def running_ports(**_: Any) -> list[str]:
    from sparktui.runtime.records import state as st

    try:
        return [str(s.port) for s in st.list_states() if s.alive]
    except Exception:
        return []


# Commands that take a profile among their extra arguments (parsed by the command itself): for
# completion only, they get a positional to complete it.
PROFILE_FIRST = ("fit",)


def attach_completers(parser: argparse.ArgumentParser) -> None:
    """Profile names for every `profile` argument, running ports for every --port, in all subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name in PROFILE_FIRST and not any(a.dest == "profile" for a in sub._actions):
                    sub.add_argument("profile", nargs="?", help=argparse.SUPPRESS)
                attach_completers(sub)
        elif action.dest == "profile" and not action.option_strings:
            action.completer = profile_names  # type: ignore[attr-defined]
        elif "--port" in action.option_strings:
            action.completer = running_ports  # type: ignore[attr-defined]


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer one Tab from the shell and exit (argcomplete writes the candidates where the shell reads)."""
    import argcomplete

    attach_completers(parser)
    argcomplete.autocomplete(parser)

"""argparse types the subcommands share: a bad value is refused by argparse itself (exit 2, one
line naming the flag, what was expected)."""

from __future__ import annotations

import argparse


def tcp_port(text: str) -> int:
    """A TCP port, 1 to 65535 (a bad one would otherwise reach bind() and end in a traceback)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return value


def launch_id(text: str) -> str:
    """A launch id (runtime/records/launch_id.py): a token, never a word the remote shell or a file name
    could read as something else."""
    from sparktui.runtime.records.launch_id import EXPECTED, is_launch_id

    if not is_launch_id(text):
        raise argparse.ArgumentTypeError(f"expected a launch id ({EXPECTED}), got {text!r}")
    return text

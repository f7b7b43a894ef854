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

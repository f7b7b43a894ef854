"""A launch id: a random token a cluster's head gives every supervisor it starts (its own and each
worker's), recorded in that supervisor's state. A stop or kill that names it (`--only-id`) acts on
that supervisor only: a port on a worker can be held by another server by the time the head stops
its rank (the rank died, someone started their own server there), and that server is not the head's
to stop. A pid can be reused and a port taken again; the id is never given twice.

No heavy imports here: the CLI's argument types read PATTERN at every start.
"""

from __future__ import annotations

import re
import secrets

PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
ENV = "SPARKTUI_LAUNCH_ID"  # launch() → its detached supervisor child (read once, then dropped)
EXPECTED = "1 to 64 letters, digits, '-' or '_'"


def new_launch_id() -> str:
    return secrets.token_hex(8)


def is_launch_id(text: str) -> bool:
    return PATTERN.fullmatch(text) is not None


def not_this_launch(port: int, pid: int, recorded: str | None, wanted: str) -> str:
    """Why a stop, kill or cluster-ready that names launch `wanted` was refused."""
    theirs = f"launch id {recorded}" if recorded else "no launch id"
    return (
        f"--only-id {wanted}: the server on port {port} is another one (supervisor pid {pid}, {theirs}); "
        "nothing was done to it"
    )

"""Provenance: which processes sparktui started, proven without trusting a record.

A state record names pids, start times and a cgroup. Pid + start time proves that a process is
the one that was recorded, not that sparktui started it: a damaged or forged record can name the
user's shell, pid 1 or another user's process with its true start time, or a cgroup that holds
them. So every tree sparktui spawns carries a mark, a random token in its environment
(TREE_MARK_ENV), inherited by all it starts, written in its record and in its cgroup's name
(a digest of it). A tree rebuilt from a record signals only the processes whose
/proc/PID/environ holds that record's mark (readable only by their own user and root) and what
they started, and kills only a cgroup named for that mark; everything else it names is refused.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from sparktui.errors import UserError

TREE_MARK_ENV = "SPARKTUI_TREE_MARK"
MARK_PATTERN = re.compile(r"[0-9a-f]{32}")
# /proc/PID/environ is at most what exec took (ARG_MAX-bound); more is not an environment we made
ENVIRON_LIMIT = 8 << 20


def new_mark() -> str:
    return secrets.token_hex(16)


def valid_mark(mark: object) -> str | None:
    """The mark when it has the shape sparktui gives marks (anything else proves nothing)."""
    return mark if isinstance(mark, str) and MARK_PATTERN.fullmatch(mark) else None


def scope_tag(mark: str) -> str:
    """What a tree's cgroup name holds of its mark (a digest: cgroup paths are world-readable)."""
    return hashlib.sha256(mark.encode()).hexdigest()[:12]


def carries_mark(pid: int, mark: str) -> bool:
    """The process's initial environment holds `mark` (False when unreadable: another user's)."""
    return mark in marks_in(environ_of(pid))


def owner_of(pid: int) -> str:
    """`user id N` of a process, for a refusal that names it."""
    try:
        return f"user id {os.stat(f'/proc/{pid}').st_uid}"
    except OSError:
        return "an unknown user"


def scope_refusal(path_text: str, mark: str | None) -> str | None:
    """Why the cgroup a record names is not that tree's own scope (None: it is, or it is gone).
    Its own: a `sparktui-…-<tag>-<pid>-<n>` directory on a cgroup2 mount, owned by us."""
    from sparktui.runtime.host.containment import PREFIX, cgroup2_mounts

    path = Path(path_text)
    try:
        info = path.lstat()
    except OSError:
        return None  # gone: nothing to kill there
    parts = path.name.rsplit("-", 3)
    if mark is None:
        return "the record has no tree mark to prove it is sparktui's"
    if not path.name.startswith(PREFIX) or len(parts) != 4 or parts[1] != scope_tag(mark):
        return "not the cgroup sparktui made for this record's tree"
    real = path.resolve()
    if not any(real.is_relative_to(m) and real != m for m in cgroup2_mounts()):
        return "not a cgroup (no cgroup2 mount holds it)"
    if info.st_uid != os.getuid():
        return f"owned by user id {info.st_uid}, not by you"
    return None


def marks_in(environ: bytes) -> set[str]:
    """The tree marks an environment (/proc/PID/environ's bytes) holds."""
    prefix = f"{TREE_MARK_ENV}=".encode()
    found = (
        valid_mark(e[len(prefix) :].decode(errors="replace")) for e in environ.split(b"\0") if e.startswith(prefix)
    )
    return {mark for mark in found if mark}


def environ_of(pid: int) -> bytes:
    """A process's initial environment (b"" when unreadable: another user's, or gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read(ENVIRON_LIMIT)
    except OSError:
        return b""


class Refused(UserError):
    """A record named processes (or a cgroup) that sparktui cannot prove it started: they were left
    alone; the message says which and why."""


def refused_message(port: int, record: str, refused: list[str], done: str) -> str:
    """What a stop or kill refused to signal, why, what it did instead, and what to do."""
    return (
        f"port {port}: {record} names what sparktui did not start, and it was left alone (nothing was "
        f"signalled there): {'; '.join(refused)}. {done}The record was left as it was: if it is damaged "
        "or not yours, look at it and remove it once nothing of yours runs on that port"
    )

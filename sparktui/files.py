"""Reading a small file someone named (a profile, a state record): never a hang on a FIFO or a
device, never minutes on a file far larger than such a file can be."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from sparktui.errors import UserError


def describe_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """A regular file open for reading (for a file read in part: a safetensors header); UserError
    naming the file and what it is instead (a FIFO, a device, a folder, a symlink loop).
    FileNotFoundError passes through."""
    where = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{where}: a loop of symbolic links, not a {what}; point it at a real file") from None
        raise UserError(f"{where}: cannot read the {what} ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UserError(f"{where}: {describe_kind(mode)}, not a {what}; give a regular file")
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UserError naming the file, what it
    is instead (a FIFO, a device, a symlink loop) or its size against the limit. FileNotFoundError
    passes through (callers say what a missing file means to them)."""
    where = os.fspath(path)
    with open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise UserError(f"{where}: {size:,} bytes, larger than a {what} can be (limit {limit:,} bytes)")
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while we read
        raise UserError(f"{where}: larger than a {what} can be (limit {limit:,} bytes)")
    return data


def is_special(path: Path) -> str | None:
    """What `path` is when it exists but is no regular file (None otherwise), without opening it."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return "a loop of symbolic links" if exc.errno == errno.ELOOP else None
    return None if stat.S_ISREG(mode) else describe_kind(mode)

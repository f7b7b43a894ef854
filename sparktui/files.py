"""Reading a small file someone named (a profile, a state record): never a hang on a FIFO or a
device, never minutes on a file far larger than such a file can be."""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

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


class Untrusted(UserError):
    """A file sparktui wrote for itself that another user owns or may write: not read."""


def own_file_problem(info: os.stat_result) -> str | None:
    """Why a file sparktui wrote for itself cannot be trusted (None: it can): another user owns it
    (only ours or root's), or other users may write it (sparktui writes its files 0600)."""
    if info.st_uid not in (os.getuid(), 0):
        return f"owned by user id {info.st_uid}, not by you (uid {os.getuid()}) or root"
    if info.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o}; sparktui writes 0600)"
    return None


def _folder_problem(folder: str | os.PathLike[str], setting: str = "SPARKTUI_STATE_DIR") -> tuple[str, str] | None:
    """(what is wrong, the fix) when a folder sparktui made for itself (0700) is not its alone:
    another user owns it, or other users may write in it and so put or replace files there."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    if info.st_uid not in (os.getuid(), 0):
        problem = f"owned by user id {info.st_uid}, not by you (uid {os.getuid()}) or root"
    elif info.st_mode & 0o022:
        problem = f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o}; sparktui makes it 0700)"
    else:
        return None
    fix = (
        f"if nobody else should write there, `chmod 700 {os.fspath(folder)}` and look at what is in it"
        if info.st_uid == os.getuid()
        else f"it is not yours to fix: point {setting} at a folder of your own"
    )
    return problem, fix


def own_folder_refusal(folder: str | os.PathLike[str], what: str, setting: str = "SPARKTUI_STATE_DIR") -> str | None:
    """Why the files in a folder sparktui made for itself (0700: the state records') are not
    trusted as its `what`s (None: they are, or the folder is gone): another user owns it, or other
    users may write in it and so put or replace files there. In words, with the fix (`setting`:
    the variable that moves that folder)."""
    if (found := _folder_problem(folder, setting)) is None:
        return None
    problem, fix = found
    return f"{os.fspath(folder)}: {problem}, so no {what} in it is trusted (any may not be what sparktui wrote); {fix}"


class Warnings:
    """The warnings of this process about state sparktui reads but does not trust, each once (by
    its key), in the order said: the CLI has them on stderr, the panel (whose stderr is not shown)
    as notices from `subscribe`. Thread-safe: the panel reads state from worker threads, several
    times a second."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # reentrant: a listener that warns in turn does not deadlock
        self._keys: set[str] = set()
        self._said: list[str] = []
        self._listeners: list[Callable[[str], object]] = []

    def say(self, text: str, key: str | None = None) -> bool:
        """Keep `text` (and print it on stderr) unless `key` (default: the text) was said already.
        True when it is new."""
        with self._lock:
            key = text if key is None else key
            if key in self._keys:
                return False
            self._keys.add(key)
            self._said.append(text)
            self._tell(text)
            return True

    def tell(self, text: str) -> None:
        """Print `text` on stderr and give it to the listeners now, however often it was said: a
        warning about one action (a stop, a kill), which the next such action may earn again.
        Not kept for a later listener: it was about that action."""
        with self._lock:
            self._tell(text)

    def _tell(self, text: str) -> None:
        print(f"sparktui: warning: {text}", file=sys.stderr)
        for listener in self._listeners:  # under the lock: each listener sees them in order, once
            listener(text)

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._keys

    def said(self) -> list[str]:
        with self._lock:
            return list(self._said)

    def subscribe(self, listener: Callable[[str], object]) -> Callable[[], None]:
        """`listener` is given every warning said so far, then each new one as it is said (from the
        thread that says it; it must not block). Returns the call that stops it."""
        with self._lock:
            for text in self._said:
                listener(text)
            self._listeners.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return stop


WARNINGS = Warnings()


def warn(text: str, key: str | None = None) -> str | None:
    """Say `text` once a process (Warnings.say): the warning as printed, or None when said already."""
    return f"sparktui: warning: {text}" if WARNINGS.say(text, key) else None


def warn_shared_folder(folder: str | os.PathLike[str], what: str) -> str | None:
    """For records that only feed a display (flight headers, routes shown, cluster nodes, bench
    history): when their folder is not sparktui's alone (as own_folder_refusal judges it), a
    warning naming it, what is wrong and the fix, once a process (Warnings: stderr and the panel);
    the records are still shown. Returns the warning (None: the folder is ours alone, or was
    warned of already)."""
    where = os.fspath(folder)
    if WARNINGS.has(where) or (found := _folder_problem(folder)) is None:  # the panel reads them often
        return None
    problem, fix = found
    return warn(f"{where}: {problem}, so the {what}s shown from it may not be what sparktui wrote; {fix}", key=where)


def warn_untrusted(exc: Untrusted, then: str) -> str | None:
    """One warning a process (Warnings: stderr and the panel) for a file sparktui wrote for itself
    that it does not trust (open_regular's `own` refusal): `exc` says which and why, `then` what is
    done instead. Returns the warning (None: said already)."""
    return warn(f"{exc}; {then}")


def open_regular(
    path: str | os.PathLike[str], what: str, *, own: bool = False, setting: str = "SPARKTUI_STATE_DIR"
) -> BinaryIO:
    """A regular file open for reading (for a file read in part: a safetensors header); UserError
    naming the file and what it is instead (a FIFO, a device, a folder, a symlink loop). With
    `own` (a file sparktui wrote for itself: a state record), also one another user owns or may
    write, or one in a folder another user owns or may write in (`setting`: the variable that moves
    that folder, for the fix). FileNotFoundError passes through."""
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
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UserError(f"{where}: {describe_kind(info.st_mode)}, not a {what}; give a regular file")
    if own and (refusal := own_folder_refusal(os.path.dirname(os.path.abspath(where)), what, setting)) is not None:
        os.close(fd)
        raise Untrusted(refusal)
    if own and (problem := own_file_problem(info)) is not None:
        os.close(fd)
        raise Untrusted(
            f"{where}: {problem}, so it may not be what sparktui wrote and is not trusted as a {what}; "
            "look at it, and remove it if it is not yours"
        )
    return os.fdopen(fd, "rb")


def read_regular(
    path: str | os.PathLike[str], limit: int, what: str, *, own: bool = False, setting: str = "SPARKTUI_STATE_DIR"
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UserError naming the file, what it
    is instead (a FIFO, a device, a symlink loop) or its size against the limit. FileNotFoundError
    passes through (callers say what a missing file means to them). `own`: as for open_regular."""
    where = os.fspath(path)
    with open_regular(path, what, own=own, setting=setting) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise UserError(f"{where}: {size:,} bytes, larger than a {what} can be (limit {limit:,} bytes)")
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while we read
        raise UserError(f"{where}: larger than a {what} can be (limit {limit:,} bytes)")
    return data


def read_json(path: str | os.PathLike[str], limit: int, what: str) -> Any:
    """The JSON value of a small regular file (read_regular's checks); UserError naming the file
    when it is not UTF-8 JSON, or JSON nested too deep for Python to read ('[[[…')."""
    data = read_regular(path, limit, what)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{os.fspath(path)}: not UTF-8 text, so not a {what}") from None
    except ValueError as exc:
        raise UserError(f"{os.fspath(path)}: not JSON ({exc}), so not a {what}") from None
    except RecursionError:
        raise UserError(f"{os.fspath(path)}: JSON nested too deep to read, so not a {what}") from None


def is_special(path: Path) -> str | None:
    """What `path` is when it exists but is no regular file (None otherwise), without opening it."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return "a loop of symbolic links" if exc.errno == errno.ELOOP else None
    return None if stat.S_ISREG(mode) else describe_kind(mode)

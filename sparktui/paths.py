"""Where sparktui keeps things, each location resolved here and nowhere else.

Every one can be moved with an environment variable (tests point them at temporary folders):

| variable             | holds                                                  | default (platformdirs)     |
|----------------------|--------------------------------------------------------|----------------------------|
| SPARKTUI_CONFIG_DIR  | config.toml (theme, keys) and profiles/ (yours)        | user_config_dir("sparktui")|
| SPARKTUI_STATE_DIR   | servers/ (state, sockets), logs/, supervisor/, bench/, | user_state_dir("sparktui") |
|                      | flight/ (flight records and post-mortems)              |                            |
| SPARKTUI_CACHE_DIR   | small model files fetched from the Hugging Face Hub    | user_cache_dir("sparktui") |
|                      | and the panel's parsed stylesheet (ui/css_cache.py)    |                            |
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import platformdirs

APP = "sparktui"
STATE_SUBDIRS = ("servers", "logs", "supervisor", "profiles")


def _from_env(variable: str, default: Callable[[str], str]) -> Path:
    override = os.environ.get(variable)
    return Path(override) if override else Path(default(APP))  # platformdirs only when needed: it is slow


def config_dir() -> Path:
    return _from_env("SPARKTUI_CONFIG_DIR", platformdirs.user_config_dir)


def settings_path() -> Path:
    return config_dir() / "config.toml"


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def state_dir() -> Path:
    """The state dir, made private (0700) with its sub-folders where it can be: it holds sockets
    and logs that may name secrets' environment variables.

    A folder that exists but cannot be changed (a read-only mount), or is gone under a parent that
    cannot be written, is still returned: readers (status, stop, kill, set-guard) reach the
    supervisors by their abstract sockets. Writers ask writable_state_dir(). A path that cannot be
    a folder at all (a file in the way) is a UserError."""
    path = state_dir_path()
    if path in _made_private and os.path.isdir(path / "servers"):
        return path  # made once in this process (the panel asks several times a second); still there
    try:
        _make_private(path)
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT):
            return path
        raise _unusable(path, exc) from None
    _made_private.add(path)
    return path


_made_private: set[Path] = set()  # state dirs state_dir() made private in this process


def state_dir_path() -> Path:
    """Where the state dir is, whether or not it exists (nothing is made)."""
    return _from_env("SPARKTUI_STATE_DIR", platformdirs.user_state_dir)


def writable_state_dir() -> Path:
    """The state dir for a writer (serve): a UserError naming it when it cannot be written."""
    path = state_dir_path()
    try:
        _make_private(path)
    except OSError as exc:
        raise _unusable(path, exc) from None
    if not os.access(path / "servers", os.W_OK):  # read-only mount: mkdir of existing folders succeeds
        raise _unusable(path, OSError(errno.EROFS, "not writable", str(path / "servers")))
    from sparktui.errors import UserError
    from sparktui.files import own_folder_refusal

    if (refusal := own_folder_refusal(path / "servers", "state record")) is not None:
        raise UserError(refusal)  # a launch would trust, sweep and set aside records others may have put there
    return path


def _make_private(path: Path) -> None:
    for sub in ("", *STATE_SUBDIRS):
        (path / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != 0o700:
        path.chmod(0o700)


def _unusable(path: Path, exc: OSError) -> Exception:
    from sparktui.errors import UserError

    return UserError(
        f"state dir {path}: cannot be made a writable folder ({exc.strerror}: {exc.filename}); "
        "fix its permissions, or point SPARKTUI_STATE_DIR at a folder you can write"
    )


def calibrations_path() -> Path:
    """What vLLM measured at start-ups on this box (core/calibration.py), a private JSON file."""
    return state_dir() / "calibrations.json"


def bench_history_path() -> Path:
    """JSON lines, one benchmark run each (runtime.bench.history.HistoryRecord documents the format)."""
    path = state_dir() / "bench"
    path.mkdir(mode=0o700, exist_ok=True)
    return path / "history.jsonl"


def cache_dir() -> Path:
    return _from_env("SPARKTUI_CACHE_DIR", platformdirs.user_cache_dir)


USER_UMASK_ENV = "SPARKTUI_USER_UMASK"  # the umask the user started sparktui with (octal)


def make_files_private() -> None:
    """Files 0600 and folders 0700 whatever the user's umask (state, logs, saved profiles may name
    secrets' variables): sparktui's own processes run with the umask's group and other bits set.
    The user's umask is kept for the commands sparktui runs (user_umask(), proc.spawn)."""
    old = os.umask(0o077)
    os.umask(old | 0o077)
    os.environ.setdefault(USER_UMASK_ENV, oct(old))


def user_umask() -> int:
    """The umask to give the commands sparktui runs (vLLM): the user's, not sparktui's own."""
    try:
        return int(os.environ.get(USER_UMASK_ENV, ""), 8) & 0o777
    except ValueError:
        current = os.umask(0)
        os.umask(current)
        return current

"""Where sparktui keeps things, each location resolved here and nowhere else.

Every one can be moved with an environment variable (tests point them at temporary folders):

| variable             | holds                                                  | default (platformdirs)     |
|----------------------|--------------------------------------------------------|----------------------------|
| SPARKTUI_CONFIG_DIR  | config.toml (theme, keys) and profiles/ (yours)        | user_config_dir("sparktui")|
| SPARKTUI_STATE_DIR   | servers/ (state, sockets), logs/, supervisor/, bench/, | user_state_dir("sparktui") |
|                      | flight/ (flight records and post-mortems)              |                            |
| SPARKTUI_CACHE_DIR   | small model files fetched from the Hugging Face Hub    | user_cache_dir("sparktui") |
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "sparktui"
STATE_SUBDIRS = ("servers", "logs", "supervisor", "profiles")


def _from_env(variable: str, default: str) -> Path:
    override = os.environ.get(variable)
    return Path(override) if override else Path(default)


def config_dir() -> Path:
    return _from_env("SPARKTUI_CONFIG_DIR", platformdirs.user_config_dir(APP))


def settings_path() -> Path:
    return config_dir() / "config.toml"


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def state_dir() -> Path:
    """The state dir, created private (0700) with its sub-folders: it holds sockets and logs that
    may name secrets' environment variables."""
    path = _from_env("SPARKTUI_STATE_DIR", platformdirs.user_state_dir(APP))
    try:
        for sub in ("", *STATE_SUBDIRS):
            (path / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        from sparktui.errors import UserError

        raise UserError(
            f"state dir {path}: cannot be made a writable folder ({exc.strerror}: {exc.filename}); "
            "fix its permissions, or point SPARKTUI_STATE_DIR at a folder you can write"
        ) from None
    return path


def bench_history_path() -> Path:
    """JSON lines, one benchmark run each (runtime.bench.HistoryRecord documents the format)."""
    path = state_dir() / "bench"
    path.mkdir(mode=0o700, exist_ok=True)
    return path / "history.jsonl"


def cache_dir() -> Path:
    return _from_env("SPARKTUI_CACHE_DIR", platformdirs.user_cache_dir(APP))

"""Where the shipped data (themes/, profiles/) lives: inside the installed package, or at the
top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder of shipped data called `name` ("themes" or "profiles")."""
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"sparktui's {name}/ folder is missing from {_PACKAGE_DIR}; reinstall sparktui")

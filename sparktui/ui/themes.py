"""Themes are data: TOML files turned into `textual.theme.Theme` objects.

A file that is not valid gives a `UserError` naming the file and the field, so the app can show
a notice and carry on with the themes that did load.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from sparktui.errors import UserError
from sparktui.resources import data_dir

DEFAULT_THEME = "sparktui-dark"

_COLOUR_FIELDS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_BOOL_FIELDS = ("dark", "ansi")
_FLOAT_FIELDS = ("luminosity_spread", "text_alpha")
_ALLOWED = {"name", "variables", *_COLOUR_FIELDS, *_BOOL_FIELDS, *_FLOAT_FIELDS}


def _check_colour(path: Path, field: str, value: object) -> str:
    if not isinstance(value, str):
        raise UserError(
            f'{path}: field {field!r} must be a colour string such as "#76B900" or "ansi_green", got {value!r}'
        )
    try:
        Color.parse(value)
    except ColorParseError:
        raise UserError(
            f'{path}: field {field!r} is not a colour: {value!r} (use "#RRGGBB", a colour name or "ansi_<name>")'
        ) from None
    return value


def parse_theme(data: dict[str, Any], path: Path) -> Theme:
    """Build a Theme from the parsed TOML of `path`; raise UserError naming the bad field."""
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise UserError(f"{path}: unknown field {unknown[0]!r}; expected one of {', '.join(sorted(_ALLOWED))}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{path}: field 'name' is missing; add name = \"my-theme\"")
    if "primary" not in data:
        raise UserError(f"{path}: field 'primary' is missing; every theme needs a primary colour")
    kwargs: dict[str, Any] = {"name": name}
    for field in _COLOUR_FIELDS:
        if field in data:
            kwargs[field] = _check_colour(path, field, data[field])
    for field in _BOOL_FIELDS:
        if field in data:
            if not isinstance(data[field], bool):
                raise UserError(f"{path}: field {field!r} must be true or false, got {data[field]!r}")
            kwargs[field] = data[field]
    for field in _FLOAT_FIELDS:
        if field in data:
            if isinstance(data[field], bool) or not isinstance(data[field], (int, float)):
                raise UserError(f"{path}: field {field!r} must be a number, got {data[field]!r}")
            kwargs[field] = float(data[field])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise UserError(f"{path}: field 'variables' must be a table ([variables]) of name = \"colour\"")
    for key, value in variables.items():
        if not isinstance(value, str):
            raise UserError(f"{path}: field 'variables.{key}' must be a string, got {value!r}")
        if not key.endswith("-text-style"):
            _check_colour(path, f"variables.{key}", value)
    kwargs["variables"] = dict(variables)
    return Theme(**kwargs)


def load_theme_file(path: Path) -> Theme:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the theme ({exc.strerror})") from None
    return parse_theme(data, path)


def theme_dirs(user_dir: Path | None) -> list[Path]:
    """Shipped themes first; a user theme of the same name replaces the shipped one."""
    dirs = [data_dir("themes")]
    if user_dir is not None and user_dir.is_dir():
        dirs.append(user_dir)
    return dirs


def load_themes(dirs: list[Path]) -> tuple[list[Theme], list[str]]:
    """All themes in `dirs` (*.toml), and one error message per file that failed."""
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    for folder in dirs:
        for path in sorted(folder.glob("*.toml")):
            try:
                theme = load_theme_file(path)
            except UserError as exc:
                errors.append(str(exc))
                continue
            themes[theme.name] = theme
    return list(themes.values()), errors


THEME_FIELDS = tuple(f.name for f in dataclasses.fields(Theme))

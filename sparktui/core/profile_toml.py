"""A profile file's TOML: read with tomllib (stdlib, quick), and kept as its text for tomlkit,
which reads it again only when the profile is saved (comments, order and unknown keys survive).
tomlkit's import and parse were ~7 ms of the panel's start, where nothing is saved."""

from __future__ import annotations

import re
import tomllib
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError

if TYPE_CHECKING:
    import tomlkit
    import tomlkit.exceptions


class TomlText:
    """The text a profile was read from, and tomlkit's document of it, made on first use and then
    edited in place (a profile and its `replace`d copies share it, as they shared the document)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._doc: tomlkit.TOMLDocument | None = None

    def document(self) -> tomlkit.TOMLDocument:
        if self._doc is None:
            import tomlkit

            self._doc = tomlkit.parse(self.text)
        return self._doc


def read_toml(text: str, where: str) -> dict[str, Any]:
    """The file's tables as plain values; a file tomllib refuses (or with a value outside every
    table) is read by tomlkit, whose words (line, column, what it expected) errors have said."""
    try:
        tables = tomllib.loads(text)
        if all(isinstance(value, dict) for value in tables.values()):
            return tables
    except tomllib.TOMLDecodeError:
        pass
    # tomlkit's reading then, as before: its errors, and the type names a section given as a value
    # is reported with ("expected a table [guard], got a String")
    import tomlkit
    import tomlkit.exceptions

    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UserError(f"{where}:{exc.line}:{exc.col}: not valid TOML: {_parse_problem(exc)}") from None
    except tomlkit.exceptions.KeyAlreadyPresent as exc:  # a key given twice in one table
        raise UserError(f"{where}: not valid TOML: {str(exc).rstrip('.')}; give each key once") from None


def first_comment(text: str) -> str:
    """The file's first comment line (a profile's description), if it opens with one."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped:
            return ""
    return ""


def _parse_problem(exc: tomlkit.exceptions.ParseError) -> str:
    message = str(exc)
    return re.sub(r"\s+at line \d+ col \d+$", "", message)

"""The user's own settings for the app (theme, key map), in
`sparktui.paths.settings_path()`: config.toml in the config dir (SPARKTUI_CONFIG_DIR overrides).

    theme = "sparktui-dark"
    [keys]            # binding id = "key[,key…]"; see the help screen (F1) for the ids
    launch = "ctrl+l"

Saved atomically (temp file + rename) with tomlkit, so a person's comments survive.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sparktui.atomic import atomic_write_text
from sparktui.errors import UserError
from sparktui.paths import settings_path


@dataclass
class Settings:
    theme: str | None = None
    keys: dict[str, str] = field(default_factory=dict)
    path: Path = field(default_factory=settings_path)


def load_settings(path: Path | None = None) -> Settings:
    """Read the settings; a missing file is the defaults, a bad one a UserError naming the field."""
    path = path or settings_path()
    if not path.exists():
        return Settings(path=path)
    try:
        # tomllib (stdlib, quick) to read at start-up; tomlkit only to write, keeping comments.
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the settings ({exc}); fix or delete the file") from None
    theme = doc.get("theme")
    if theme is not None and not isinstance(theme, str):
        raise UserError(f"{path}: field 'theme' must be a theme name in quotes, got {theme!r}")
    keys = doc.get("keys", {})
    if not isinstance(keys, dict):
        raise UserError(f"{path}: field 'keys' must be a table: [keys] then binding_id = \"key\"")
    for binding_id, key in keys.items():
        if not isinstance(key, str) or not key.strip():
            raise UserError(
                f'{path}: field \'keys.{binding_id}\' must be a key such as "ctrl+l" or "f5,ctrl+r", got {key!r}'
            )
    return Settings(theme=theme, keys=dict(keys), path=path)


def save_theme(theme: str, path: Path | None = None) -> Path:
    """Record the chosen theme, keeping the rest of the file (and its comments) as it was."""
    import tomlkit

    path = path or settings_path()
    doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    doc["theme"] = theme
    atomic_write_text(path, tomlkit.dumps(doc))
    return path

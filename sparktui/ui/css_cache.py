"""The stylesheet's parsed rules, kept from one start of the panel to the next.

Textual parses every stylesheet on every start: sparktui's own and the DEFAULT_CSS of each widget
class as it first mounts (Input, Select, Switch, Tabs, Footer…), about 16 ms of the first screen.
What it parses depends only on the CSS text, where it came from and the theme's variables, so the
rules it made for the first screen are kept in the cache folder and handed back to the next start's
stylesheet (Textual's own in-memory parse cache, `Stylesheet._parse_cache`): loading them takes
about 2 ms. A file is named by what the rules depend on beyond the CSS itself (Textual's and
Python's versions, the theme's variables); a text that changed is simply parsed again.

The file is read with pickle, so only when it is the user's own: written only here (0600, in
sparktui's 0700 cache folder), owned by this user, no symlink, neither it nor its folder writable by
anyone else. Anything wrong with it (missing, cut short, from another version, not the user's)
means parsing as before; the cache never decides what is drawn.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import textual

from sparktui.paths import cache_dir

if TYPE_CHECKING:
    from textual.css.stylesheet import Stylesheet

FORMAT = 1
MAX_ENTRIES = 64  # Textual's parse cache holds this many sources (Stylesheet._parse_cache)

Entries = dict[tuple[Any, ...], Any]  # Textual's parse-cache key -> the list of RuleSets


def _textual_files() -> bytes:
    """Textual's parser and style modules as installed (size and time): another Textual, other rules.
    (textual.__version__ reads the package metadata, itself a few ms.)"""
    from textual.css import model, parse, styles

    stats = [os.stat(module.__file__ or "") for module in (textual, parse, styles, model)]
    return repr([(st.st_size, st.st_mtime_ns) for st in stats]).encode()


def _own(st: os.stat_result) -> bool:
    """This user's, and writable by nobody else: a pickle from anywhere else could run code."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def cache_path(stylesheet: Stylesheet) -> Path:
    """The file for this stylesheet's variables (the theme), under this Textual and Python."""
    variables = repr(sorted(stylesheet._variables.items())).encode()
    python = "{}.{}".format(*sys.version_info[:2])
    key = zlib.crc32(_textual_files() + variables)
    return cache_dir() / f"css-rules-{FORMAT}-py{python}-{key:08x}.pickle"


class CssCache:
    """One start's use of the file: `seed` as the app is made, `first_screen` once it is full,
    `store` as the app ends (the first screen's rules, if the file lacked any)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.seeded: Entries = {}
        self.first: Entries = {}

    def seed(self, stylesheet: Stylesheet) -> None:
        """Hand the rules an earlier start stored to `stylesheet`'s parse cache. Call it after the
        theme's variables are set (setting them empties that cache)."""
        try:
            self.path = cache_path(stylesheet)
            with os.fdopen(os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
                if not (_own(os.fstat(handle.fileno())) and _own(os.stat(self.path.parent))):
                    return
                stored = pickle.load(handle)
            entries = {k: v for k, v in stored.items() if isinstance(k, tuple) and isinstance(v, list)}
            parse_cache = stylesheet._parse_cache  # Textual's own: another Textual may not have it
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError,
                IndexError):  # fmt: skip
            return
        self.seeded = dict(list(entries.items())[:MAX_ENTRIES])
        for key, rules in self.seeded.items():
            parse_cache[key] = rules

    def first_screen(self, stylesheet: Stylesheet) -> None:
        """What the first screen parsed (unless the theme changed since `seed`)."""
        cache = getattr(stylesheet, "_parse_cache", None)
        if cache is not None and self.path is not None and cache_path(stylesheet) == self.path:
            self.first = {key: cache.get(key) for key in list(cache.keys())}

    def store(self) -> bool:
        """Keep the first screen's rules with those the file held, when they add a source it lacks
        (a wider terminal's first screen mounts more widgets). True if written."""
        if self.path is None or self.first.keys() <= self.seeded.keys():
            return False
        keep = dict(list({**self.seeded, **self.first}.items())[-MAX_ENTRIES:])
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # 0600
            try:
                with os.fdopen(fd, "wb") as handle:
                    pickle.dump(keep, handle, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp_name, path)
            except BaseException:
                Path(tmp_name).unlink(missing_ok=True)
                raise
        except (OSError, pickle.PicklingError):
            return False  # a read-only or full cache folder: the next start parses, as without it
        self.seeded = keep
        return True

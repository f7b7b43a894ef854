"""Open the sparktui control panel (config editor with live fit, launch pane, memory gauge)."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `sparktui [PROFILE]` opens the panel without argparse (sparktui.cli.main)
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", nargs="?", help="profile to open (a TOML file or a shipped profile name)")
    parser.add_argument("--theme", help="theme name (overrides the saved choice)")


def run(args: argparse.Namespace) -> int:
    return open_panel(args.profile, args.theme)


def open_panel(profile: str | None = None, theme: str | None = None) -> int:
    # No collection passes until the first full screen: the imports and the first frame make
    # objects in the hundreds of thousands, and the collector walked them all again and again
    # (40-90 ms of the start). The app freezes what it has built and turns the collector back
    # on once the screen is full (SparkApp._start_background).
    gc.disable()
    try:
        from sparktui.ui.app import SparkApp

        SparkApp(profile=profile, theme_name=theme).run()
    finally:
        gc.enable()
    return 0

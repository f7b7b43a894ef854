"""Open the sparktui control panel (config editor with live fit, launch pane, memory gauge)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", nargs="?", help="profile to open (a TOML file or a shipped profile name)")
    parser.add_argument("--theme", help="theme name (overrides the saved choice)")


def run(args: argparse.Namespace) -> int:
    from sparktui.ui.app import SparkApp

    SparkApp(profile=args.profile, theme_name=args.theme).run()
    return 0

"""Serve several profiles behind one OpenAI-compatible port: a request for a model that is not up
starts it, after stopping what is in its way when it would not fit beside the servers running
and waiting until their memory came back. SIGTERM (a systemd stop) stops every server it started.

    sparktui route --listen 127.0.0.1:8080 qwen3-8b gemma-3-4b
    sparktui route --file route.toml          # [route]: models, groups, ttl-s, keep, preload …

The front's API key comes from SPARKTUI_ROUTE_API_KEY (the environment only); its servers get it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktui.core.route import RouteSettings


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds (a number ≥ 0), got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profiles to route (names or .toml paths)")
    parser.add_argument("--file", metavar="ROUTE.toml", help="a route file ([route]: listen, models, groups, options)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="where the front listens (default 127.0.0.1:8080)")
    parser.add_argument("--ttl", type=_seconds, metavar="S", help="stop a model idle this long (default: never)")
    parser.add_argument("--queue", type=_count, metavar="N", help="requests that may wait for a model (default 32)")
    parser.add_argument("--queue-timeout", type=_seconds, metavar="S", help="how long one may wait (default 300)")
    parser.add_argument("--evict", choices=("lru", "priority"), help="which running model goes first (default lru)")
    parser.add_argument("--force", action="store_true", help="listen beyond loopback without an API key")
    parser.add_argument("--show", action="store_true", help="show the routes running here (as the panel does)")
    parser.add_argument("--json", action="store_true", help="with --show: their records as JSON")


def settings_from(args: argparse.Namespace) -> RouteSettings:
    import dataclasses
    from pathlib import Path

    from sparktui.core import route
    from sparktui.core.profiles import load_profile
    from sparktui.errors import UserError

    if bool(args.file) == bool(args.profiles):
        raise UserError("sparktui route: give PROFILE… or --file ROUTE.toml (one of them)")
    changes: dict[str, Any] = {}
    if args.listen:  # checked before any profile is read
        changes["host"], changes["port"] = route.parse_listen(args.listen)
    if args.file:
        path = Path(args.file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--file {args.file}: cannot read it: {exc}") from None
        settings = route.parse_route(text, path)
    else:
        names = []
        for ref in args.profiles:
            serve = load_profile(ref).serve
            names.append((serve.served_model_name or serve.model, ref))
        settings = route.settings_for_profiles(names, ttl_s=args.ttl or 0.0)
    for flag, key in (("queue", "queue"), ("queue_timeout", "queue_timeout_s"), ("evict", "evict")):
        if getattr(args, flag) is not None:
            changes[key] = getattr(args, flag)
    if args.file and args.ttl is not None:
        changes["models"] = tuple(dataclasses.replace(m, ttl_s=args.ttl) for m in settings.models)
    return dataclasses.replace(settings, **changes)


def show(as_json: bool) -> int:
    """The routes running on this machine: the panel's view of them, as text or JSON."""
    import dataclasses
    import json
    import sys

    from sparktui.runtime.route.record import read_routes
    from sparktui.ui.translate import route_view

    problems: list[str] = []
    routes = read_routes(problems=problems)
    for problem in problems:
        print(f"sparktui: warning: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps([dataclasses.asdict(r) for r in routes], indent=1))
        return 0
    if not routes:
        print("no route is running")
    for r in map(route_view, routes):
        print(f"route {r.listen}: {r.queued} queued")
        for m in r.models:
            keep = " (kept)" if m.keep else ""
            print(f"  {m.name}{keep} on port {m.port}: {m.status}, {m.in_flight} in flight, {m.queued} waiting")
        if r.swapping is not None:
            print(f"  swapping to {r.swapping[0]}: {r.swapping[1]}")
        for s in r.swaps:
            print(f"  {s.line()}")
    return 0


def run(args: argparse.Namespace) -> int:
    import sys

    if args.show:
        return show(args.json)

    from sparktui.runtime.route.front import run_route

    settings = settings_from(args)
    for warning in settings.warnings:
        print(f"sparktui: warning: {warning}", file=sys.stderr)
    return run_route(settings, force=args.force)

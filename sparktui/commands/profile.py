"""Profiles in and out of the other Spark tools' formats.

  sparktui profile export PROFILE --format vllm-config|eugr|sparkrun [-o FILE]
  sparktui profile import RECIPE.yaml [--name NAME] [--nodes HEAD,WORKER…] [--model M]

export writes the profile as a `vllm serve --config` file, an eugr/spark-vllm-docker recipe or a
sparkrun recipe; reading that file back (`sparktui fit FILE.yaml`, or import) gives the same flags,
environment, container and cluster. The API key is never written (give it as VLLM_API_KEY).
import reads a recipe and saves it among your profiles as TOML; --nodes gives a recipe that runs on
several Sparks its [cluster] (eugr and sparkrun take the hosts from their own command line).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = sub.add_parser("export", help="write a profile as a vLLM --config file, an eugr or a sparkrun recipe")
    export.add_argument("profile", help="a profile name or a path to a .toml profile (or a recipe)")
    export.add_argument("--format", required=True, choices=("vllm-config", "eugr", "sparkrun"))
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    imp = sub.add_parser("import", help="read an eugr or sparkrun recipe or a vLLM --config file into a profile")
    imp.add_argument("recipe", help="the recipe's .yaml file")
    imp.add_argument("--name", help="the profile's name (default: the file's name)")
    imp.add_argument("--nodes", help="SSH hosts for a recipe that runs on several Sparks, the head first: a,b")
    imp.add_argument("--model", help="the model, for a vLLM config file that names none")
    imp.add_argument("--force", action="store_true", help="replace a profile of that name")


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return export(args)
    return import_recipe(args)


def export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sparktui.atomic import atomic_write_text
    from sparktui.core.profiles import load_profile
    from sparktui.core.recipes import ExportInput, export_recipe

    profile = load_profile(args.profile)
    item = ExportInput(
        name=profile.name,
        description=profile.description,
        serve=profile.serve,
        env=dict(profile.env),
        image=profile.runner.image if profile.runner.kind == "container" else None,
        cluster=profile.cluster,
    )
    text = export_recipe(item, args.format)
    if args.output:
        private = any("KEY" in k or "TOKEN" in k for k in profile.env)
        atomic_write_text(Path(args.output), text, private=private)
        print(f"wrote {args.output} ({args.format})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if profile.serve.api_key:
        print("sparktui: the API key is not written; give it as VLLM_API_KEY", file=sys.stderr)
    return 0


def import_recipe(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sparktui.core.profiles import profile_from_recipe, save_profile, user_profile_path
    from sparktui.errors import UserError

    path = Path(args.recipe).expanduser()
    if not path.is_file():
        raise UserError(f"{args.recipe}: no such recipe file")
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None
    profile = profile_from_recipe(path, model=args.model, nodes=nodes)
    for line in profile.recipe.lines() if profile.recipe else []:
        print(line, file=sys.stderr)
    name = args.name or path.stem
    target = user_profile_path(name)
    if target.exists() and not args.force:
        raise UserError(f"{target}: a profile of that name exists; give --name or --force")
    profile.name, profile.path, profile.recipe = name, None, None
    save_profile(profile, target)
    print(f"saved {target}")
    return 0

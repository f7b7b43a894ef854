"""Which variant of a model to run: every checkpoint of a family (local, or in sparktui's catalog)
fitted at your context and users, with its predicted speed, its longest context and the flags it
needs.

  sparktui advise FAMILY_OR_MODEL [--context N] [--users N] [--sort speed|context|users] [--json]

FAMILY_OR_MODEL is a name such as Qwen3.5-122B-A10B, llama-3.1-70b or qwen3.5 (every variant whose
name has all its words), or a local model folder (it and its sibling folders of the same family).
Nothing is downloaded: variants come from the local Hugging Face cache and the built-in catalog.
Exit status: 0 when at least one variant fits, 1 when none does, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sparktui.commands.fit import host_meminfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family", metavar="FAMILY_OR_MODEL", help="a model family, a model name, or a model folder")
    parser.add_argument("--context", type=int, default=32768, help="tokens per request (default 32768)")
    parser.add_argument("--users", type=int, default=1, help="requests served at once (default 1)")
    parser.add_argument("--sort", choices=("speed", "context", "users"), default="speed", help="best first by this")
    parser.add_argument("--machine", default="dgx-spark", help="dgx-spark (default), auto, or a GPU size in GiB")
    parser.add_argument(
        "--bandwidth",
        metavar="GBS",
        help="memory bandwidth in GB/s (default: $SPARKTUI_BANDWIDTH_GBS, or 273 on a DGX Spark)",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="the share of memory vLLM may claim (default 0.9, what sparktui launches with)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _local_repo_ids(env: dict[str, str] | None = None) -> list[str]:
    """Repo ids downloaded into the Hugging Face cache (models--org--name with a config)."""
    from sparktui.core.modelspec.lookup import hub_dirs

    found = []
    for hub in hub_dirs(env):
        try:
            entries = list(hub.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("models--") and entry.is_dir():
                found.append(entry.name.removeprefix("models--").replace("--", "/", 1))
    return sorted(set(found))


def candidates(query: str) -> list[str]:
    """Model names (or folders) of the family `query` names."""
    from sparktui.core.advisor import in_family
    from sparktui.core.modelspec import catalog_names
    from sparktui.core.modelspec.lookup import local_folder

    folder = local_folder(query)
    if folder is not None:
        siblings = [p for p in sorted(folder.parent.iterdir()) if p.is_dir() and (p / "config.json").is_file()]
        return [str(p) for p in siblings if in_family(folder.name, p.name)] or [str(Path(query).expanduser())]
    names = [*_local_repo_ids(), *catalog_names()]
    seen: list[str] = []
    for name in names:
        if in_family(query, name) and name.lower() not in (s.lower() for s in seen):
            seen.append(name)
    return seen


def _positive(value: int, flag: str) -> int:
    from sparktui.errors import UserError

    if value < 1:
        raise UserError(f"{flag}: got {value}; expected a whole number of at least 1")
    return value


def run(args: argparse.Namespace) -> int:
    from sparktui.core import speed as sp
    from sparktui.core.advisor import advise
    from sparktui.core.fit_speed import bandwidth_setting
    from sparktui.core.machine import host_for, machine_from_name
    from sparktui.core.modelspec import load_model_spec
    from sparktui.errors import UserError

    context = _positive(args.context, "--context")
    users = _positive(args.users, "--users")
    machine = machine_from_name(args.machine, host_for(args.machine, host_meminfo(args.machine)))
    hardware = sp.with_bandwidth(
        sp.hardware_for(machine.name, machine.mem_total, machine.unified),
        bandwidth_setting(args.bandwidth, os.environ),  # as `fit` reads it
        machine.name,
    )
    if not args.family.strip():
        raise UserError("FAMILY_OR_MODEL: got an empty name; give a model family such as llama-3.1-70b, or a folder")
    names = candidates(args.family)
    if not names:
        raise UserError(
            f"no model of the family {args.family!r} in the Hugging Face cache or sparktui's catalog; "
            "give a name such as Qwen3.5-122B-A10B or llama-3.1-70b (`sparktui fit --list-models` lists the catalog)"
        )
    specs, skipped = [], []
    for name in names:
        try:
            specs.append(load_model_spec(name))
        except UserError as exc:
            skipped.append(f"{name}: {exc}")
    advice = advise(
        specs, machine, hardware, context=context, users=users, sort=args.sort, utilization=args.gpu_memory_utilization
    )
    if args.json:
        out: dict[str, Any] = {
            "family": args.family,
            "machine": machine.describe(),
            "context": context,
            "users": users,
            "sort": args.sort,
            "variants": [a.to_dict() for a in advice],
            "skipped": skipped,
        }
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        print(render(args.family, machine.describe(), context, users, args.sort, advice, skipped))
    return 0 if any(a.fits for a in advice) else 1


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f}"


def render(family: str, machine: str, context: int, users: int, sort: str, advice: list, skipped: list[str]) -> str:
    who = "1 user" if users == 1 else f"{users} users"
    lines = [
        f"sparktui advise — {family} on {machine}: {context:,} tokens × {who}, best {sort} first",
        "",
        f"    {'model':<40} {'format':<22} {'GiB':>6}  {'fits':<4} {'tok/s/user':>10} {'TTFT':>7} "
        f"{'longest ctx':>12} {'users@ctx':>9}",
    ]
    for i, a in enumerate(advice, 1):
        rate = "-" if a.per_user_tok_s is None else f"{a.per_user_tok_s:.1f}"
        ttft = "-" if a.speed is None else f"{a.speed.ttft_s:.2f} s"
        lines.append(
            f"{i:>2}. {a.model[-40:]:<40} {a.format[:22]:<22} {_gib(a.weights_bytes):>6}  "
            f"{'yes' if a.fits else 'no':<4} {rate:>10} {ttft:>7} {a.longest_context_for_users:>12,} "
            f"{int(a.max_concurrency):>9}"
        )
    lines += ["", f"longest ctx: the longest context at which {who} fit at once; users@ctx: requests of {context:,}"]
    for i, a in enumerate(advice, 1):
        if not a.fits and a.reasons:
            lines.append(f"  {i}. {a.reasons[0]}")
    for i, a in enumerate(advice, 1):
        for model, method in a.drafters:  # options of their target, not variants to run on their own
            config = f'{{"method": "{method}", "model": "{model}", "num_speculative_tokens": N}}'
            lines.append(f"  {i}. an option: speculative decoding with {model}: --speculative-config '{config}'")
    best = next((a for a in advice if a.fits), None)
    if best is not None:
        lines += ["", f"run 1 ({best.model}):", "  sparktui fit -- vllm serve " + " ".join(best.apply_argv())]
        if best.flags:
            lines.append("  flags it suggests (take the ones you want):")
            lines += [f"    {' '.join(f.argv()):<44} {f.why}" for f in best.flags]
    if skipped:
        lines += ["", "skipped:"] + [f"  {s}" for s in skipped]
    return "\n".join(lines)

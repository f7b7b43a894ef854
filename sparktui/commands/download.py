"""Download a model into the Hugging Face cache, with a progress bar, resuming what an interrupted
download left; the free disk is checked first. --to copies it to a cluster node over SSH (rsync).

  sparktui download Qwen/Qwen3-32B                         # what vLLM loads (not original/, not *.bin beside safetensors)
  sparktui download nvidia/Qwen3.6-35B-A3B-NVFP4 --revision main --include '*.json' '*.safetensors'
  sparktui download Qwen/Qwen3-32B --to spark-b            # then copy it to the same cache there
  HF_HUB_OFFLINE=1 sparktui download Qwen/Qwen3-32B --to spark-b:/data/hf/hub   # copy what is cached

Exit status: 0 done, 2 refused (no room, no such repo or revision, offline with nothing cached).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", help="the model's Hugging Face repo id, e.g. Qwen/Qwen3-32B")
    parser.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    parser.add_argument(
        "--include",
        nargs="+",
        metavar="PATTERN",
        help="only files matching these globs; '*' for every file (default: what vLLM loads: the configs, "
        "the tokenizer and the weights in the one format vLLM picks, never original/ or a second format)",
    )
    parser.add_argument("--to", metavar="NODE[:PATH]", help="then copy it to NODE's Hugging Face cache over SSH")


def run(args: argparse.Namespace) -> int:
    import os

    from sparktui.errors import UserError
    from sparktui.runtime import download as dl
    from sparktui.runtime.hub import is_offline

    if is_offline(os.environ):
        if args.to is None:
            raise UserError(f"{args.repo}: offline (HF_HUB_OFFLINE=1): nothing can be downloaded")
        snapshot = dl.cached_snapshot(args.repo, args.revision)
        if snapshot is None:
            raise UserError(
                f"{args.repo}@{args.revision}: offline and not in the cache ({dl.hub_cache()}); nothing to copy"
            )
        print(f"sparktui: offline: copying the cached {snapshot}", file=sys.stderr)
    else:
        plan = dl.plan(args.repo, args.revision, args.include)
        print(f"sparktui: {plan.describe()}", file=sys.stderr, flush=True)
        if not plan.fits:
            raise UserError(
                f"{args.repo}: not enough disk: {plan.need_bytes / dl.GiB:.2f} GiB to fetch + "
                f"{plan.reserve_bytes / dl.GiB:.2f} GiB kept free, but {plan.free_bytes / dl.GiB:.2f} GiB free in "
                f"{plan.cache}; free some (`hf cache scan`, `hf cache delete`), narrow it with --include, or set "
                "HF_HUB_CACHE to a larger disk"
            )
        folder = dl.fetch(plan)
        print(f"downloaded {args.repo}@{args.revision} to {folder}")
    if args.to:
        print(f"sparktui: copying to {args.to} over SSH (rsync)", file=sys.stderr, flush=True)
        dl.copy_to(args.repo, args.to)
        print(f"copied {args.repo} to {args.to}")
    return 0

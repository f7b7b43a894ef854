"""What a cluster's head asks each node over SSH before a launch: the vLLM this node would run,
whether the given ports are free, its memory. Prints one JSON object (runtime/cluster.py reads it)."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executable", default="vllm", help="the profile's [runner] executable (default vllm)")
    parser.add_argument("--venv", help="the profile's [runner] venv")
    parser.add_argument("--ray", action="store_true", help="also say which Ray this node would run")
    parser.add_argument(
        "--port", type=int, action="append", default=[], help="a port that must be free here (repeatable)"
    )


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.cluster import node_check

    print(json.dumps(node_check(args.port, args.executable, args.venv, args.ray)))
    return 0

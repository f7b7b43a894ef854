"""What a cluster's head asks each node over SSH before a launch: the vLLM this node would run,
whether the given ports are free, its memory (and what its servers reserve, the model's page cache),
the link's interface. Prints one JSON object, which the head reads."""

from __future__ import annotations

import argparse
import json

from sparktui.commands.argtypes import tcp_port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executable", default="vllm", help="the profile's [runner] executable (default vllm)")
    parser.add_argument("--venv", help="the profile's [runner] venv")
    parser.add_argument("--ray", action="store_true", help="also say which Ray this node would run")
    parser.add_argument(
        "--port", type=tcp_port, action="append", default=[], help="a port that must be free here (repeatable)"
    )
    parser.add_argument("--model", help="the model: how much of its files this node's page cache holds")
    parser.add_argument("--machine", help="the profile's [machine] name (what older servers here reserve)")
    parser.add_argument("--interface", help="[cluster] interface: whether it is up, and its addresses")
    parser.add_argument("--master-addr", help="[cluster] master-addr: which interface the route to it takes")


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.cluster.link import NodeAsk, node_check

    ask = None
    if args.machine or args.model or args.interface or args.master_addr or args.ray:
        ask = NodeAsk(args.model, args.machine or "dgx-spark", args.interface, args.master_addr, args.ray)
    print(json.dumps(node_check(args.port, args.executable, args.venv, ask)))
    return 0

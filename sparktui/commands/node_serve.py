"""Start this node's rank of a cluster (what a cluster's head runs on each worker over SSH): the
profile comes on stdin, vLLM's multi-node flags after `--` (backend "mp"; with Ray the profile's
[cluster] node-rank says the rank and the node runs `ray start`); the rank's own supervisor starts
detached, under its own guard, and this command returns once it recorded the start."""

from __future__ import annotations

import argparse
import sys

ACCEPTS_EXTRA_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="launch despite a refusal on this node")


def run(args: argparse.Namespace) -> int:
    from sparktui.atomic import atomic_write_text
    from sparktui.core.profiles import load_profile
    from sparktui.errors import UserError
    from sparktui.runtime import cluster, supervisor
    from sparktui.runtime import state as st

    try:
        text = sys.stdin.buffer.read().decode() if sys.stdin is not None else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"node-serve: the profile on stdin cannot be read ({exc}); send it as UTF-8 TOML") from None
    if not text.strip():
        raise UserError(
            "node-serve: no profile on stdin; this command is run by a cluster's head, which sends it there"
        )
    staged = st.state_dir() / "profiles" / "incoming.toml"
    staged.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(staged, text, private=True)  # its [env] may hold secrets
    profile = load_profile(str(staged))
    if profile.cluster is None:
        raise UserError("node-serve: the profile on stdin has no [cluster]; this command is run by a cluster's head")
    serve = supervisor.effective_serve(profile, args.extra)
    if cluster.this_rank(profile, serve) is None:
        raise UserError(
            "node-serve: give this node's --node-rank (and vLLM's other multi-node flags) after --, or, for Ray, "
            "[cluster] node-rank in the profile"
        )
    state = supervisor.launch(profile, serve, force=args.force)
    print(f"started rank on port {state.port} (supervisor pid {state.supervisor.pid})")
    return 0

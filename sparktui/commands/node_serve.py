"""Start this node's rank of a cluster (what a cluster's head runs on each worker over SSH): the
profile comes on stdin, vLLM's multi-node flags after `--` (backend "mp"; with Ray the profile's
[cluster] node-rank says the rank and the node runs `ray start`); the rank's own supervisor starts
detached, under its own guard, and this command returns once it recorded the start. --launch-id
(the head's) is recorded in its state: the head stops it with `stop --port P --only-id ID`, which
leaves any other server on that port alone."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from sparktui.commands.argtypes import launch_id

ACCEPTS_EXTRA_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="launch despite a refusal on this node")
    parser.add_argument(
        "--launch-id", type=launch_id, metavar="ID", help="the head's id for this launch, recorded in the rank's state"
    )


def run(args: argparse.Namespace) -> int:
    from sparktui.atomic import atomic_write_text
    from sparktui.core.profiles import load_profile
    from sparktui.errors import UserError
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.records import state as st
    from sparktui.runtime.server import launcher
    from sparktui.runtime.server import preflight as server_preflight

    try:
        text = sys.stdin.buffer.read().decode() if sys.stdin is not None else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"node-serve: the profile on stdin cannot be read ({exc}); send it as UTF-8 TOML") from None
    if not text.strip():
        raise UserError(
            "node-serve: no profile on stdin; this command is run by a cluster's head, which sends it there"
        )
    # A folder of this call's own (0700): two heads launching on this node at once never read each
    # other's profile; gone once read (launch keeps its own copy of what it runs).
    folder = Path(tempfile.mkdtemp(prefix="incoming-", dir=st.state_dir() / "profiles"))
    try:
        staged = folder / "incoming.toml"
        atomic_write_text(staged, text, private=True)  # its [env] may hold secrets
        profile = load_profile(str(staged))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if profile.cluster is None:
        raise UserError("node-serve: the profile on stdin has no [cluster]; this command is run by a cluster's head")
    serve = server_preflight.effective_serve(profile, args.extra)
    if cluster.this_rank(profile, serve) is None:
        raise UserError(
            "node-serve: give this node's --node-rank (and vLLM's other multi-node flags) after --, or, for Ray, "
            "[cluster] node-rank in the profile"
        )
    state = launcher.launch(profile, serve, force=args.force, launch_id=args.launch_id)
    ident = f", launch id {state.launch_id}" if state.launch_id else ""
    print(f"started rank on port {state.port} (supervisor pid {state.supervisor.pid}{ident})")
    return 0

"""Run vLLM from a profile under the memory guard: in the foreground (systemd-friendly: SIGTERM
stops the whole process tree), or with --detach in a new session that survives the terminal.
Any `vllm serve` flags after the profile override the profile's values."""

from __future__ import annotations

import argparse
import sys
from typing import Any

ACCEPTS_EXTRA_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", help="a profile name (see the TUI's profile list) or a path to a .toml profile")
    parser.add_argument(
        "--detach", action="store_true", help="run in the background; print where to find it and return"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="launch despite a refusal (utilization above 0.90 on unified memory, a failing fit)",
    )


def run(args: argparse.Namespace) -> int:
    from sparktui.core.profiles import load_profile
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.server import launcher, supervisor
    from sparktui.runtime.server import preflight as server_preflight

    profile = load_profile(args.profile)
    if profile.recipe is not None:  # another tool's recipe: say what was read
        print("\n".join(f"sparktui: {line}" for line in profile.recipe.lines()), file=sys.stderr)
    serve = server_preflight.effective_serve(profile, args.extra)
    if profile.cluster is not None and cluster.this_rank(profile, serve) is None:
        return serve_cluster(profile, serve, args)
    if not args.detach:
        return supervisor.serve_foreground(profile, serve, force=args.force)
    state = launcher.launch(profile, serve, force=args.force)
    for warning in state.preflight_warnings:
        print(f"sparktui: warning: {warning}", file=sys.stderr)
    vllm_pid = state.tree.pid if state.tree else "?"
    print(f"started {state.profile} on {state.url} (supervisor pid {state.supervisor.pid}, vLLM pid {vllm_pid})")
    print(f"log: {state.log_path}")
    print(
        f"follow the log with `tail -f {state.log_path}` (or the panel: `sparktui`); a snapshot with "
        f"`sparktui status --port {state.port}`; stop with `sparktui stop --port {state.port}`"
    )
    return 0


def say_preflight(summaries: list[str], warnings: list[str]) -> None:
    """The cluster preflight on the terminal: one line per node, then its warnings."""
    for line in summaries:
        print(f"sparktui: {line}", file=sys.stderr)
    for warning in warnings:
        print(f"sparktui: warning: {warning}", file=sys.stderr)


def serve_cluster(profile: Any, serve: Any, args: argparse.Namespace) -> int:
    """A profile with [cluster]: every node is checked over SSH, each worker's rank
    starts under its own supervisor there, then the head's rank here, all with vLLM's own
    multi-node flags. The head's supervisor stops the workers when it ends."""
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.cluster.ssh import stop_workers
    from sparktui.runtime.records.launch_id import new_launch_id
    from sparktui.runtime.server import supervisor

    settings = profile.cluster
    if args.detach:
        return launch_cluster_detached(profile, serve, args.force)
    if settings.backend == "ray":
        return serve_ray_cluster(profile, serve, args)
    head_serve = cluster.with_rank(serve, settings, 0)  # checks master-addr before anything starts
    checked = cluster.preflight(profile, serve, force=args.force)
    say_preflight(checked.summaries, checked.warnings)
    launch_id = new_launch_id()  # every node's supervisor gets it: the head stops its own ranks only
    workers = cluster.start_workers(profile, serve, launch_id)
    print(f"started ranks 1-{len(workers)} on {', '.join(workers)}", file=sys.stderr, flush=True)
    try:
        return supervisor.serve_foreground(profile, head_serve, force=args.force, launch_id=launch_id)
    except BaseException:
        stop_workers(workers, serve.port, launch_id)
        raise


def launch_cluster_detached(profile: Any, serve: Any, force: bool) -> int:
    """runtime.cluster_launch (the panel's launch of a cluster profile too), said on the terminal."""
    from sparktui.runtime.server.cluster_launch import launch_detached

    done = launch_detached(profile, serve, force=force)
    say_preflight(done.summaries, done.warnings)
    over = " over Ray" if profile.cluster.backend == "ray" else ""
    started = "Ray nodes" if over else f"ranks 1-{len(done.workers)}"
    print(f"started {started} on {', '.join(done.workers)}", file=sys.stderr, flush=True)
    state, port = done.state, done.state.port
    print(
        f"started {state.profile} on {state.url}: head of {len(profile.cluster.nodes)} nodes{over} "
        f"(supervisor pid {state.supervisor.pid})"
    )
    print(
        f"follow the log with `tail -f {state.log_path}` (or the panel: `sparktui`); a snapshot with "
        f"`sparktui status --port {port}`; stop with `sparktui stop --port {port}`"
    )
    return 0


def serve_ray_cluster(profile: Any, serve: Any, args: argparse.Namespace) -> int:
    """A profile with [cluster] backend "ray": every node is checked over SSH; the head's supervisor
    starts the Ray head and vLLM (--distributed-executor-backend ray) here; once the Ray head is up,
    each worker's supervisor starts `ray start --address …` there. vLLM waits for every node's GPU
    in its placement group; the head's supervisor stops the workers when it ends."""
    import threading

    from sparktui.errors import UserError
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.cluster import ray_backend as ray_cluster
    from sparktui.runtime.records.launch_id import new_launch_id
    from sparktui.runtime.server import supervisor

    head, head_serve = ray_cluster.head_profile(profile, serve)  # checks before anything starts
    checked = cluster.preflight(profile, serve, force=args.force)
    say_preflight(checked.summaries, checked.warnings)
    port = int(serve.port or 8000)
    # In the foreground the head's supervisor runs here; the workers join once its Ray is up.
    launch_id = new_launch_id()
    sup = supervisor.Supervisor(head, head_serve, force=args.force, launch_id=launch_id)
    finished = sup.finished

    def join_workers() -> None:
        try:
            ray_cluster.wait_for_head(port, lambda: not finished.is_set())
            workers = ray_cluster.start_workers(head, port, launch_id)
        except UserError as exc:
            if not finished.is_set():
                sup.request("stop", str(exc))
            return
        print(f"sparktui: started Ray nodes on {', '.join(workers)}", file=sys.stderr, flush=True)

    threading.Thread(target=join_workers, name="sparktui-ray-workers", daemon=True).start()
    return int(sup.run())

"""Launching a whole [cluster] in the background: what `sparktui serve --detach` and the panel's
launch both do with a cluster profile, so the two can never differ.

Every node is checked over SSH first (a UserError naming the node when one cannot take its rank),
then the workers start over SSH and the head's supervisor here (mp: workers first, each waits for
the head's rendezvous; Ray: the head's Ray first, then `ray start --address` on each worker). A
failure part-way stops what was started: never a lone head waiting for ranks that never come.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile
    from sparktui.runtime.records.protocol import StateRecord


@dataclass
class ClusterLaunch:
    state: StateRecord  # the head's first recorded state
    workers: list[str]  # the worker hosts started
    summaries: list[str]  # preflight: one line per node, its memory against its rank
    warnings: list[str]


def launch_detached(profile: Profile, serve: ServeConfig, force: bool = False) -> ClusterLaunch:
    """Start every node of `profile`'s [cluster] (which must be set) and return the head's state."""
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.cluster.ssh import stop_workers
    from sparktui.runtime.records.launch_id import new_launch_id
    from sparktui.runtime.server import launcher

    settings = profile.cluster
    if settings is None:
        raise UserError(f"profile {profile.name!r} has no [cluster]: launch it as one server")
    if settings.backend == "ray":
        return _launch_ray(profile, serve, force)
    head_serve = cluster.with_rank(serve, settings, 0)  # checks master-addr before anything starts
    checked = cluster.preflight(profile, serve, force=force)
    launch_id = new_launch_id()  # every node's supervisor gets it: the head stops its own ranks only
    workers = cluster.start_workers(profile, serve, launch_id)
    try:
        state = launcher.launch(profile, head_serve, force=force, launch_id=launch_id)
    except BaseException:
        stop_workers(workers, serve.port, launch_id)
        raise
    return ClusterLaunch(state, workers, checked.summaries, checked.warnings + state.preflight_warnings)


def _launch_ray(profile: Profile, serve: ServeConfig, force: bool) -> ClusterLaunch:
    from sparktui.runtime.cluster import link as cluster
    from sparktui.runtime.cluster import ray_backend as ray_cluster
    from sparktui.runtime.records.launch_id import new_launch_id
    from sparktui.runtime.server import client, launcher

    head, head_serve = ray_cluster.head_profile(profile, serve)  # checks before anything starts
    checked = cluster.preflight(profile, serve, force=force)
    port = int(serve.port or 8000)
    launch_id = new_launch_id()
    state = launcher.launch(head, head_serve, force=force, launch_id=launch_id)

    def head_alive() -> bool:
        try:
            return bool(client.read(port).alive)
        except UserError:
            return False

    try:
        ray_cluster.wait_for_head(port, head_alive)
        workers = ray_cluster.start_workers(head, port, launch_id)
    except BaseException:
        client.stop(port, only_id=launch_id)
        raise
    return ClusterLaunch(state, workers, checked.summaries, checked.warnings + state.preflight_warnings)

"""One node of a [cluster], wired into its supervisor: the link to the other nodes (cluster/link.py).

A worker's headless rank never logs "ready" and has no /health: it is running once it reached its
head, and rests once the head serves. The head stops every worker when it ends; any node stops
itself when the rest of the cluster is gone. With Ray, the node's command is Ray's and Ray's temp
dir is removed with the tree. Without a [cluster] (no link) every call here is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparktui.runtime.cluster import link as cluster_link

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile
    from sparktui.runtime.launch.runner import LaunchCommand
    from sparktui.runtime.records import protocol as pr


class ClusterWiring:
    def __init__(
        self,
        profile: Profile,
        serve: ServeConfig,
        launch_id: str | None,
        *,
        record: Callable[[], pr.StateRecord],
        wake: Callable[[], None],
        say: Callable[[str], None],
    ) -> None:
        self.link = cluster_link.link_for(profile, serve, wake, launch_id)  # one node of a [cluster]: the others
        self.port = serve.port
        self._record, self._say = record, say

    @property
    def worker(self) -> bool:
        """A worker's rank (not the head's)."""
        return self.link is not None and bool(self.link.rank)

    @property
    def ray(self) -> bool:
        return self.link is not None and self.link.cluster.backend == "ray"

    def command(self, profile: Profile, serve: ServeConfig, command: LaunchCommand) -> LaunchCommand:
        """The node's command: vLLM's own, or under Ray the node's Ray start (lost Ray sessions swept)."""
        if self.link is None or not self.ray:
            return command
        from sparktui.runtime.cluster import ray_backend as ray_cluster

        ray_cluster.remove_temp_dir(self.port)  # a lost run's Ray sessions (ours: this state dir and port)
        return ray_cluster.node_command(profile, serve, command, self.link.rank)

    def announce_ready(self) -> None:
        if self.link is not None:
            self.link.announce_ready()  # the workers' headless ranks may rest now

    def due(self, now: float) -> bool:
        return self.link is not None and self.link.due(now)

    @property
    def next_at(self) -> float | None:
        return None if self.link is None else self.link.next_at

    def rest_as_worker(self, set_phase: Callable[[str], None]) -> None:
        """The head serves: this headless rank is loaded too, so its loop and guard take the
        resting pace (the guard still samples fast near a line or in a fast fall)."""
        self._say("ready: the head answers /health; resting")
        self._record().phase = "ready"
        set_phase("ready")

    def look(self, now: float, stop: Callable[[str], None] | None) -> bool:
        """The rest of the cluster: a node that ended stops this one (`stop`, None when a stop is
        asked already); a headless rank (no /health) is running once it reached its head. True when
        the state changed."""
        assert self.link is not None
        up, why = self.link.check(now)
        if why and stop is not None:
            self._say(f"stopping: {why}")
            stop(why)
            return True
        record = self._record()
        if up and self.link.rank and record.status == "starting":
            record.status, record.ready_at = "running", time.time()
            self._say(f"ready: rank {self.link.rank} joined its head")
            return True
        return False

    def close(self, how: str) -> None:
        if self.link is not None:
            for note in self.link.close(how):  # the head's end is the whole cluster's
                self._say(f"warning: {note}")

    def tree_gone(self) -> None:
        if self.link is not None and self.ray:
            from sparktui.runtime.cluster import ray_backend as ray_cluster

            ray_cluster.remove_temp_dir(self.port, self.link.ray_dir)  # Ray's sessions and sockets: the tree is gone

"""The panel driven by Pilot on a test cluster's head node: `python -m tests.support.cluster_panel
PROFILE OUT.json`, run inside the head's network namespace (tests/support/netns_cluster.py), the
way a user on the head would open the panel there. It presses F5 on a [cluster] profile, waits
until the head is ready and its record lists every node, notes what the panel shows, restarts the
cluster with F7, stops it with F6 (the launch's preflight lines atop the log and its notices too) and writes what it saw to OUT.json (an "error" key when a step timed out)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any


async def drive(profile: Path, out: Path) -> None:
    from sparktui.ui.app import SparkApp
    from sparktui.ui.widgets.gauge import MemoryGauge
    from sparktui.ui.widgets.logview import LogView
    from sparktui.ui.widgets.serverlist import ServerList
    from tests.support.app import config_pane, record_notices, server_pane

    seen: dict[str, Any] = {}
    app = SparkApp(profile=profile)
    said = record_notices(app)
    async with app.run_test(size=(120, 40)) as pilot:

        async def until(condition: Any, what: str, timeout: float = 60.0) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if condition():
                    return
                await pilot.pause(0.1)
            raise TimeoutError(f"{what}: servers={app.servers!r} launch_error={server_pane(app).launch_error!r}")

        try:
            await until(lambda: config_pane(app).form.config is not None, "the profile")
            await pilot.press("f5")
            await until(
                lambda: server_pane(app).launch_error is not None or (app.server and app.server.state == "ready"),
                "the head to be ready",
            )
            seen["launch_error"] = server_pane(app).launch_error

            def head() -> Any:
                return next((e for e in app.servers if e.port == app.server.port), None) if app.server else None

            def worker_running() -> bool:
                entry = head()
                return entry is not None and any(n.rank == 1 and n.status == "running" for n in entry.nodes)

            if seen["launch_error"] is None:
                # what the launch's preflight found (each node's check): atop the head's log, and a notice
                await until(lambda: len(app.query_one(LogView).lines()) > 0, "the head's log")
                seen["log_top"] = app.query_one(LogView).lines()[:12]
                seen["notices"] = [[n.title, n.severity, n.message] for n in said]
                await until(worker_running, "the head's record to list the worker running", timeout=30)
                seen["nodes"] = [[n.host, n.rank, n.status] for n in head().nodes]
                await pilot.pause(0.5)
                seen["memory_pane"] = app.query_one(MemoryGauge).render().plain
                seen["server_list"] = app.query_one(ServerList).render().plain
                # F7: the whole cluster again (the head's stop ends the worker's rank; the launch starts both)
                first = app.server.started_at
                await pilot.press("f7")
                await until(
                    lambda: app.server is not None and app.server.started_at != first and app.server.state == "ready",
                    "the restarted head to be ready",
                )
                await until(worker_running, "the worker to run again after the restart", timeout=30)
                seen["restart_error"] = server_pane(app).launch_error
                await pilot.press("f6")
                await until(lambda: app.server is not None and not app.server.live, "the stop")
                seen["stopped"] = app.server.state if app.server else None
        except TimeoutError as exc:
            seen["error"] = str(exc)
    out.write_text(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(drive(Path(sys.argv[1]), Path(sys.argv[2])))

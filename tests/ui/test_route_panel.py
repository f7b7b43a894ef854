"""The panel shows a running `sparktui route`: its models, which are up, requests in flight and
waiting, the swap under way and the last swaps with their times; nothing once it has stopped."""

from __future__ import annotations

import json
import os
import time

import pytest

from sparktui.runtime.host import proc
from sparktui.runtime.route.record import route_record_path
from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.route import RouteBox
from tests.support.app import SampleBackend, until, widget

pytestmark = pytest.mark.usefixtures("isolated")


def record(status: str = "running") -> dict:
    """The record the route writes (runtime/route/front.py Route.record), for this process."""
    me = proc.read_stat(os.getpid())
    assert me is not None
    swap = {"at": time.time() - 60, "model": "beta", "stopped": ["alpha"], "reason": "stop alpha so that …",
            "ok": True, "total_s": 4.29, "drain_s": 0.0, "stop_s": 0.68, "memory_s": 0.12, "start_s": 3.49,
            "step": "done", "error": None}  # fmt: skip
    return {
        "pid": os.getpid(), "start_time": me.start_time, "listen": "127.0.0.1:8080", "status": status,
        "queued": 2, "served": 10, "history": [swap],
        "swapping": {**swap, "model": "alpha", "step": "memory", "ok": False},
        "models": [
            {"name": "alpha", "profile": "a", "port": 8001, "status": "draining", "in_flight": 1, "queued": 2},
            {"name": "beta", "profile": "b", "port": 8002, "status": "up", "in_flight": 3, "queued": 0, "keep": True},
        ],
    }  # fmt: skip


async def test_a_running_route_is_shown_under_the_gauge_and_hidden_once_it_stopped():
    path = route_record_path(8080)
    path.write_text(json.dumps(record()))
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(160, 50)) as pilot:
        box = widget(app, RouteBox)
        await until(pilot, lambda: box.display and box.routes, "the route in the panel")
        text = "\n".join(line for line, _ in box.lines())
        assert "Route 127.0.0.1:8080  2 queued" in text
        assert "● beta (kept) :8002 up  3 in flight" in text
        assert "alpha :8001 draining  1 in flight  2 waiting" in text
        assert "swapping to alpha: memory" in text
        assert "beta ← alpha 4.3 s (stop 0.7 mem 0.1 start 3.5)" in text
        path.write_text(json.dumps(record("stopped")))
        await until(pilot, lambda: not box.display, "the stopped route to leave the panel")

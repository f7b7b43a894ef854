"""Two real stub servers under their real supervisors: the panel lists one started elsewhere
without a key, switches to it (record, log, phases), stops only the one it follows, notices one
that ends elsewhere, and kills the other after asking."""

from __future__ import annotations

import asyncio

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client, launcher
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import ConfirmScreen
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import PhaseStrip
from sparktui.ui.widgets.serverlist import ServerList
from tests.support.app import SampleBackend, server_pane, widget
from tests.support.app import until as wait_until

pytestmark = [pytest.mark.usefixtures("isolated"), pytest.mark.slow]


async def until(pilot, condition, what: str, timeout: float = 60.0):
    detail = lambda app: f"server={app.server!r} servers={[(e.port, e.state) for e in app.servers]}"  # noqa: E731
    await wait_until(pilot, condition, what, timeout, detail)


def members(port: int) -> list[proc.ProcessIdentity]:
    state = st.read_state(st.state_path(port))
    assert state is not None and state.tree is not None
    return [proc.ProcessIdentity(p, s) for p, s in state.tree.members]


def live_ports(app) -> list[int]:
    return sorted(e.port for e in app.servers if e.live)


async def test_two_stub_servers_listed_switched_stopped_and_killed_one_at_a_time(make_profile):
    # 0.3 each: the pool holds both (0.5 each would be refused by preflight)
    a = load_profile(make_profile(serve_extra="gpu-memory-utilization = 0.3", guard="priority = 2"))
    b = load_profile(make_profile(serve_extra="gpu-memory-utilization = 0.3"))
    launcher.launch(a)
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.state == "ready", "attaching to A")
        assert app.server.port == a.serve.port and not widget(app, ServerList).display

        # B starts elsewhere: listed without a key (the state dir watch), A still followed
        await asyncio.to_thread(launcher.launch, b)
        await until(pilot, lambda: live_ports(app) == sorted([a.serve.port, b.serve.port]), "B in the list")
        assert app.server.port == a.serve.port and widget(app, ServerList).display
        entries = {e.port: e for e in app.servers}
        recorded = st.read_state(st.state_path(b.serve.port)).reservation
        assert entries[b.serve.port].reserved_bytes == recorded.bytes and entries[b.serve.port].priority == 0
        assert entries[a.serve.port].priority == 2

        # switch: the pane follows B's record and log
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == b.serve.port and app.server.state == "ready", "following B")
        b_log = st.read_state(st.state_path(b.serve.port)).log_path
        await until(pilot, lambda: str(server_pane(app).server_log.log_path) == b_log, "B's log followed")
        await until(pilot, lambda: widget(app, LogView).line_count > 0, "B's log lines")
        await until(pilot, lambda: widget(app, PhaseStrip).phase == "ready", "B's phases")

        # F6 stops B, and only B
        a_tree, b_tree = members(a.serve.port), members(b.serve.port)
        await pilot.press("f6")
        await until(pilot, lambda: app.server.state == "stopped", "B stopped")
        assert not any(m.is_alive() for m in b_tree)
        assert all(m.is_alive() for m in a_tree)
        assert st.read_state(st.state_path(a.serve.port)).status == "running"

        # back to A; B, ended and no longer followed, leaves the list
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == a.serve.port, "following A again")
        await until(pilot, lambda: [e.port for e in app.servers] == [a.serve.port], "B gone from the list")

        # B again, then ended elsewhere: the list drops it and a notice says how it ended
        await asyncio.to_thread(launcher.launch, b)
        await until(pilot, lambda: b.serve.port in live_ports(app), "B listed again")
        await until(
            pilot,
            lambda: st.read_state(st.state_path(b.serve.port)).status == "running",
            "B ready",
        )
        await asyncio.to_thread(client.stop, b.serve.port)
        await until(pilot, lambda: live_ports(app) == [a.serve.port], "B's end noticed")
        assert any(f":{b.serve.port}" in str(n.message) and "stopped" in str(n.message) for n in app._notifications)
        assert app.server.port == a.serve.port

        # F8 asks, naming A, then kills A's tree
        await pilot.press("f8")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and f":{a.serve.port}" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: app.server.condition.reason == "killed", "A killed")
        assert not any(m.is_alive() for m in a_tree)

"""Several servers in the panel, seen through their supervisors' records: the list over the server
pane (port, profile, condition, reservation, priority; a cluster's nodes), the key that switches
the pane to another server, stop and kill acting on that one only, the fit counting what the
others reserve, and the memory pane's reservations."""

from __future__ import annotations

import json

import pytest

from sparktui.runtime.records import state as st
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import ConfirmScreen
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import PhaseStrip, ServerInfo
from sparktui.ui.widgets.serverlist import ServerList
from tests.support.app import RecordsBackend, server_pane, widget
from tests.support.app import two_server_records as two_servers
from tests.support.app import until as wait_until

pytestmark = pytest.mark.usefixtures("isolated")

GiB = 2**30


async def until(pilot, condition, what: str, timeout: float = 20.0):
    await wait_until(pilot, condition, what, timeout, lambda app: f"server={app.server!r}")


async def test_the_list_shows_every_server_and_the_key_switches_the_pane(tmp_path):
    backend = RecordsBackend(two_servers(tmp_path))
    app = SparkApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2 and app.server is not None, "both servers listed")
        servers = widget(app, ServerList)
        assert app.server.port == 8000 and servers.selected == 8000 and servers.display
        lines = servers.render().plain.splitlines()
        assert lines[0].startswith("Servers 2") and "Ctrl+R" in lines[0]
        a_line = next(line for line in lines if ":8000" in line)
        b_line = next(line for line in lines if ":8001" in line)
        assert a_line.startswith("▶") and "ready" in a_line and "104.0 GiB" in a_line and "p1" in a_line
        # 42 columns inside the pane at 120×40: the words around the start-up phase give way, not the phase
        assert b_line == "  :8001 embed-s… loading weights  10.0G p0" and len(b_line) <= servers.size.width
        await pilot.resize_terminal(80, 24)
        app.show_pane("server")
        await until(pilot, lambda: servers.size.width > 42, "the narrow layout")
        b_line = next(line for line in servers.render().plain.splitlines() if ":8001" in line)
        assert "embed-small" in b_line and "starting (loading weights)" in b_line, b_line
        assert len(b_line) <= servers.size.width
        await pilot.resize_terminal(120, 40)
        assert next(e for e in app.servers if e.port == 8001).text() == "starting (loading weights)"
        await until(pilot, lambda: widget(app, PhaseStrip).phase == "ready", "the 70B's phases")

        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8001, "the switch to :8001")
        assert backend.asked[-1] == 8001
        assert widget(app, ServerList).selected == 8001
        await until(pilot, lambda: any("embed-only line" in x for x in widget(app, LogView).lines()), "its log")
        assert not any("Application startup complete" in x for x in widget(app, LogView).lines())
        assert widget(app, ServerInfo).view.state == "starting (loading weights)"  # as the list says it
        assert widget(app, PhaseStrip).phase not in (None, "ready")
        assert "pid 5252" in widget(app, ServerInfo).view.detail
        assert ":8001" in str(app.query_one("#status").render())  # the status bar says which one

        await pilot.press("ctrl+r")  # round the list, back to the first
        await until(pilot, lambda: app.server.port == 8000, "the switch back to :8000")
        # the predicted column is that server's own fit, as the supervisor recorded it at launch
        await until(
            pilot, lambda: dict(widget(app, ServerInfo).view.predicted).get("KV tokens") == "185,856", "its fit"
        )


async def test_the_previous_server_key_goes_the_other_way_round_the_list(tmp_path):
    records = two_servers(tmp_path)
    third = {**records[1], "port": 8002, "url": "http://127.0.0.1:8002", "profile": "draft", "started_at": 0.5}
    app = SparkApp(backend=RecordsBackend([*records, third]))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 3 and app.server is not None, "three servers listed")
        assert [e.port for e in app.servers] == [8000, 8001, 8002] and app.server.port == 8000
        header = widget(app, ServerList).render().plain.splitlines()[0]
        assert "Ctrl+R next, Ctrl+E previous" in header
        await pilot.press("ctrl+e")  # from the first, round to the last
        await until(pilot, lambda: app.server.port == 8002, "the switch back to :8002")
        await pilot.press("ctrl+e")
        await until(pilot, lambda: app.server.port == 8001, "the switch back to :8001")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8002, "the switch on to :8002")


async def test_stop_and_kill_act_on_the_followed_server_only_and_kill_asks_naming_it(tmp_path, monkeypatch):
    from sparktui.ui.panes import ServerPane

    # ten ticks a second: the ended server leaves the list at the list's 5th tick, not 5 s later
    monkeypatch.setattr(ServerPane, "POLL_S", 0.1)
    backend = RecordsBackend(two_servers(tmp_path))
    app = SparkApp(backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2 and app.server is not None, "both servers listed")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8001, "the switch to :8001")
        await pilot.press("f8")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert ":8001 (embed-small, pid 5252)" in app.screen.question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the dialog closed")
        await pilot.pause()  # the log's tail runs on (a live server): wait for any call to the supervisor only
        await until(pilot, lambda: not any(w.name == "server-action" and w.is_running for w in app.workers), "it")
        assert backend.ended == []
        await pilot.press("f6")
        await until(pilot, lambda: backend.ended == [(8001, "stopped")], "the stop of :8001")
        await until(pilot, lambda: app.server.state == "stopped", "the pane to show it stopped")
        assert backend.records[8000]["alive"]
        # the stopped one stays listed while followed; the running one is a key away
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8000, "the switch to :8000")
        await until(pilot, lambda: [e.port for e in app.servers] == [8000], "the ended server to leave the list")
        assert not widget(app, ServerList).display  # one server: no list
        await pilot.press("f8")
        await pilot.pause()
        assert ":8000 (70b-dense-single-user" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: (8000, "killed") in backend.ended, "the kill of :8000")
        assert backend.ended == [(8001, "stopped"), (8000, "killed")]


async def test_the_fit_counts_what_the_other_servers_reserve(tmp_path):
    records = two_servers(tmp_path, other_reserves_gib=80.0)
    backend = RecordsBackend(records[:1])
    app = SparkApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        # re-attached to :8000: its profile is opened; the form's port is :8000's own
        await until(pilot, lambda: app.fit is not None and app.fit.verdict == "fits", "the 70B's fit")
        assert not any("beside" in r for r in app.fit.reasons)
        backend.records[8001] = records[1]  # a server on :8001 starts elsewhere, reserving 80 GiB
        server_pane(app).roster.refresh_list()
        await until(pilot, lambda: app.fit.verdict == "wont_start", "the fit to count :8001")
        reason = app.fit.reasons[0]
        assert reason.startswith("won't fit beside :8001 (reserves 80.0 GiB)"), reason
        assert "stop :8001" in reason
        assert dict((k, n) for k, _, n in app.fit.segments)["others"] == int(80 * GiB)
        gauge = widget(app, MemoryGauge).render().plain
        assert "Server pool   118.0 GiB" in gauge and "Reserved      184.0 GiB" in gauge
        assert ":8001 80.0 GiB p0 embed-s" in gauge
        # :8001 relaunched at a share that leaves the 70B room (104 GiB of a 118 GiB pool): it fits,
        # and the fit says beside what
        backend.records[8001] = two_servers(tmp_path)[1]
        server_pane(app).roster.refresh_list()
        await until(pilot, lambda: app.fit.verdict == "fits", "the fit beside a smaller :8001")
        assert any(r.startswith("beside :8001 (reserves 10.0 GiB)") for r in app.fit.reasons), app.fit.reasons


async def test_a_clusters_nodes_show_under_its_head(tmp_path):
    records = two_servers(tmp_path)
    nodes = st.state_dir() / "cluster" / "8001.json"
    nodes.parent.mkdir(parents=True)
    nodes.write_text(
        json.dumps(
            [
                {"host": "spark-a", "rank": 0, "status": "starting", "phase": "loading_weights", "available_gib": 61.5},
                {"host": "spark-b", "rank": 1, "status": "starting", "phase": "profiling", "available_gib": 58.25},
            ]
        )
    )
    app = SparkApp(backend=RecordsBackend(records))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2, "both servers listed")
        entry = next(e for e in app.servers if e.port == 8001)
        assert [(n.host, n.rank, n.phase, n.available_gib) for n in entry.nodes] == [
            ("spark-a", 0, "loading_weights", 61.5),
            ("spark-b", 1, "profiling", 58.25),
        ]
        text = widget(app, ServerList).render().plain
        assert "    spark-b r1 profiling 58.2G avail" in text.splitlines()  # 42 columns at 120×40
        await pilot.resize_terminal(80, 24)
        node_line = "    node spark-b r1 starting/profiling  avail 58.2 GiB"
        await until(pilot, lambda: node_line in widget(app, ServerList).render().plain.splitlines(), "the 80x24 list")
        text = widget(app, ServerList).render().plain
        assert "    node spark-b r1 starting/profiling  avail 58.2 GiB" in text.splitlines()


def node_lines(app) -> list[str]:
    return [line for line in widget(app, MemoryGauge).render().plain.splitlines() if " r0 " in line or " r1 " in line]


async def test_the_memory_pane_shows_each_node_of_a_cluster_head(tmp_path):
    """Where the user looks at memory: every node's phase and MemAvailable under its head's
    reservation, each on one line (a wrapped line would push the guard off an 80×24 screen)."""
    records = two_servers(tmp_path)
    nodes = st.state_dir() / "cluster" / "8001.json"
    nodes.parent.mkdir(parents=True)
    nodes.write_text(
        json.dumps(
            [
                {"host": "spark-a", "rank": 0, "status": "running", "phase": "ready", "available_gib": 61.5},
                {
                    "host": "spark-b-with-a-long-name",
                    "rank": 1,
                    "status": "exited",
                    "exit_reason": "guard",
                    "available_gib": 3.25,
                },
            ]
        )
    )
    app = SparkApp(backend=RecordsBackend(records))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(node_lines(app)) == 2, "the nodes in the memory pane")
        width = widget(app, MemoryGauge).size.width
        a, b = node_lines(app)
        assert a == "  spark-a r0 ready 61.5G" and len(a) <= width, (a, width)
        assert b.endswith("… r1 exit guard 3.2G") and b.startswith("  spark-") and len(b) == width, (b, width)
        await pilot.resize_terminal(80, 24)
        app.show_pane("memory")
        await until(pilot, lambda: widget(app, MemoryGauge).size.width > width, "the narrow layout")
        a, b = node_lines(app)
        assert a == "    spark-a r0 ready  avail 61.5 GiB"
        assert b == "    spark-b-with-a-long-name r1 exit guard  avail 3.2 GiB"
        assert len(b) <= widget(app, MemoryGauge).size.width


async def test_the_palette_lists_each_server(tmp_path):
    from sparktui.ui.commands import SparkCommands

    app = SparkApp(backend=RecordsBackend(two_servers(tmp_path)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2 and app.server is not None, "both servers listed")
        provider = SparkCommands(app.screen)
        names = {name: run for name, run, _ in provider._commands()}
        assert "Switch the server pane to the next running server (its log, figures, stop and kill)" in names
        assert "Switch the server pane to the previous running server (its log, figures, stop and kill)" in names
        names["Server :8001 (embed-small): follow it"]()
        await until(pilot, lambda: app.server.port == 8001, "the palette's switch")


async def test_at_idle_the_list_is_read_only_when_a_record_changes(tmp_path, monkeypatch):
    from sparktui.runtime.records.protocol import StateRecord
    from sparktui.ui.panes import ServerPane
    from tests.support.app import SampleBackend, server_record

    class Counting(SampleBackend):
        reads = 0

        def servers(self):
            self.reads += 1
            return super().servers()

    monkeypatch.setattr(ServerPane, "POLL_S", 0.02)  # the poll ticks 50 times a second
    backend = Counting()
    app = SparkApp(backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = server_pane(app)
        await until(
            pilot,
            lambda: backend.reads >= 1 and pane.roster._watch is not None and pane.roster._watch.armed.is_set(),
            "the watch",
        )
        await pilot.pause(0.3)
        before = backend.reads
        await pilot.pause(1.5)  # some 75 ticks with no server anywhere
        assert backend.reads == before, "the list was read again with nothing changed"
        # a server started elsewhere writes its record: the list is read without a key
        log = tmp_path / "other.log"
        log.write_text(READY_LOG_HEAD)
        st.write_state(st.state_path(8123), StateRecord.model_validate(server_record(log, port=8123)))
        await until(pilot, lambda: backend.reads > before, "the list read after the record appeared")
        await until(pilot, lambda: [e.port for e in app.servers] == [8123], "the new record listed")


async def test_at_idle_the_supervisors_state_is_read_only_when_a_record_changes(tmp_path, monkeypatch):
    """With nothing live followed, the watch of the state dir finds a server started elsewhere (and
    a new start on the port of the one that ended): no read of the supervisor's state a tick, and
    the pane's poll does not even tick; it ticks again while a live server is followed."""
    from sparktui.runtime.records.protocol import StateRecord
    from sparktui.ui.backend import server_entry, server_status
    from sparktui.ui.panes import ServerPane
    from tests.support.app import SampleBackend, server_record

    class Records(SampleBackend):
        """The state dir's records as written, their `alive` believed (no process stands behind them)."""

        attaches = 0

        def records(self):
            found = [st.read_state(path) for path in (st.state_dir() / "servers").glob("*.json")]
            for r in found:
                if r is not None:
                    r.alive = r.running
            return [r for r in found if r is not None]

        def servers(self):
            return [server_entry(r) for r in self.records()]

        def attach(self, port=None):
            self.attaches += 1
            found = [r for r in self.records() if r.port == port or (port is None and r.alive)]
            return server_status(found[0]) if found else None

    def record(status: str, started_at: float) -> None:
        fields = server_record(log, status=status, port=8123, started_at=started_at)
        if status == "exited":
            fields["exit"] = {"reason": "stopped", "returncode": 0, "by": "socket", "stop": None, "failure": None}
        st.write_state(st.state_path(8123), StateRecord.model_validate(fields))

    monkeypatch.setattr(ServerPane, "POLL_S", 0.02)  # the poll ticks 50 times a second
    log = tmp_path / "other.log"
    log.write_text(READY_LOG_HEAD)
    backend = Records()
    app = SparkApp(backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = server_pane(app)
        await until(pilot, lambda: pane.roster._watch is not None and pane.roster._watch.armed.is_set(), "the watch")
        await pilot.pause(0.3)
        before, ticks = backend.attaches, pane._ticks
        await pilot.pause(1.0)  # some 50 ticks with no server anywhere
        assert backend.attaches == before, "the supervisor's state was read with no server and nothing changed"
        assert pane._ticks - ticks <= 1, f"the poll ticked {pane._ticks - ticks} times with nothing to do"
        record("running", 2.0)  # a server started elsewhere
        await until(pilot, lambda: app.server is not None and app.server.port == 8123 and app.server.live, "it")
        ticks = pane._ticks
        await until(pilot, lambda: pane._ticks - ticks >= 5, "the poll ticking again for the live server")
        record("exited", 2.0)  # it ends (the poll reads a live server every tick)
        await until(pilot, lambda: app.server is not None and not app.server.live, "its end")
        await pilot.pause(0.3)
        before, ticks = backend.attaches, pane._ticks
        await pilot.pause(1.0)
        assert backend.attaches == before, "the supervisor's state was read with only an ended server followed"
        assert pane._ticks - ticks <= 1, f"the poll ticked {pane._ticks - ticks} times for an ended server"
        record("running", 3.0)  # started again on the same port
        await until(pilot, lambda: app.server.live and app.server.started_at == 3.0, "the new start on its port")


async def test_when_the_watch_of_the_state_dir_ends_the_poll_looks_for_servers_again(monkeypatch):
    """At idle the poll rests while the watch says when a server starts; if the watch stops (an
    error reading inotify), the poll ticks again and reads the list every few ticks itself."""
    from sparktui.ui.panes import ServerPane
    from tests.support.app import SampleBackend

    class Counting(SampleBackend):
        reads = 0

        def servers(self):
            self.reads += 1
            return super().servers()

    monkeypatch.setattr(ServerPane, "POLL_S", 0.02)
    backend = Counting()
    app = SparkApp(backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = server_pane(app)
        await until(pilot, lambda: pane.roster._watch is not None and pane.roster._watch.armed.is_set(), "the watch")
        await pilot.pause(0.3)
        ticks = pane._ticks
        await pilot.pause(0.3)
        assert pane._ticks - ticks <= 1
        reads = backend.reads
        pane.roster._watch.close()  # its thread ends, as on an error
        await until(pilot, lambda: not pane.roster.watching and pane._ticks - ticks >= 10, "the poll ticking again")
        await until(pilot, lambda: backend.reads > reads, "the list read by the poll")


READY_LOG_HEAD = "(APIServer pid=7) INFO 11-30 09:00:00 [api_server.py:1] vLLM API server version 0.32.0\n"


async def test_a_wedged_server_can_still_be_stopped_from_the_panel(tmp_path):
    from tests.support.app import RecordBackend, server_record

    log = tmp_path / "ready.log"
    log.write_text(READY_LOG_HEAD)
    wedged = {"state": "wedged", "since": 1.0, "stalled_s": 60.0, "evidence": "no tokens for 60 s"}
    backend = RecordBackend(server_record(log, watch={"wedge": wedged}))
    app = SparkApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.state == "wedged", "the wedged server")
        assert app.server.live and widget(app, ServerInfo).view.state.startswith("wedged (since ")
        assert widget(app, ServerInfo).view.bad
        await pilot.press("f6")
        await until(pilot, lambda: app.server.state == "stopped", "the stop of the wedged server")


async def test_a_switch_opens_that_servers_profile_unless_the_form_has_unsaved_edits(tmp_path):
    from sparktui.core.profiles import resolve_profile
    from tests.support.app import config_pane

    records = two_servers(tmp_path)
    records[1].update(profile="35b-moe-5-users-8k", profile_path=str(resolve_profile("35b-moe-5-users-8k")))
    app = SparkApp(backend=RecordsBackend(records))
    async with app.run_test(size=(120, 40)) as pilot:
        config = config_pane(app)
        await until(pilot, lambda: config.loaded is not None and config.form.config is not None, "the 70B's profile")
        assert config.loaded.name == "70b-dense-single-user"
        await until(pilot, lambda: len(app.servers) == 2, "both servers listed")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: config.loaded.name == "35b-moe-5-users-8k", "the switch to open :8001's profile")
        await until(pilot, lambda: app.profile is not None and app.profile.name == "35b-moe-5-users-8k", "its form")
        # edit the form, then switch back: the edits stay, and a notice says how to open the other
        config.query_one("#flag-max_model_len").value = "4096"
        await until(pilot, lambda: config.modified, "the form modified")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8000, "the switch back to :8000")
        await until(
            pilot,
            lambda: any("unsaved edits of 35b-moe-5-users-8k" in str(n.message) for n in app._notifications),
            "the notice",
        )
        assert config.loaded.name == "35b-moe-5-users-8k" and config.modified
        assert any("unsaved edits of 35b-moe-5-users-8k" in str(n.message) for n in app._notifications)


async def test_a_click_on_a_line_follows_that_server_and_quitting_names_every_running_one(tmp_path):
    app = SparkApp(backend=RecordsBackend(two_servers(tmp_path)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2 and app.server is not None, "both servers listed")
        assert app.server.port == 8000
        await pilot.click(ServerList, offset=(4, 2))  # the third line: :8001
        await until(pilot, lambda: app.server.port == 8001, "the click's switch")
        said = []
        leave = app.exit
        app.exit = lambda *args, message=None, **kw: (said.append(str(message)), leave(*args, message=message, **kw))
        await pilot.press("ctrl+q")
        await pilot.pause()
    said = " ".join(said)
    assert "2 servers keep running (ports 8000, 8001)" in said and "sparktui stop --all" in said


async def test_launch_and_restart_never_touch_another_servers_port(tmp_path):
    class Refusing(RecordsBackend):
        def launch(self, profile, force=False):
            raise AssertionError("nothing may be launched here")

        def restart(self, status, profile):
            raise AssertionError("nothing may be restarted here")

    app = SparkApp(backend=Refusing(two_servers(tmp_path)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2 and app.profile is not None, "both servers and the form")
        assert app.profile.serve.port == 8000  # the 70B's own profile, re-attached
        await pilot.press("f5")  # :8000 runs: a second launch on its port is refused before asking anyone
        await until(pilot, lambda: any("already running on port 8000" in str(n.message) for n in app._notifications),
                    "the refusal")  # fmt: skip
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.server.port == 8001, "the switch to :8001")
        await pilot.press("f7")  # the form holds the 70B (port 8000), not :8001's configuration
        await until(pilot, lambda: any("not the server on :8001" in str(n.message) for n in app._notifications),
                    "the restart's refusal")  # fmt: skip
        assert app.server.port == 8001 and app.server.live


async def test_a_list_that_arrives_while_the_app_closes_is_dropped_not_raised(tmp_path):
    # The server pane's list worker can post after the status bar is gone (the app closing):
    # CI once failed in run_test's teardown with NoMatches for StatusBar.
    from sparktui.ui.app import StatusBar
    from sparktui.ui.messages import ServersChanged

    app = SparkApp(backend=RecordsBackend(two_servers(tmp_path)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.servers) == 2, "both servers listed")
        # what the app takes in, as it takes it: the roster keeps listing both servers and may
        # publish them again right after, so the late list is seen by the watch, not by polling
        taken: list[int] = []
        app.watch(app, "servers", lambda servers: taken.append(len(servers)), init=False)
        await app.query_one(StatusBar).remove()
        app.post_message(ServersChanged(app.servers[:1]))
        await until(pilot, lambda: 1 in taken, "the late list to be taken in")

"""State folders other than servers/ that sparktui reads records from: one another user owns or
may write in (sparktui makes them 0700) may hold a planted or altered record. Where a record drives
an action (a route's leftovers are stopped from it) it is refused, naming the folder, what is wrong
and the fix; where it is a figure a fit trusts (calibrations) it is not believed; where it only
feeds a display (routes shown, flight records, cluster nodes, bench history) a warning says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui import paths
from sparktui.core import bench_history
from sparktui.core.calibration import dump_store
from sparktui.errors import UserError
from sparktui.runtime import calibrations
from sparktui.runtime.cluster import link
from sparktui.runtime.route import record as route_record
from sparktui.runtime.watch import postmortem
from tests.core.test_calibration import calibrate


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return paths.state_dir()


def left_behind(state: Path) -> Path:
    """A route that died unstopped (a pid that is no process), and the server it left running."""
    path = route_record.route_record_path(8100)
    record = {"listen": "127.0.0.1:8100", "pid": 2**22 + 7, "start_time": 1, "status": "running",
              "models": [{"name": "m", "port": 8101, "status": "up", "launch_id": "abc"}]}  # fmt: skip
    path.write_text(json.dumps(record))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o770, 0o777], ids=["group", "others"])
def test_a_route_record_in_a_folder_others_may_write_in_stops_nothing(state, mode):
    # a route stops the servers its dead predecessor's record names: a planted one would name any
    path = left_behind(state)
    assert route_record.leftovers(8100) == [("m", 8101, "abc")]  # 0700: believed
    path.parent.chmod(mode)
    with pytest.raises(UserError) as exc:
        route_record.leftovers(8100)
    said = str(exc.value)
    assert said.startswith(f"{path.parent}: writable by other users (mode {mode:04o}"), said
    assert f"chmod 700 {path.parent}" in said and "no route record in it is trusted" in said, said


def test_calibrations_in_a_state_folder_others_may_write_in_are_not_believed(state, capsys):
    # a planted calibration would pass a fit (and so a launch) that won't start
    paths.calibrations_path().write_text(dump_store([calibrate()]))
    paths.calibrations_path().chmod(0o600)
    assert len(calibrations.load()) == 1
    state.chmod(0o777)  # state_dir() made it 0700 once in this process and does not look again
    try:
        assert calibrations.load() == []
        assert calibrations.load() == []
    finally:
        state.chmod(0o700)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1, err  # once, though the panel asks at every fit
    assert f"{state}: writable by other users (mode 0777" in err and f"chmod 700 {state}" in err, err
    assert "no calibration from it" in err, err


def shown(state: Path, which: str) -> tuple[Path, object]:
    """The folder a display reads records from, with one record in it, and the reading."""
    if which == "route":
        path = left_behind(state)
        return path.parent, lambda: route_record.read_routes(live_only=False)
    if which == "cluster":
        path = link.nodes_file(8100)
        path.parent.mkdir(mode=0o700)
        path.write_text(json.dumps([{"rank": 0}]))
        return path.parent, lambda: link.read_nodes(8100)
    if which == "bench":
        path = paths.bench_history_path()
        path.write_text('{"a": 1}\n')
        return path.parent, lambda: bench_history.history_lines(path)
    folder = state / "flight"
    folder.mkdir(mode=0o700)
    return folder, lambda: (postmortem.saved_postmortems(state), postmortem._headers(folder))


@pytest.mark.parametrize("which", ["route", "cluster", "bench", "flight"])
def test_records_shown_from_a_folder_others_may_write_in_are_warned_of(state, capsys, which):
    folder, read = shown(state, which)
    before = read()  # type: ignore[operator]
    assert "warning" not in capsys.readouterr().err
    folder.chmod(0o777)
    try:
        assert read() == before  # type: ignore[operator]
        assert read() == before  # type: ignore[operator]
    finally:
        folder.chmod(0o700)
    err = capsys.readouterr().err
    assert err.count("sparktui: warning: ") == 1, err  # once a process: the panel reads them often
    assert f"{folder}: writable by other users (mode 0777" in err and f"chmod 700 {folder}" in err, err
    assert "may not be what sparktui wrote" in err, err


@pytest.mark.parametrize("mode", [0o620, 0o602], ids=["group", "others"])
def test_a_heartbeat_others_may_write_never_shows_a_guard_watching(state, mode):
    # The guard's heartbeat (servers/PORT.beat) tells a frozen guard from a quiet one: a fresh
    # stamp written by someone else would make a frozen guard look alive, so one others may write
    # is not believed, and the guard is shown as not known to sample, not as watching
    import os

    from sparktui.commands.status import _line
    from sparktui.core.guard_lines import GuardLines
    from sparktui.runtime.host import proc
    from sparktui.runtime.records import protocol as pr
    from sparktui.runtime.records import state as st
    from sparktui.runtime.records.beat import beat_line
    from sparktui.ui.translate import guard_view

    me = pr.ProcessRef(pid=os.getpid(), start_time=proc.start_time_of(os.getpid()))
    guard = pr.GuardRecord(armed=True, state="watching", lines=GuardLines(None, None, None))
    guard.last = pr.GuardLast(action="ok", available_gib=60.0, rate_gib_s=0.0, interval_s=0.25)
    record = pr.StateRecord(status="running", phase="serving", profile="p", port=8123, supervisor=me, guard=guard)
    beat = st.beat_path(8123)
    beat.write_bytes(beat_line(st.boottime(), 0.25, False))  # fresh: the guard looks alive by it
    beat.chmod(0o600)
    trusted = st.with_liveness(record.model_copy(deep=True))
    assert not trusted.guard.stale and trusted.guard.sample_age_s is not None
    assert "guard watching" in _line(trusted)
    assert (guard_view(trusted.guard, None, live=True).why_na or "").startswith("watching")
    beat.chmod(mode)
    doubted = st.with_liveness(record.model_copy(deep=True))
    assert doubted.guard.stale and doubted.guard.sample_age_s is None
    said = _line(doubted)
    assert "guard watching" not in said and "guard UNKNOWN: its heartbeat is not trusted" in said, said
    assert f"{beat}: writable by other users (mode {mode:04o}" in said, said
    detail = guard_view(doubted.guard, None, live=True).why_na
    assert detail is not None and "not known to sample" in detail and "watching" not in detail, detail
    assert "beat_doubt" not in doubted.to_json()  # the reader's, never stored

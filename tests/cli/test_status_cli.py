"""`sparktui status` with no server running: how each port's last server ended, without `--all`, in
text and in `--json` (issue 21 asks it for as long as the record is kept; issue 23 left the JSON out).

The records are written as a supervisor leaves them when it has ended (no process is started):
the recorded supervisor pid is one no process can have, so the readers see it gone."""

from __future__ import annotations

import json

import pytest

from sparktui.cli import main
from sparktui.runtime.records import state as st
from sparktui.runtime.records.protocol import StateRecord
from tests.support import FIXTURES
from tests.support.other_version import (
    NEW_EVENT,
    NEW_FAILURE_KIND,
    NEW_KERNEL_EVENT,
    NEW_LINE_KEY,
    from_another_version,
)

NO_SUCH_PID = 2**22 + 17  # above the kernel's largest pid_max: never a live process


def ended_record(port: int, exit: dict, trip: dict | None = None, profile: str = "p") -> StateRecord:
    return StateRecord.model_validate(
        {
            "version": 1,
            "status": "exited",
            "phase": "stopped",
            "profile": f"{profile}-{port}",
            "host": "127.0.0.1",
            "port": port,
            "url": f"http://127.0.0.1:{port}",
            "log_path": f"/tmp/never-{port}.log",
            "started_at": 100.0 + port,
            "updated_at": 200.0 + port,
            "supervisor": {"pid": NO_SUCH_PID, "start_time": 1},
            "tree": {"pid": NO_SUCH_PID + 1, "start_time": 1},
            "guard": {"armed": True, "state": "tripped" if trip else "watching", "lines": {"kill_below_gib": 8.0}},
            "trip": trip,
            "exit": exit,
        }
    )


TRIP = {
    "line": "kill",
    "reason": "MemAvailable below the kill line",
    "threshold_gib": 8.0,
    "mem_available_gib": 7.25,
    "low_water_gib": 7.1,
    "fall_rate_gib_s": 3.5,
}


@pytest.fixture
def ended(isolated):
    """Three ports whose servers have ended: a guard trip, a crash after ready, a stop."""
    (st.state_dir() / "servers").mkdir(parents=True, exist_ok=True)
    records = {
        18001: ended_record(18001, {"reason": "guard", "returncode": -9, "by": "guard"}, TRIP),
        18002: ended_record(
            18002,
            {"reason": "failed", "returncode": 1, "failure": {"kind": "worker_died", "message": "Worker died"}},
        ),
        18003: ended_record(18003, {"reason": "stopped", "returncode": 0, "by": "socket"}),
    }
    for port, record in records.items():
        st.write_state(st.state_path(port), record)
    return records


def test_status_json_without_a_server_running_says_how_each_port_last_ended(ended, capsys):
    assert main(["status", "--json"]) == 0
    listed = {s["port"]: s for s in json.loads(capsys.readouterr().out)}
    assert sorted(listed) == [18001, 18002, 18003]
    guard = listed[18001]["ended"]
    assert "guard trip at the kill line (8.00 GiB): MemAvailable 7.25 GiB" in guard, guard
    assert listed[18001]["trip"]["mem_available_gib"] == 7.25
    assert "crash: worker_died: Worker died" in listed[18002]["ended"]
    # who asked, in words: it said "stopped by socket"
    assert listed[18003]["ended"].endswith("stopped by request (sparktui stop/kill, the panel or a route)")
    assert not any(s["alive"] for s in listed.values())


def test_status_json_for_one_port_says_how_it_ended(ended, capsys):
    assert main(["status", "--json", "--port", "18001"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["port"] == 18001 and "guard trip at the kill line" in one["ended"]


def test_a_pressure_or_fall_rate_trip_is_not_called_a_line_of_gib(isolated, capsys):
    # status said "guard trip at the psi line (6.00 GiB)": PSI has no GiB line, the 6.00 was the term line's
    (st.state_dir() / "servers").mkdir(parents=True, exist_ok=True)
    psi = TRIP | {"line": "psi", "reason": "psi full", "threshold_gib": 6.0}
    fall = TRIP | {"line": "fall", "reason": "fall rate", "threshold_gib": 3.5}
    for port, trip in ((18011, psi), (18012, fall)):
        st.write_state(st.state_path(port), ended_record(port, {"reason": "guard", "returncode": -15}, trip))
    assert main(["status", "--json"]) == 0
    listed = {s["port"]: s["ended"] for s in json.loads(capsys.readouterr().out)}
    assert "guard trip on memory pressure (PSI full" in listed[18011] and "psi line" not in listed[18011]
    assert "guard trip on the fall rate (the 3.50 GiB line" in listed[18012] and "fall line" not in listed[18012]


def test_status_text_without_a_server_running_gives_one_line_per_port(ended, capsys):
    assert main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "no server is running"
    assert len(out) == 4, out  # short: each port's last end, one line
    assert any("port 18001" in line and "guard trip at the kill line" in line for line in out), out
    assert any("port 18002" in line and "crash: worker_died" in line for line in out), out


def test_status_prints_a_record_from_another_version_with_the_words_it_does_not_know(isolated, capsys):
    # Issue 24: values a newer sparktui wrote are shown as written, and the record is not skipped
    port = 18024
    newer = from_another_version(json.loads((FIXTURES / "state" / "crash-loop.json").read_text()))
    newer |= {"port": port, "supervisor": {"pid": NO_SUCH_PID, "start_time": 1}}
    (st.state_dir() / "servers").mkdir(parents=True, exist_ok=True)
    st.state_path(port).write_text(json.dumps(newer, indent=1))
    assert main(["status", "--all"]) == 0
    out, err = capsys.readouterr()
    assert "skipped" not in err, err
    assert f"{port}" in out, out
    assert f"({NEW_FAILURE_KIND}: the pool ran dry)" in out, out
    assert f"kernel log (notify): gsp_timeout: {NEW_KERNEL_EVENT['line']}" in out, out
    assert main(["status", "--all", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown[0]["guard"]["lines"][NEW_LINE_KEY] == 1.0 and shown[0]["events"][-1] == NEW_EVENT


def test_status_says_a_record_it_cannot_read_is_of_a_server_that_still_runs(isolated, capsys):
    # A top-level word this version does not know makes the record unreadable; its supervisor still runs,
    # so status must not leave it at "skipped": it says the server runs and how to end it
    import os

    from sparktui.runtime.host.proc import start_time_of

    port = 18025
    record = ended_record(port, {"reason": "stopped"}).to_dict()
    record |= {"status": "hibernating", "supervisor": {"pid": os.getpid(), "start_time": start_time_of(os.getpid())}}
    (st.state_dir() / "servers").mkdir(parents=True, exist_ok=True)
    st.state_path(port).write_text(json.dumps(record, indent=1))
    assert main(["status"]) == 0
    err = capsys.readouterr().err
    assert f"port {port}" in err and f"supervisor (pid {os.getpid()}) still runs" in err, err
    assert f"sparktui stop --port {port}" in err, err


def test_a_guard_stop_reads_as_the_guards_not_as_a_crash(isolated, capsys):
    # it said "failed/stopped … exit: guard  (engine_dead: EngineDeadError…)": vLLM's error on the
    # guard's SIGTERM read as the cause; the guard's trip report names its line and when
    import time

    (st.state_dir() / "servers").mkdir(parents=True, exist_ok=True)
    dead = {"kind": "engine_dead", "message": "EngineDeadError: EngineCore encountered an issue"}
    exit = {"reason": "guard", "returncode": 1, "by": "guard", "failure": dead}
    trip = TRIP | {"line": "term", "threshold_gib": 9.0, "tripped_at": 1_700_000_000.0}
    st.write_state(st.state_path(18041), ended_record(18041, exit, trip))
    assert main(["status", "--all"]) == 0
    first, ended_line = capsys.readouterr().out.splitlines()[:2]
    when = time.strftime("%H:%M:%S", time.localtime(1_700_000_000.0))
    assert "stopped by the guard" in first and f"exit: guard (the term line, {when})" in first, first
    assert "failed" not in first and "EngineDeadError" not in first, first
    assert "guard trip at the term line (9.00 GiB)" in ended_line, ended_line
    assert "vLLM's engine_dead followed the guard's stop (its consequence, not the cause)" in ended_line
    assert main(["status", "--json"]) == 0  # the JSON keeps what was recorded, the ended line with it
    shown = json.loads(capsys.readouterr().out)[0]
    assert shown["exit"]["failure"]["kind"] == "engine_dead" and "its consequence" in shown["ended"]

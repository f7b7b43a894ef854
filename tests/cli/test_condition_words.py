"""`sparktui status` and the panel name a server's condition in the same words, for every condition:
the panel's server list said "failed (guard)" of a server the guard stopped while status said
"stopped by the guard", and "failed (exit_3)" where status said "failed". Both read a record the way
their readers do (a record whose supervisor is gone is lost) and render ConditionView.text()."""

from __future__ import annotations

import time

import pytest

from sparktui.commands.status import _line
from sparktui.runtime.records import state as st
from sparktui.runtime.records.protocol import StateRecord
from sparktui.ui.translate import server_entry, server_status
from tests.cli.test_status_cli import TRIP, ended_record

WEDGED_SINCE = 1_700_000_000.0
SINCE = time.strftime("%H:%M:%S", time.localtime(WEDGED_SINCE))


def running(status: str, phase: str, **more: object) -> StateRecord:
    record = ended_record(18100, {"reason": "stopped"}).to_dict() | {"status": status, "phase": phase, "exit": None}
    return StateRecord.model_validate(record | more)


def ended(exit: dict, trip: dict | None = None, phase: str = "stopped") -> StateRecord:
    record = ended_record(18100, exit, trip)
    record.phase = phase
    return record


# (record, whether its supervisor runs, the words both say)
CASES = {
    "guard": (ended({"reason": "guard", "returncode": -15, "by": "guard"}, TRIP), False, "stopped by the guard"),
    "killed": (ended({"reason": "killed", "returncode": -9, "by": "socket"}), False, "stopped (killed)"),
    "stopped": (ended({"reason": "stopped", "returncode": 0, "by": "socket"}), False, "stopped"),
    "crash": (
        ended({"reason": "failed", "returncode": 1, "failure": {"kind": "worker_died", "message": "Worker died"}}),
        False,
        "failed (worker_died)",
    ),
    "exit status": (ended({"reason": "exited", "returncode": 3}, phase="profiling"), False, "failed (exit status 3)"),
    "signal": (ended({"reason": "exited", "returncode": -11}), False, "failed (signal 11)"),
    "stopped as wedged": (ended({"reason": "wedged", "returncode": -15}), False, "failed (wedged)"),
    "supervisor died": (ended({"reason": "supervisor_died", "message": "it died"}), False, "lost"),
    "lost": (running("running", "ready"), False, "lost"),
    "wedged": (
        running("running", "ready", watch={"wedge": {"state": "wedged", "since": WEDGED_SINCE}}),
        True,
        f"wedged (since {SINCE})",
    ),
    "starting": (running("starting", "profiling"), True, "starting (profiling)"),
    "ready": (running("running", "ready"), True, "ready"),
}


def as_read(record: StateRecord, alive: bool) -> StateRecord:
    """The record as `list_states` gives it to both: `alive` set, a running one without a supervisor lost."""
    record = record.model_copy(deep=True)
    if alive:
        record.alive = True  # its supervisor runs (no process is started here)
        return record
    return st.with_liveness(record)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_status_names_the_condition_in_the_one_wording(isolated, case):
    record, alive, words = CASES[case]
    shown = _line(as_read(record, alive)).split("  ")
    assert shown[2] == words, shown


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_panel_names_the_condition_in_the_one_wording(isolated, case):
    record, alive, words = CASES[case]
    read = as_read(record, alive)
    assert server_entry(read).text() == words  # the server list
    assert server_status(read).text() == words  # the server pane and the footer


def test_status_says_how_far_a_failed_start_got(isolated):
    record, alive, _ = CASES["exit status"]
    shown = _line(as_read(record, alive)).split("  ")
    assert shown[2:4] == ["failed (exit status 3)", "during profiling"], shown

"""runtime/server/fallback.py: who is believed as a port's supervisor, with real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.host import proc
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.server import fallback
from tests.support import wait_for

pytestmark = pytest.mark.slow  # spawns processes


@pytest.fixture
def sleeps() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def identity(p: subprocess.Popen[bytes]) -> proc.ProcessIdentity:
    return proc.ProcessIdentity(p.pid, wait_for(lambda: proc.start_time_of(p.pid), 5, "it to start"))


def unmarked_record(supervisor: proc.ProcessIdentity, root: proc.ProcessIdentity) -> pr.StateRecord:
    """A record as a sparktui from before the tree mark wrote it: a tree, no mark."""
    return pr.StateRecord(
        status="running",
        port=18724,
        supervisor=pr.ProcessRef(pid=supervisor.pid, start_time=supervisor.start_time),
        guard=pr.GuardRecord(armed=True, state="watching", lines=GuardLines(None, None, None)),
        tree=pr.TreeRecord(pid=root.pid, start_time=root.start_time, members=[[root.pid, root.start_time]]),
    )


def test_a_supervisor_from_before_the_tree_mark_is_still_asked_when_the_tree_it_names_is_its_child(isolated, sleeps):
    # README: trees started by a sparktui before the mark are still stopped by their supervisor
    sleeps.append(subprocess.Popen(["sleep", "60"]))  # this process plays the supervisor, the sleep its tree
    me = proc.ProcessIdentity(os.getpid(), proc.start_time_of(os.getpid()) or 0)
    fallback.refuse_unproven_supervisor(unmarked_record(me, identity(sleeps[0])))  # believed: no error
    # The same record naming as the supervisor a process whose child that tree is not: refused
    sleeps.append(subprocess.Popen(["sleep", "60"]))
    with pytest.raises(st.NotTheRecorded) as exc:
        fallback.refuse_unproven_supervisor(unmarked_record(identity(sleeps[1]), identity(sleeps[0])))
    assert f"pid {sleeps[1].pid} (sleep" in str(exc.value) and "no tree mark" in str(exc.value)


def test_a_supervisor_before_vllm_starts_from_before_the_records_mark_is_asked_when_a_reaper_is_its_child(
    isolated, sleeps
):
    # A record with no tree yet, naming a reaper but no mark: a sparktui from before the record carried
    # it wrote that. Its reaper (a child running the reaper module) is what proves it
    me = proc.ProcessIdentity(os.getpid(), proc.start_time_of(os.getpid()) or 0)
    sleeps.append(subprocess.Popen(["sleep", "60"]))
    state = unmarked_record(me, identity(sleeps[0]))
    state.tree, state.reaper = None, pr.ProcessRef(pid=sleeps[0].pid, start_time=identity(sleeps[0]).start_time)
    with pytest.raises(st.NotTheRecorded) as exc:  # its child is no reaper
        fallback.refuse_unproven_supervisor(state)
    assert "no tree mark, and no reaper is its child" in str(exc.value)
    sleeps.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", fallback.REAPER_MODULE]))
    wait_for(lambda: fallback._reapers_of(os.getpid()), 5, "the reaper stand-in to start")
    fallback.refuse_unproven_supervisor(state)  # believed: no error
    state.reaper = None  # its reaper started, not yet named: proven by that child all the same
    fallback.refuse_unproven_supervisor(state)

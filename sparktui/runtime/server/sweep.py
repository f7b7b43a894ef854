"""What dead supervisors left: a state file of the wrong shape set aside, and the trees of lost servers
killed (pid + start time checked) and recorded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sparktui import files
from sparktui.runtime.host import proc, provenance
from sparktui.runtime.host.containment import remove_stale_scopes
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st

if TYPE_CHECKING:
    pass


def set_aside_unreadable(port: int) -> None:
    """A wrong-shaped state file on our port is moved aside (with a warning), never in the way."""
    path = st.state_path(port)
    try:
        st.read_state(path)
    except pr.ProtocolError:
        st.set_aside(path)


def sweep_lost_servers(message: str = "swept at the next launch: its supervisor had died") -> list[pr.StateRecord]:
    """Kill what supervisors that died left behind (identity-checked), and record it."""
    swept = []
    for state in st.list_states():
        if state.status != "lost" or state.tree is None:
            continue
        try:
            swept.append(sweep_lost(state, message))
        except provenance.Refused as exc:  # never blocks a launch: said, and the record kept for a look
            files.warn(str(exc))  # stderr and the panel
    remove_stale_scopes()
    return swept


def sweep_lost(state: pr.StateRecord, message: str) -> pr.StateRecord:
    """Kill what one dead supervisor left (pid + start time and tree mark checked) and record why
    it ended. provenance.Refused, the record left as it was, when it names what sparktui did not start."""
    report = proc.sweep_orphans(state.tree.as_proc_record()) if state.tree is not None else None
    if report is not None and report.refused:
        done = "What sparktui can prove it started was ended. " if report.signals else ""
        where = f"the state record {st.state_path(state.port)}"
        raise provenance.Refused(provenance.refused_message(state.port, where, report.refused, done))
    lost_reason = state.lost_reason
    state.status, state.phase, state.updated_at = "exited", "stopped", time.time()
    state.exit = pr.ExitRecord(
        reason="supervisor_died",
        stop=report.to_dict() if report else None,
        message=f"{message} ({lost_reason})" if lost_reason else message,
    )
    state.lost_reason = None
    if state.salvaged is None:  # a record that did not read whole is left as it is (never lost data)
        st.write_state(st.state_path(state.port), state)
    return state

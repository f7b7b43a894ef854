"""Stop and kill without the supervisor's help: it took the request and cannot answer (stopped
by SIGSTOP, starved, dying), or only its socket is left (the state dir gone).

The tree recorded in the state (pid + start time of each member, its cgroup) is ended here, by
identity and provenance (each process carries the record's tree mark: runtime/host/provenance.py);
then the supervisor itself (found by its record or by SO_PEERCRED on its own socket, pid + start
time checked, and proven by its children: its reaper and tree carry the mark) gets SIGKILL, and
its reaper sweeps whatever the record missed. Nothing else is signalled: what a damaged or forged
record names beyond that is refused (provenance.Refused), and the record is left as it was."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from sparktui import files
from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.host import proc, provenance
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st

REAPER_MODULE = "sparktui.runtime.server.reaper"
GONE_WAIT_S = 10.0
# A supervisor saves the record naming its reaper right after starting it, and takes requests only
# after that save: a record with no reaper is re-read this long before it is refused
REAPER_WAIT_S = 1.0


def _reapers_of(pid: int) -> list[proc.ProcessIdentity]:
    """The supervisor's reaper(s): its children running this package's reaper module."""
    out = []
    for info in proc.scan_processes():
        if info.ppid != pid:
            continue
        try:
            cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if REAPER_MODULE.encode() in cmdline:
            out.append(proc.ProcessIdentity(info.pid, info.start_time))
    return out


def _marks_of_children(pid: int) -> set[str]:
    """The tree marks the live children of `pid` carry (runtime/host/provenance.py)."""
    found: set[str] = set()
    for child in proc.scan_processes():
        if child.ppid == pid and not child.dead:
            found |= provenance.marks_in(provenance.environ_of(child.pid))
    return found


def record_mark(state: pr.StateRecord | None) -> str | None:
    """The tree mark a record holds (None: none, or none of the shape sparktui gives marks): its
    tree's, or before vLLM starts the record's own (a supervisor writes it from its first save)."""
    if state is None:
        return None
    return provenance.valid_mark((state.tree.model_extra or {}).get("mark") if state.tree else state.mark)


def supervisor_doubt(pid: int, mark: str | None, *, recorded: bool = True) -> str | None:
    """Why process `pid` is not provably the supervisor of a tree sparktui started (None: it is):
    a supervisor's reaper and vLLM tree are its children and carry the tree's mark, the record's
    `mark` (with no record, any)."""
    marks = _marks_of_children(pid)
    if not recorded:
        return None if marks else "none of its children carries a sparktui tree mark"
    if mark is None:
        return "the record has no tree mark"
    return None if mark in marks else "none of its children carries this record's tree mark"


def _parent_of_its_tree(pid: int, tree: pr.TreeRecord) -> bool:
    """`pid` is the parent of the recorded tree's root (pid + start time) or of a reaper: what is
    left to tell a supervisor from before the tree mark by."""
    root = proc.read_stat(tree.pid)
    if root is not None and not root.dead and root.ppid == pid and root.start_time == tree.start_time:
        return True
    return bool(_reapers_of(pid))


def _await_reaper(state: pr.StateRecord) -> tuple[pr.StateRecord, str | None]:
    """A record naming neither a tree nor a reaper: the window between a supervisor's first save and
    the one naming the reaper it starts, which comes before it takes requests. Re-read for
    REAPER_WAIT_S: the newer record (same supervisor) naming a reaper or a tree, to be proven as
    usual; or (the record as it was, None) once a child carries its mark (the reaper started, not
    saved yet); or (the record, why) when neither came."""
    pid = state.supervisor.pid
    deadline = time.monotonic() + REAPER_WAIT_S
    while True:
        mark = record_mark(state)
        if (supervisor_doubt(pid, mark) is None) if mark is not None else bool(_reapers_of(pid)):
            return state, None
        if time.monotonic() >= deadline:
            why = f"its record names no reaper, and none was started within {REAPER_WAIT_S:g} s"
            return state, why + " (a supervisor names its reaper before it takes requests)"
        time.sleep(0.05)
        try:
            again = st.read_state(st.state_path(state.port))
        except pr.ProtocolError:
            again = None
        if again is not None and again.supervisor == state.supervisor and (again.tree or again.reaper):
            return again, None


def _doubt(state: pr.StateRecord) -> str | None:
    """Why the supervisor of a record naming its tree or reaper is not proven (None: it is)."""
    pid = state.supervisor.pid
    if (mark := record_mark(state)) is not None:
        return supervisor_doubt(pid, mark)
    if state.tree is None:
        # a supervisor from before the record carried its mark: its reaper is its child
        return None if _reapers_of(pid) else "the record has no tree mark, and no reaper is its child"
    if _parent_of_its_tree(pid, state.tree):
        return None  # a supervisor from before the mark (README): asked, as before; it is signalled by nothing here
    return "the record has no tree mark, and neither the tree it names nor a reaper is its child"


def refuse_unproven_supervisor(state: pr.StateRecord) -> None:
    """Before a request is believed (stop, kill, guard): the supervisor a record names (or that named
    itself) must be proven sparktui's by its marked children, else NotTheRecorded and it is told nothing:
    a process of this user holding the socket, named in a record it wrote, would answer "stopped" with
    nothing signalled. Before vLLM starts (no tree yet) the reaper, started with the record's mark,
    proves it; a record with no reaper yet is re-read until one is named (_await_reaper)."""
    pid = state.supervisor.pid
    if state.tree is None and state.reaper is None:
        state, doubt = _await_reaper(state)  # proven, refused, or a newer record naming its reaper
        if state.tree is not None or state.reaper is not None:
            doubt = _doubt(state)
    else:
        doubt = _doubt(state)
    if doubt is None:
        return
    info = proc.read_stat(pid)
    who = f"pid {pid} ({info.comm if info else '?'}, {provenance.owner_of(pid)})"
    path = st.state_path(state.port)
    fix = (
        f"look at {path} and remove it"
        if path.exists()
        else f"it named itself so (no state record): end pid {pid} yourself if it is not yours"
    )
    raise st.NotTheRecorded(
        f"port {state.port}: the process named as its supervisor, {who}, cannot be proven sparktui's ({doubt}); "
        f"it was left alone, told nothing, and nothing was signalled. If no server of yours runs on that port, {fix}"
    )


def _wait_gone(idents: list[proc.ProcessIdentity], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(i.is_alive() for i in idents):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def end_without_supervisor(
    state: pr.StateRecord | None, port: int, how: str, why: str, pid: int | None, grace_s: float = 5.0
) -> pr.StateRecord:
    """End the server on `port` whose supervisor cannot answer (`why`); its final record, written
    to the state file where it can be (a read-only or gone state dir: returned only)."""
    sup: proc.ProcessIdentity | None = None
    if state is not None and state.supervisor.start_time is not None:
        sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time)
    elif pid is not None and (started := proc.start_time_of(pid)) is not None:
        sup = proc.ProcessIdentity(pid, started)  # SO_PEERCRED said it is ours (state.connect)
    refused: list[str] = []
    if sup is not None and (info := proc.read_stat(sup.pid)) is not None and sup.matches(info):
        doubt = supervisor_doubt(sup.pid, record_mark(state), recorded=state is not None)
        if doubt is not None:
            refused.append(f"supervisor pid {sup.pid} ({info.comm}, {provenance.owner_of(sup.pid)}: {doubt})")
            sup = None
    reapers = _reapers_of(sup.pid) if sup is not None and sup.is_alive() else []
    if state is not None and state.reaper is not None and state.reaper.start_time is not None:
        recorded = proc.ProcessIdentity(state.reaper.pid, state.reaper.start_time)
        if recorded not in reapers:
            reapers.append(recorded)
    report: proc.StopReport | None = None
    if state is not None and state.tree is not None:
        record = state.tree.as_proc_record()
        if not record.get("boot_id") or record["boot_id"] == proc.boot_id():
            tree = proc.ProcessTree.from_record(record)
            report = tree.kill() if how == "kill" else tree.stop(grace_s)
            refused = tree.refused + refused
    if sup is not None:
        proc.signal_process(sup, signal.SIGKILL)  # delivered to a stopped process too
        _wait_gone([sup], GONE_WAIT_S)
    _wait_gone(reapers, GONE_WAIT_S)  # the reaper sweeps the tree it was told of (the state dir gone)
    if refused:  # a damaged or forged record: said, exit 2, and the file is not rewritten from it
        where = f"the state record {st.state_path(port)}" if state is not None else f"port {port}'s socket"
        ended = bool(report and report.signals) or sup is not None
        done = f"{why[:1].upper()}{why[1:]}; what sparktui can prove it started was ended. " if ended else ""
        raise provenance.Refused(provenance.refused_message(port, where, refused, done))
    killed = f"; sparktui killed its supervisor (pid {sup.pid})" if sup is not None else ""
    message = f"{why}: sparktui {how} ended the recorded tree itself{killed}"
    if state is None:
        final = pr.StateRecord(
            status="exited",
            phase="stopped",
            port=port,
            supervisor=pr.ProcessRef(pid=sup.pid if sup else 0, start_time=sup.start_time if sup else None),
            guard=pr.GuardRecord(armed=False, state="disarmed", lines=GuardLines(None, None, None)),
        )
        message = f"{why}: no state was recorded (state dir gone){killed}, and its reaper swept the tree"
    else:
        final = state.model_copy(deep=True)
        final.status, final.phase, final.updated_at = "exited", "stopped", time.time()
        final.guard.state = "disarmed"
    final.exit = pr.ExitRecord(
        reason="killed" if how == "kill" else "stopped",
        by=f"sparktui {how} (supervisor not answering)",
        stop=report.to_dict() if report else None,
        message=message,
    )
    final.alive, final.lost_reason = False, None
    if state is not None and state.salvaged is None:  # a record that did not read whole is left as it is
        try:
            st.write_state(st.state_path(port), final)
        except OSError as exc:
            files.WARNINGS.tell(
                f"the final record of port {port} could not be written ({exc.strerror}); shown here only"
            )
    files.WARNINGS.tell(message)
    return final


def peer_is_ours(pid: int) -> bool:
    """The process runs as our user or root (a pid from a record is checked again before use)."""
    try:
        return st.trusted_uid(os.stat(f"/proc/{pid}").st_uid)
    except OSError:
        return False

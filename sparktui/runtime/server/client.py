"""What the CLI and the panel ask of a running server's supervisor: its state, stop, kill, guard
changes; and the sweep of what a dead supervisor left. Kept apart from the supervisor itself so
`sparktui status`, `stop` and `kill` start without importing the guard, the fit and the log parser
(bench/cli_startup.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from sparktui import files
from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.launch_id import not_this_launch
from sparktui.runtime.server import fallback
from sparktui.runtime.server.sweep import sweep_lost

if TYPE_CHECKING:
    from sparktui.core.guard_lines import LineName


def read(port: int | None = None) -> pr.StateRecord:
    """The recorded state of the server on `port` (or the only live one)."""
    return st.find_state(port)


def attach(port: int | None = None) -> pr.StateRecord:
    """Live state straight from the supervisor (falls back to the file if it does not answer)."""
    state = st.find_state(port)
    if not state.alive:
        return state
    return st.ask_live(state.port, metrics=True) or state


def stop(port: int | None = None, *, wait: float = 60.0, only_id: str | None = None) -> pr.StateRecord:
    """Stop (SIGTERM the tree, SIGKILL after the grace period) and return the final state.
    `only_id`: only if its supervisor has this launch id (a UserError, nothing done, otherwise)."""
    return _command(pr.StopRequest(cmd="stop", wait=wait, only_id=only_id), port)


def kill(port: int | None = None, *, wait: float = 30.0, only_id: str | None = None) -> pr.StateRecord:
    """SIGKILL the whole tree at once and return the final state (`only_id`: as for stop)."""
    return _command(pr.KillRequest(cmd="kill", wait=wait, only_id=only_id), port)


def _command(req: pr.StopRequest | pr.KillRequest, port: int | None) -> pr.StateRecord:
    try:
        state = st.find_state(port)
    except st.UntrustedFolder:
        raise  # nothing is done from a folder others may write in, not even from its socket
    except UserError as exc:
        # A record that does not read whole and no answer: what stop and kill need of it (the tree,
        # the supervisor) is enough to end the server; the file is left as it is
        salvaged = st.salvage(port, str(exc)) if port is not None and isinstance(exc, pr.ProtocolError) else None
        if salvaged is None:
            # No record and no answer: a supervisor that cannot answer may still hold the port's socket
            # (its state dir gone); SO_PEERCRED names it, and it is ours
            if port is None or req.only_id is not None:
                raise
            pid = st.listener_pid(port)
            if pid is None or not fallback.peer_is_ours(pid):
                raise
            return fallback.end_without_supervisor(None, port, req.cmd, "its supervisor does not answer", pid)
        files.WARNINGS.tell(f"{exc}; ending the recorded tree all the same")
        state = st.with_liveness(salvaged)
    if req.only_id is not None and state.launch_id != req.only_id:
        raise UserError(not_this_launch(state.port, state.supervisor.pid, state.launch_id, req.only_id))
    if not state.alive:
        if state.status == "lost":
            return sweep_lost(state, f"swept by `sparktui {req.cmd}`: its supervisor had died")
        raise st.NoLiveServer(f"the server on port {state.port} is not running (status {state.status})")
    try:
        reply = st.request(
            state.port,
            req,
            timeout=req.wait + 5,
            expect_pid=state.supervisor.pid,
            vouch=partial(fallback.refuse_unproven_supervisor, state),
        )
    except st.Unanswered as exc:
        grace = state.guard.lines.grace_s
        return fallback.end_without_supervisor(state, state.port, req.cmd, str(exc), exc.pid, grace)
    if not reply.ok:  # the supervisor answering is not the one recorded (only_id), or it refused
        raise UserError(f"port {state.port}: {reply.error}")
    sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
    deadline = time.monotonic() + 10
    while sup.is_alive() and time.monotonic() < deadline:  # it is closing its socket and reaper
        time.sleep(0.02)
    try:
        final = st.read_state(st.state_path(state.port))
    except (pr.ProtocolError, OSError):
        final = None
    told = reply.state
    if (
        told is not None
        and told.status == "exited"
        and (final is None or final.status != "exited" or final.supervisor.pid != told.supervisor.pid)
    ):
        # The supervisor could not write its final record (a full disk, a read-only state dir):
        # what it told us is the truth; its reaper writes it once there is room
        files.WARNINGS.tell(
            f"port {state.port}: the final record is not on disk yet (the state dir is full or read-only); "
            "shown as the supervisor told it"
        )
        told.alive = False
        return told
    final = final or told or state
    return st.with_liveness(final)


def set_guard(
    port: int | None = None,
    *,
    armed: bool | None = None,
    lines: Mapping[LineName, float | None] | None = None,
    kernel: str | None = None,
    force: bool = False,
) -> pr.StateRecord:
    """Arm/disarm the memory guard of a running server, move its lines and/or set its kernel
    tripwire's mode; its state afterwards."""
    return change_guard(port, armed=armed, lines=lines, kernel=kernel, force=force)[0]


def lines_above_free(lines: Mapping[LineName, float | None], available: int) -> list[str]:
    """The stop lines (term, kill) given at or above MemAvailable now: the guard would stop the
    server at its next sample. In words, one per line."""
    gib = 1 << 30
    out = []
    stops: tuple[tuple[LineName, str], ...] = (("term_below_gib", "--term-below"), ("kill_below_gib", "--kill-below"))
    for name, flag in stops:
        value = lines.get(name)
        if value is not None and value * gib >= available:
            out.append(
                f"{flag} {value:g}: MemAvailable is {available / gib:.1f} GiB now, so the guard would stop the "
                "server at once"
            )
    return out


def refuse_lines_above_free(lines: Mapping[LineName, float | None] | None, force: bool) -> None:
    """UserError naming each stop line above what is free now, unless `force`."""
    if not lines or force:
        return
    from sparktui.runtime.host.memory import read_memory

    above = lines_above_free(lines, read_memory(psi=False).mem_available)
    if above:
        raise UserError("; ".join(above) + "; give a lower line, or pass --force if you mean to stop it")


def change_guard(
    port: int | None = None,
    *,
    armed: bool | None = None,
    lines: Mapping[LineName, float | None] | None = None,
    kernel: str | None = None,
    force: bool = False,
) -> tuple[pr.StateRecord, list[str]]:
    """set_guard(), with the notes on lines turned off to make room for the ones given. A stop line
    above what is free now is refused (UserError) unless `force`."""
    refuse_lines_above_free(lines, force)
    state = st.find_state(port)
    if not state.alive:
        raise UserError(f"the server on port {state.port} is not running (status {state.status})")
    change = st.guard_request(armed, lines, kernel)
    vouch = partial(fallback.refuse_unproven_supervisor, state)
    reply = st.request(state.port, change, timeout=10, expect_pid=state.supervisor.pid, vouch=vouch)
    if not reply.ok or reply.state is None:
        raise UserError(f"port {state.port}: the guard was not changed: {reply.error}")
    reply.state.alive = True
    return reply.state, reply.notes

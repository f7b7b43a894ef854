"""The supervisor's Python API for the panel and the commands: launch one detached, read or attach to its
state, stop, kill, move the guard, restart. Each call reaches the supervisor by its socket."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.launch_id import ENV as LAUNCH_ID_ENV
from sparktui.runtime.records.launch_id import not_this_launch
from sparktui.runtime.server import fallback
from sparktui.runtime.server.preflight import preflight
from sparktui.runtime.server.sweep import set_aside_unreadable, sweep_lost, sweep_lost_servers

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile


ERROR_FILE_ENV = "SPARKTUI_ERROR_FILE"  # where a detached supervisor's refusal goes for launch() (cli.main writes it)


PACKAGE_ROOT = Path(__file__).resolve().parents[3]


def launch(
    profile: Profile,
    serve: ServeConfig | None = None,
    *,
    detach: bool = True,
    force: bool = False,
    timeout: float = 30.0,
    launch_id: str | None = None,
) -> pr.StateRecord:
    """Start a supervisor for `profile` and return its first recorded state.

    detach=True: a new session that outlives the caller (the TUI, an SSH session). The profile as
    given (unsaved edits included) is saved next to the state and the child loads that copy.
    `launch_id` (runtime/records/launch_id.py) is recorded in its state: a stop naming it acts on it alone.
    """
    if not detach:
        raise UserError("launch(detach=False) would block: use serve_foreground()")
    from sparktui.core.profiles import save_profile

    serve = serve if serve is not None else profile.serve
    st.writable_state_dir()  # a read-only state dir: refused here, naming it
    set_aside_unreadable(serve.port)
    sweep_lost_servers()
    pre = preflight(profile, serve, force=force)  # refuse here, where the caller sees it
    port = serve.port
    saved = st.state_dir() / "profiles" / str(port) / f"{st.safe_name(profile.name)}.toml"
    sup_log = st.state_dir() / "supervisor" / f"{port}.log"
    # Why this child refused, if it does: its own file (two launches on one port share sup_log,
    # and the winner's progress lines can follow the loser's error there)
    error_file = sup_log.with_name(f"{port}-{os.getpid()}-{time.monotonic_ns()}.error")
    argv = [sys.executable, "-m", "sparktui", "serve", str(saved)] + (["--force"] if force else [])
    try:
        save_profile(dataclasses.replace(profile, serve=serve), saved)
        out = open(sup_log, "ab")  # noqa: SIM115 (closed right after the child has it)
        out.write(b"")
        error_file.write_bytes(b"")  # room for the child's refusal, if it has one
    except OSError as exc:
        raise UserError(
            f"state dir {st.state_dir()}: cannot write {exc.filename or saved} ({exc.strerror}); free some "
            "space there (or point SPARKTUI_STATE_DIR elsewhere) and launch again"
        ) from None
    with out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(PACKAGE_ROOT),
            close_fds=True,
            env={
                **{k: v for k, v in os.environ.items() if k != LAUNCH_ID_ENV},
                "SPARKTUI_DETACHED": "1",
                ERROR_FILE_ENV: str(error_file),
                **({LAUNCH_ID_ENV: launch_id} if launch_id else {}),
            },
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = st.read_state(st.state_path(port))
        except pr.ProtocolError:
            state = None  # an old wrong-shaped file, about to be replaced by the child
        if state is not None and state.supervisor.pid == child.pid and state.tree is not None:
            error_file.unlink(missing_ok=True)
            state.preflight_warnings = pre.warnings
            return st.with_liveness(state)
        if child.poll() is not None:
            message: str | None = None
            try:
                message = error_file.read_text(errors="replace").strip() or None
                error_file.unlink()
            except OSError:
                pass
            if message is None:
                try:
                    tail = sup_log.read_text(errors="replace").strip().splitlines()[-3:]
                except OSError:
                    tail = []
                message = next(
                    (line[len("sparktui: ") :] for line in reversed(tail) if line.startswith("sparktui: ")), None
                )
            raise UserError(message or f"the supervisor exited with status {child.returncode}; see {sup_log}")
        time.sleep(0.05)
    error_file.unlink(missing_ok=True)
    raise UserError(f"the supervisor did not record a start within {timeout:.0f} s; see {sup_log}")


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
    except UserError:
        # No record and no answer: a supervisor that cannot answer may still hold the port's socket
        # (its state dir gone); SO_PEERCRED names it, and it is ours
        if port is None or req.only_id is not None:
            raise
        pid = st.listener_pid(port)
        if pid is None or not fallback.peer_is_ours(pid):
            raise
        return fallback.end_without_supervisor(None, port, req.cmd, "its supervisor does not answer", pid)
    if req.only_id is not None and state.launch_id != req.only_id:
        raise UserError(not_this_launch(state.port, state.supervisor.pid, state.launch_id, req.only_id))
    if not state.alive:
        if state.status == "lost":
            return sweep_lost(state, f"swept by `sparktui {req.cmd}`: its supervisor had died")
        raise UserError(f"the server on port {state.port} is not running (status {state.status})")
    try:
        reply = st.request(state.port, req, timeout=req.wait + 5)
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
        print(
            f"sparktui: warning: port {state.port}: the final record is not on disk yet (the state dir "
            "is full or read-only); shown as the supervisor told it",
            file=sys.stderr,
        )
        told.alive = False
        return told
    final = final or told or state
    return st.with_liveness(final)


def set_guard(
    port: int | None = None, *, armed: bool | None = None, lines: dict[str, float | None] | None = None
) -> pr.StateRecord:
    """Arm/disarm the memory guard of a running server and/or move its lines; its state afterwards."""
    return change_guard(port, armed=armed, lines=lines)[0]


def change_guard(
    port: int | None = None, *, armed: bool | None = None, lines: dict[str, float | None] | None = None
) -> tuple[pr.StateRecord, list[str]]:
    """set_guard(), with the notes on lines turned off to make room for the ones given."""
    state = st.find_state(port)
    if not state.alive:
        raise UserError(f"the server on port {state.port} is not running (status {state.status})")
    reply = st.request(state.port, st.guard_request(armed, lines), timeout=10)
    if not reply.ok or reply.state is None:
        raise UserError(f"port {state.port}: the guard was not changed: {reply.error}")
    reply.state.alive = True
    return reply.state, reply.notes


def restart(port: int | None = None, *, force: bool = False) -> pr.StateRecord:
    """Stop the server and launch it again from the profile it was started with."""
    from sparktui.core.profiles import load_profile

    state = st.find_state(port)
    if not state.profile_path:
        raise UserError(f"the server on port {state.port} has no recorded profile to restart from")
    profile = load_profile(state.profile_path)
    if state.alive:
        stop(state.port)
    return launch(profile, detach=True, force=force)

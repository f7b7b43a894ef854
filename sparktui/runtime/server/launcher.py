"""Launching a server: a detached supervisor for a profile (preflight first, where the caller sees a
refusal), and a restart from the profile a server was started with."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.errors import UserError
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st
from sparktui.runtime.records.launch_id import ENV as LAUNCH_ID_ENV
from sparktui.runtime.server.preflight import preflight
from sparktui.runtime.server.sweep import set_aside_unreadable, sweep_lost_servers

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile
from sparktui.runtime.server.client import stop

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

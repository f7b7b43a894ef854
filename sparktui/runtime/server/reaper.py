"""Kills a tree if the process that owns it (a supervisor, `sparktui guard`) dies without goodbye.

The owner starts this in its own session with a pipe on stdin, before it starts the command, and
writes the tree's record (proc.ProcessTree.to_record(), one JSON line) into the pipe whenever it
changes. When the owner ends normally it writes "done" and closes the pipe; if it is killed
(SIGKILL included), the pipe just closes, and this kills the last recorded tree: its cgroup at
once with cgroup.kill where it has one, and every recorded process (pid + start time checked, see
proc.sweep_orphans). PR_SET_PDEATHSIG already took the root down; the sweep catches its
children (vLLM's EngineCore and workers, daemons that called setsid).

With STATE_FILE (a supervisor's), the record there is the fallback, and what happened is written
back to it. The pipe is the primary source, so a deleted state dir does not stop the sweep.

    python -m sparktui.runtime.server.reaper [STATE_FILE]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parents[3]


class Reaper:
    """The owner's side: start the reaper, keep it told about the tree, dismiss it at the end."""

    def __init__(self, state_file: Path | None = None) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "sparktui.runtime.server.reaper", *([str(state_file)] if state_file else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(PACKAGE_ROOT),
            close_fds=True,
        )
        self.pid = self.popen.pid
        self._told: str | None = None

    def tell(self, record: dict[str, Any]) -> None:
        """The tree's latest record (only written when it changed; never blocks for long)."""
        line = json.dumps(record, default=str)
        if line == self._told or self.popen.stdin is None:
            return
        try:
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.flush()
            self._told = line
        except OSError:
            pass  # the reaper is gone; the state file and the next launch still cover the tree

    def dismiss(self, unsaved: str | None = None) -> None:
        """All is well: the reaper exits without touching the tree. `unsaved`: the owner's final
        state record, which it could not write (a full disk, a read-only state dir): the reaper
        writes it once there is room (FINAL_RETRY_S at most), then exits."""
        try:
            if self.popen.stdin is not None:
                if unsaved is not None:
                    self.popen.stdin.write(b"final " + unsaved.replace("\n", " ").encode() + b"\n")
                self.popen.stdin.write(b"done\n")
                self.popen.stdin.close()
        except OSError:
            pass
        if unsaved is not None:
            return  # it lives on to write the record; reaped by init once it has
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def kill(self) -> None:
        """For tests of the owner's death: as if the reaper itself had been killed."""
        os.kill(self.pid, signal.SIGKILL)


FINAL_RETRY_S = 600.0  # how long an unwritten final record is retried (a full disk may take a while)
_FINAL: list[str] = []


def read_pipe() -> tuple[bool, dict[str, Any] | None]:
    """Lines until EOF: (whether "done" was said, the last tree record); a "final" record the
    owner could not write is kept in _FINAL."""
    record: dict[str, Any] | None = None
    for raw in sys.stdin.buffer:
        line = raw.strip()
        if line == b"done":
            return True, record
        if line.startswith(b"final "):
            _FINAL.append(line[len(b"final ") :].decode(errors="replace"))
            continue
        if line.startswith(b"{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                record = parsed
    return False, record


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C meant for the owner is not for us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a `kill` of the session must not stop the sweep
    path = Path(argv[0]) if argv else None
    done, record = read_pipe()  # blocks until the owner closes the pipe
    if done:
        if _FINAL and path is not None:
            write_final_when_there_is_room(path, _FINAL[-1])
        return 0
    from sparktui.runtime.host.proc import sweep_orphans
    from sparktui.runtime.records.protocol import ExitRecord, ProtocolError, StateRecord
    from sparktui.runtime.records.state import read_state, write_state

    state: StateRecord | None = None
    if path is not None:
        try:
            state = read_state(path)
        except (ProtocolError, OSError):
            state = None
    if record is None and state is not None and state.running and state.tree is not None:
        record = state.tree.as_proc_record()
    if record is None:
        return 0
    report = sweep_orphans(record)
    if path is None or state is None or not state.running:
        return 0
    state.status, state.phase, state.updated_at = "exited", "stopped", time.time()
    state.exit = ExitRecord(
        reason="supervisor_died",
        stop=report.to_dict(),
        message="the supervisor died; its reaper killed the server's process tree",
    )
    try:
        write_state(path, state)
    except OSError:
        pass  # the tree is gone, which is what matters; the next reader calls it lost
    return 0


def write_final_when_there_is_room(path: Path, text: str, timeout: float = FINAL_RETRY_S) -> bool:
    """Write the owner's final record once the disk lets us; never over a newer launch's record."""
    from sparktui.runtime.records.protocol import ProtocolError, parse_state
    from sparktui.runtime.records.state import read_state, write_state

    try:
        final = parse_state(text, "the final record")
    except ProtocolError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            current = read_state(path)
        except (ProtocolError, OSError):
            current = None
        if current is not None and current.supervisor.pid != final.supervisor.pid:
            return False  # a new launch on the port: its record is the one that counts
        try:
            write_state(path, final)
            return True
        except OSError:
            time.sleep(1.0)
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

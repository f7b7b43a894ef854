"""Kills a server's tree if its supervisor dies without saying goodbye.

The supervisor starts this in its own session with a pipe on stdin, before it starts vLLM. When
the supervisor ends normally it writes "done" and closes the pipe; if the supervisor is killed,
the pipe just closes, and this sweeps every process recorded in the state file (pid + start time
checked, see proc.sweep_orphans) and records what happened. PR_SET_PDEATHSIG already took the
API server down; the sweep catches its EngineCore and workers, which vLLM leaves running.

    python -m sparktui.runtime.reaper STATE_FILE
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C meant for the supervisor is not for us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    path = Path(argv[0])
    said = sys.stdin.buffer.read()  # blocks until the supervisor closes the pipe
    if said.strip() == b"done":
        return 0
    from sparktui.runtime.protocol import ExitRecord, ProtocolError
    from sparktui.runtime.state import read_state, write_state

    try:
        state = read_state(path)
    except ProtocolError:
        state = None
    if state is None or not state.running or state.tree is None:
        return 0
    from sparktui.runtime.proc import sweep_orphans

    report = sweep_orphans(state.tree.as_proc_record())
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

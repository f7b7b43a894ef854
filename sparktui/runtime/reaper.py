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
    from sparktui.runtime.proc import sweep_orphans
    from sparktui.runtime.state import RUNNING, read_state, write_state

    state = read_state(path)
    if state is None or state.get("status") not in RUNNING or not state.get("tree"):
        return 0
    report = sweep_orphans(state["tree"])
    state.update(
        status="exited",
        phase="stopped",
        updated_at=time.time(),
        exit={
            "reason": "supervisor_died",
            "returncode": None,
            "stop": report.to_dict(),
            "message": "the supervisor died; its reaper killed the server's process tree",
        },
    )
    write_state(path, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

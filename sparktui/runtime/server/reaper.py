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

While the owner lives, the reaper also stands in for its guard: given the guard's heartbeat
(--beat-fd, state.beat_path) and kill line, when the heartbeat stops (the supervisor stopped by
SIGSTOP or starved) it samples MemAvailable itself and kills the tree at the kill line. It learns
that the heartbeat stopped from an alarm the guard keeps pushing forward (--alarm-fd, a timerfd:
runtime/host/deadline.py), so it sleeps while the guard beats.

    python -m sparktui.runtime.server.reaper [--beat-fd N] [--alarm-fd N] [STATE_FILE]
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

from sparktui.runtime.host.provenance import TREE_MARK_ENV
from sparktui.runtime.records.beat import LINE_BYTES, NO_BEAT, Beat, parse_beat

PACKAGE_ROOT = Path(__file__).resolve().parents[3]


class Reaper:
    """The owner's side: start the reaper, keep it told about the tree, dismiss it at the end."""

    def __init__(
        self,
        state_file: Path | None = None,
        *,
        beat_fd: int | None = None,
        alarm_fd: int | None = None,
        mark: str | None = None,
    ) -> None:
        fds = {"--beat-fd": beat_fd, "--alarm-fd": alarm_fd}
        options = [part for flag, fd in fds.items() if fd is not None for part in (flag, str(fd))]
        path = [str(state_file)] if state_file else []
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "sparktui.runtime.server.reaper", *options, *path],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(PACKAGE_ROOT),
            close_fds=True,
            # the tree's mark (runtime/host/provenance.py): its owner is the parent of a marked process
            env={**os.environ, TREE_MARK_ENV: mark} if mark else None,
            pass_fds=tuple(fd for fd in fds.values() if fd is not None),
        )
        self.pid = self.popen.pid
        self._told: str | None = None
        self._told_guard: tuple[int | None] | None = None  # None: never told

    def tell_guard(self, kill_below: int | None) -> None:
        """The kill line (bytes of MemAvailable) to act on if the guard's heartbeat stops; None:
        the guard is disarmed or done, nothing to stand in for."""
        if (kill_below,) == self._told_guard or self.popen.stdin is None:
            return
        try:
            self.popen.stdin.write(json.dumps({"guard": {"kill_below": kill_below}}).encode() + b"\n")
            self.popen.stdin.flush()
            self._told_guard = (kill_below,)
        except OSError:
            pass

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


# The guard's stand-in: when the supervisor's heartbeat (state.beat_path) is older than STALE_S
# the reaper samples MemAvailable itself, every STANDIN_EVERY_S, and kills the tree at the kill line.
STALE_S = 1.0
BEAT_SLACK_S = 0.25  # the guard's heartbeat pace while it samples often (guard_wiring.BEAT_EVERY_S)
# Without the guard's alarm (host/deadline.py: no timerfd here) the heartbeat is looked at on a timer:
REST_EVERY_S = 0.5  # how often, at least, the heartbeat is looked at while it is fresh
REST_MAX_S = 5.0  # ... and at most: a fresh heartbeat that plans a long gap is looked at once it could be late
STANDIN_EVERY_S = 0.01


def late_after(plan: float) -> float:
    """Seconds after a heartbeat that plans a gap of `plan` s at which it is late: the guard stopped."""
    return max(0.0, plan - BEAT_SLACK_S) + STALE_S


class Pipe:
    """What the owner said: the last tree record, the kill line, a final record; "done" or EOF."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buffer = b""
        self.record: dict[str, Any] | None = None
        self.kill_below: int | None = None
        self.done = False
        self.closed = False

    def read(self) -> None:
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.closed = True
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for raw in lines:
            self.line(raw.strip())

    def line(self, line: bytes) -> None:
        if line == b"done":
            self.done = self.closed = True
        elif line.startswith(b"final "):
            _FINAL.append(line[len(b"final ") :].decode(errors="replace"))
        elif line.startswith(b"{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                return
            if isinstance(parsed, dict) and isinstance(parsed.get("guard"), dict):
                kill = parsed["guard"].get("kill_below")
                self.kill_below = int(kill) if isinstance(kill, int | float) else None
            elif isinstance(parsed, dict):
                self.record = parsed


def read_pipe(
    beat_fd: int | None = None, path: Path | None = None, alarm_fd: int | None = None
) -> tuple[bool, dict[str, Any] | None]:
    """Until the owner says "done" or its pipe closes: (whether "done" was said, the last tree
    record). Meanwhile, with a heartbeat fd and a kill line, stand in for a guard that stopped.

    With the guard's alarm (host/deadline.py: a timer the guard pushes to late_after() at each
    heartbeat, before writing it) the reaper sleeps until the alarm rings or the owner writes, not on
    a timer: a heartbeat stamped after the alarm last rang was armed after it, so it will ring when
    that heartbeat is late. Otherwise (no alarm, or none armed since it rang) it looks on a timer."""
    import select

    if alarm_fd is not None:
        from sparktui.runtime.host.deadline import expired
    pipe = Pipe()
    poller = select.poll()
    poller.register(pipe.fd, select.POLLIN)
    if alarm_fd is not None:
        poller.register(alarm_fd, select.POLLIN)
    rang_at = float("-inf")  # CLOCK_BOOTTIME after the alarm's last ring was read
    acted = False
    while not pipe.closed:
        wait: float | None = None  # nothing to stand in for: only the owner's words change that
        if beat_fd is not None and pipe.kill_below is not None and pipe.record is not None and not acted:
            stamp, plan, alarmed = _beat(beat_fd)
            # stale: no heartbeat late_after(plan) after the last (seldom at rest: the guard plans up
            # to guard.STEADY_EVENT_INTERVAL between samples)
            age = None if stamp is None else _boottime() - stamp
            overdue = None if age is None else age - late_after(plan)
            # the alarm was pushed for this heartbeat, after it last rang: it rings when this one is late
            on_alarm = alarm_fd is not None and alarmed and stamp is not None and stamp > rang_at
            if overdue is None:
                wait = REST_EVERY_S
            elif overdue <= 0 and not on_alarm:
                wait = min(REST_MAX_S, max(REST_EVERY_S, -overdue))  # look again when it could be late
            if overdue is not None and overdue > 0:
                wait = STANDIN_EVERY_S
                available = _mem_available()
                if available is not None and available <= pipe.kill_below:
                    assert age is not None
                    _act(pipe.record, path, age, available, pipe.kill_below)
                    acted = True
        for fd, _ in poller.poll(None if wait is None else wait * 1000):
            if fd == alarm_fd:
                expired(fd)  # read, and so cleared (nothing to read: pushed again since the poll)
                rang_at = _boottime()
            else:
                pipe.read()
    return pipe.done, pipe.record


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _beat(fd: int) -> Beat:
    try:
        return parse_beat(os.pread(fd, LINE_BYTES + 8, 0))
    except OSError:
        return NO_BEAT


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _act(record: dict[str, Any], path: Path | None, age: float, available: int, kill_below: int) -> None:
    """The guard's heartbeat stopped and MemAvailable reached the kill line: kill the tree."""
    from sparktui.runtime.host.proc import sweep_orphans
    from sparktui.runtime.records.protocol import EventRecord, ExitRecord, ProtocolError
    from sparktui.runtime.records.state import read_state, write_state

    report = sweep_orphans(record, vouched=True, look_first=False)  # the owner's record; memory first
    if path is None:
        return
    gib = 1 << 30
    message = (
        f"the guard had not sampled for {age:.1f} s (its supervisor stopped or starved) and MemAvailable "
        f"fell to {available / gib:.2f} GiB, at the kill line {kill_below / gib:.2f} GiB: the reaper killed the tree"
    )
    try:
        state = read_state(path)
        if state is None or not state.running:
            return
        state.status, state.phase, state.updated_at = "exited", "stopped", time.time()
        state.exit = ExitRecord(reason="guard", by="reaper", stop=report.to_dict(), message=message)
        state.events.append(
            EventRecord.model_validate(
                {
                    "kind": "GuardTrip",
                    "t": time.time(),
                    "line": "kill",
                    "reason": "reaper stand-in",
                    "available_gib": round(available / gib, 3),
                    "threshold_gib": round(kill_below / gib, 3),
                }
            )
        )
        write_state(path, state)
    except (ProtocolError, OSError):
        pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C meant for the owner is not for us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a `kill` of the session must not stop the sweep
    fds: dict[str, int] = {}
    while argv[:1] in (["--beat-fd"], ["--alarm-fd"]):
        fds[argv[0]], argv = int(argv[1]), argv[2:]
    path = Path(argv[0]) if argv else None
    done, record = read_pipe(fds.get("--beat-fd"), path, fds.get("--alarm-fd"))  # until the owner closes the pipe
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
    vouched = record is not None  # the owner told it through the pipe; the state file anyone may have written
    if record is None and state is not None and state.running and state.tree is not None:
        record = state.tree.as_proc_record()
    if record is None:
        return 0
    report = sweep_orphans(record, vouched=vouched)
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

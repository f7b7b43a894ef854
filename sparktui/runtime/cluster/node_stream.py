"""A cluster's head hears of every worker's state changes as they happen, over one SSH session each.

On the worker, `sparktui node-watch --port P` (`stream_state`) prints one JSON line with the rank's
state as its supervisor recorded it, then one more each time what the head acts on changes (status,
phase, exit reason, the guard's MemAvailable): it sleeps in poll() on inotify (the state file is
replaced atomically on every write) and on a pidfd of the supervisor (a supervisor that dies without
a word is "lost" at once). It ends after the rank ended, or when its stdin closes: the head's ssh
went, so nothing is left behind on the worker. The head writes one line on that stdin, READY_LINE,
once its /health answers: node-watch passes it to the worker's supervisor (a cluster-ready request),
whose headless rank never logs "ready" itself, so its loop and guard can take their resting pace.
Each line carries the record's launch id (runtime/records/launch_id.py): the head knows its own rank from
another server that took the port there, and says "ready" (--launch-id) to its own rank only.

On the head, a `WorkerStream` per worker keeps that session (the system's ssh, with keep-alives so
a dead link ends it) and hands each line to the supervisor's loop, which it wakes. A session that
ends is opened again, backing off to RETRY_MAX_S. At rest nothing runs but the two sleeping ends.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sparktui.runtime.host.inotify import IN_CLOSE_WRITE, IN_CREATE, IN_DELETE, IN_MOVED_TO, IN_Q_OVERFLOW, Inotify

RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0
KEEPALIVE = ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"]  # a dead link ends ssh in ~10 s
ENDED = ("exited", "lost")
READY_LINE = "ready\n"  # head → worker on node-watch's stdin: the head answers /health


def _projection(data: dict[str, Any] | None, alive: bool) -> dict[str, Any]:
    """What the head acts on and shows, from a state record's JSON (None: no record)."""
    if data is None:
        return {"status": "none"}
    status = str(data.get("status") or "unknown")
    if not alive and status not in ENDED:
        status = "lost"  # the supervisor died without recording an end
    last = _obj(_obj(data.get("guard")).get("last"))
    launch_id = data.get("launch_id")
    return {
        "status": status,
        "launch_id": launch_id if isinstance(launch_id, str) else None,
        "phase": data.get("phase"),
        "exit_reason": _obj(data.get("exit")).get("reason"),
        "available_gib": last.get("available_gib"),
    }


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object of the record, or {} where a damaged record holds something else."""
    return value if isinstance(value, dict) else {}


def _read(path: Path) -> dict[str, Any] | None:
    """The state record's JSON; None when there is none or it is damaged (the next write mends it).
    UserError naming it when it is no regular file of sane size (a FIFO there hung node-watch), or
    when it or its folder is not ours alone (files.open_regular own): the head acts on what it says."""
    from sparktui.files import read_regular
    from sparktui.runtime.records.protocol import MAX_STATE_BYTES

    try:
        data = json.loads(read_regular(path, MAX_STATE_BYTES, "state record", own=True))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _pidfd_of(data: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """(the supervisor's pid, a pidfd on it) when it still runs; (pid, None) when it is gone."""
    from sparktui.runtime.host.proc import ProcessIdentity

    sup = _obj(_obj(data).get("supervisor"))
    pid, start = sup.get("pid"), sup.get("start_time")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(start, int):
        return None, None
    try:
        fd = os.pidfd_open(int(pid))
    except OSError:
        return int(pid), None
    if not ProcessIdentity(int(pid), start).is_alive():  # the pid was reused: not our supervisor
        os.close(fd)
        return int(pid), None
    return int(pid), fd


def stream_state(port: int, out: IO[str] = sys.stdout, stdin_fd: int = 0, launch_id: str | None = None) -> int:
    """Print the rank's state now and at every change the head cares about, until it ended or the
    head hung up (stdin closed: run it with stdin open, never `ssh -n`). Returns an exit status.
    `launch_id`: the head's; its word that it serves goes to the supervisor launched with it only."""
    from sparktui.runtime.records import state as st

    path = st.state_path(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    notify = Inotify()
    notify.add_watch(str(path.parent), IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE)
    poller = select.poll()
    poller.register(notify.fileno(), select.POLLIN)
    poller.register(stdin_fd, select.POLLIN)
    pid: int | None = None
    pidfd: int | None = None
    last: dict[str, Any] | None = None
    heard = _Heard()
    try:
        while True:
            if heard.ready and not heard.told:
                heard.told = _tell_ready(
                    port, launch_id
                )  # retried at the next wake while its supervisor cannot take it
            data = _read(path)
            sup_pid = _obj(_obj(data).get("supervisor")).get("pid")
            if data is not None and sup_pid != pid:  # a (new) supervisor: watch it end
                if pidfd is not None:
                    poller.unregister(pidfd)
                    os.close(pidfd)
                pid, pidfd = _pidfd_of(data)
                if pidfd is not None:
                    poller.register(pidfd, select.POLLIN)
            alive = pidfd is not None and not select.select([pidfd], [], [], 0)[0]
            now = _projection(data, alive)
            if launch_id and now["status"] in ENDED and now["launch_id"] != launch_id:
                now = {"status": "none"}  # another launch's leftover: this launch's rank has no record yet
            if now != last:
                try:
                    out.write(json.dumps(now) + "\n")
                    out.flush()
                except OSError:  # the head went (EPIPE)
                    return 0
                last = now
            if now["status"] in ENDED:
                return 0
            if not _wait(poller, notify, stdin_fd, path.name, heard):
                return 0
    finally:
        if pidfd is not None:
            os.close(pidfd)
        notify.close()


class _Heard:
    """What the head said on stdin: READY_LINE (its /health answers), and whether this node's
    supervisor has taken it."""

    def __init__(self) -> None:
        self.ready = False
        self.told = False


def _tell_ready(port: int, launch_id: str | None) -> bool:
    """Pass the head's word to this node's supervisor (it rests); False when it could not take it
    (or is not the one launched with `launch_id`)."""
    from sparktui.errors import UserError
    from sparktui.runtime.records import protocol as pr
    from sparktui.runtime.records import state as st

    try:
        return st.request(port, pr.ClusterReadyRequest(cmd="cluster-ready", only_id=launch_id), timeout=5).ok
    except (UserError, OSError):
        return False


def _wait(poller: select.poll, notify: Inotify, stdin_fd: int, name: str, heard: _Heard) -> bool:
    """Sleep until the state file changed, the supervisor ended or the head said it is ready
    (True), or stdin closed (False)."""
    while True:
        for fd, _ in poller.poll():
            if fd == stdin_fd:
                data = os.read(stdin_fd, 4096)
                if not data:
                    return False  # the head's ssh closed the session
                if READY_LINE.encode() in data and not heard.ready:
                    heard.ready = True
                    return True
            elif fd == notify.fileno():
                if any(e.name == name or e.mask & IN_Q_OVERFLOW for e in notify.read()):
                    return True
            else:  # the supervisor's pidfd
                return True


class WorkerStream:
    """The head's end of one worker's stream: the latest line, and whether the session is up."""

    def __init__(self, host: str, port: int, wake: Callable[[], None], launch_id: str | None = None) -> None:
        self.host, self.port, self.wake = host, port, wake
        self.launch_id = launch_id  # the head's: node-watch says "ready" to the rank launched with it only
        self.latest: dict[str, Any] | None = None
        self.connected = False
        self.news = False  # a line (or a lost session) the head has not looked at yet
        self.lines = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._ready = False  # the head serves: said on every session, the next ones too
        self._thread = threading.Thread(target=self._run, name=f"node-stream-{host}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def take(self) -> tuple[dict[str, Any] | None, bool]:
        """(the latest state line, the session is up), clearing the news."""
        with self._lock:
            self.news = False
            return self.latest, self.connected

    def say_ready(self) -> None:
        """Tell the worker the cluster serves (a line on node-watch's stdin), now and on every
        session opened later."""
        with self._lock:
            self._ready = True
            if self._proc is not None:
                _say_ready(self._proc)

    def _argv(self) -> list[str]:
        from sparktui.runtime.cluster.ssh import ssh_argv

        remote = ["sparktui", "node-watch", "--port", str(self.port)]
        remote += ["--launch-id", self.launch_id] if self.launch_id else []
        argv = ssh_argv(self.host, remote)
        return [argv[0], *KEEPALIVE, *argv[1:]]

    def _run(self) -> None:
        backoff = RETRY_MIN_S
        while not self._closed.is_set():
            try:
                proc = subprocess.Popen(
                    self._argv(),
                    stdin=subprocess.PIPE,  # READY_LINE once the head serves; its close ends the worker's end
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            except OSError:
                proc = None
            if proc is not None:
                with self._lock:
                    self._proc = proc
                    if self._ready:
                        _say_ready(proc)
                if self._closed.is_set():  # closed while it was starting
                    _hang_up(proc)
                    return
                assert proc.stdout is not None
                for line in proc.stdout:
                    try:
                        data = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(data, dict):
                        continue
                    with self._lock:
                        self.latest, self.connected, self.news = data, True, True
                        self.lines += 1
                    backoff = RETRY_MIN_S
                    self.wake()
                proc.wait()
            with self._lock:
                if self.connected:
                    self.connected, self.news = False, True
            self.wake()
            if (self.latest or {}).get("status") in ENDED:
                return  # the rank ended: there is nothing more to hear
            self._closed.wait(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            _hang_up(proc)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def _say_ready(proc: subprocess.Popen[str]) -> None:
    if proc.stdin is None:
        return
    try:
        proc.stdin.write(READY_LINE)
        proc.stdin.flush()
    except (OSError, ValueError):  # the session went (or is closing): the next one says it again
        pass


def _hang_up(proc: subprocess.Popen[str]) -> None:
    """End a session: its stdin closed (the worker's node-watch ends on it), then ssh exits."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

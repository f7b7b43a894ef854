"""`sparktui node-watch`: the worker's end of the stream that carries its rank's state to the head.
A line now, one at each change the head acts on, none for writes that change nothing it reads; the
supervisor dying without a word is "lost" at once; closing stdin (the head hung up) ends it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sparktui.atomic import atomic_write_text
from sparktui.runtime.host.proc import read_stat

pytestmark = pytest.mark.slow
PORT = 8123


class Watcher:
    """`sparktui node-watch` on a state dir, its lines read as they come."""

    def __init__(self, state_dir: Path, launch_id: str | None = None) -> None:
        env = {**os.environ, "SPARKTUI_STATE_DIR": str(state_dir)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparktui", "node-watch", "--port", str(PORT)]
            + (["--launch-id", launch_id] if launch_id else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def next(self, timeout: float = 30.0) -> dict[str, Any]:
        return self.lines.get(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def sleeper() -> Any:
    """A live process standing in for the rank's supervisor."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def write(state_dir: Path, sup: subprocess.Popen[bytes], status: str, **more: Any) -> None:
    info = read_stat(sup.pid)
    assert info is not None
    record = {"status": status, "supervisor": {"pid": sup.pid, "start_time": info.start_time}, **more}
    path = state_dir / "servers" / f"{PORT}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record))


def test_a_line_at_each_change_and_lost_when_the_supervisor_dies(tmp_path: Path, sleeper: Any) -> None:
    write(tmp_path, sleeper, "starting", phase="loading")
    watcher = Watcher(tmp_path)
    try:
        assert watcher.next() == {
            "status": "starting",
            "launch_id": None,
            "phase": "loading",
            "exit_reason": None,
            "available_gib": None,
        }
        # a write that changes nothing the head reads gives no line; the next change does
        write(tmp_path, sleeper, "starting", phase="loading", metrics={"running": 0})
        write(tmp_path, sleeper, "running", phase="ready", guard={"last": {"available_gib": 91.5}})
        assert watcher.next() == {
            "status": "running",
            "launch_id": None,
            "phase": "ready",
            "exit_reason": None,
            "available_gib": 91.5,
        }
        sleeper.kill()  # the supervisor dies without recording an end
        assert watcher.next()["status"] == "lost"
        assert watcher.proc.wait(timeout=30) == 0
        assert watcher.lines.empty()
    finally:
        watcher.close()


def test_an_exit_is_the_last_line(tmp_path: Path, sleeper: Any) -> None:
    watcher = Watcher(tmp_path)
    try:
        assert watcher.next()["status"] == "none"  # no record yet: said, and waited for
        write(tmp_path, sleeper, "running", phase="ready")
        assert watcher.next()["status"] == "running"
        write(tmp_path, sleeper, "exited", phase="stopped", exit={"reason": "guard"})
        assert watcher.next() == {
            "status": "exited",
            "launch_id": None,
            "phase": "stopped",
            "exit_reason": "guard",
            "available_gib": None,
        }
        assert watcher.proc.wait(timeout=30) == 0
    finally:
        watcher.close()


def test_it_ends_when_the_head_hangs_up(tmp_path: Path, sleeper: Any) -> None:
    write(tmp_path, sleeper, "running", phase="ready")
    watcher = Watcher(tmp_path)
    try:
        assert watcher.next()["status"] == "running"
        assert watcher.proc.stdin is not None
        watcher.proc.stdin.close()  # what the worker's sshd does when the head's ssh goes
        assert watcher.proc.wait(timeout=30) == 0
    finally:
        watcher.close()


def test_each_line_names_the_launch_and_another_launchs_leftover_is_no_record(tmp_path: Path, sleeper: Any) -> None:
    """The head tells its rank from another server on the port by the launch id on each line. With
    --launch-id (the head's), an ended record of another launch (a leftover of an earlier run) is no
    record of this launch's rank: the watch waits for it rather than end on someone else's exit."""
    write(tmp_path, sleeper, "exited", phase="stopped", exit={"reason": "stopped"}, launch_id="earlier")
    watcher = Watcher(tmp_path, launch_id="ours")
    try:
        assert watcher.next() == {"status": "none"}
        write(tmp_path, sleeper, "starting", phase="loading", launch_id="ours")
        line = watcher.next()
        assert line["status"] == "starting" and line["launch_id"] == "ours"
        # another server took the port (live): said as it is, for the head to act on
        write(tmp_path, sleeper, "running", phase="ready", launch_id="someone-else")
        line = watcher.next()
        assert line["status"] == "running" and line["launch_id"] == "someone-else"
        assert watcher.proc.poll() is None
    finally:
        watcher.close()


def test_a_record_in_a_servers_folder_others_may_write_in_is_not_streamed(tmp_path: Path, sleeper: Any) -> None:
    # the head ends or trusts its rank by these lines: a planted "exited" would end the cluster
    write(tmp_path, sleeper, "exited", phase="stopped", exit={"reason": "guard"})
    folder = tmp_path / "servers"
    folder.chmod(0o777)
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(tmp_path)}
    argv = [sys.executable, "-m", "sparktui", "node-watch", "--port", str(PORT)]
    done = subprocess.run(argv, env=env, input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done
    assert done.stdout == "", done.stdout  # no line for the head to act on
    assert f"{folder}: writable by other users (mode 0777" in done.stderr and f"chmod 700 {folder}" in done.stderr

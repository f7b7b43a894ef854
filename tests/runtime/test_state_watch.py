"""runtime.state_watch: one wake per change of a server's record, none while nothing changes, and a
close from another thread ends the wait at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sparktui.atomic import atomic_write_text
from sparktui.runtime.host import inotify as ino
from sparktui.runtime.records.state_watch import StateDirWatch
from tests.support import wait_for


class Counting:
    """Iterate a watch in a thread, counting its wakes."""

    def __init__(self, watch: StateDirWatch) -> None:
        self.watch = watch
        self.wakes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for _ in self.watch:
            self.wakes += 1

    def close(self) -> float:
        """Close the watch; how long the iterating thread took to end."""
        t0 = time.monotonic()
        self.watch.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the watch did not end when closed"
        return time.monotonic() - t0


@pytest.fixture(params=["inotify", "mtime"])
def watch(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateDirWatch:
    if request.param == "mtime":

        def no_inotify() -> None:
            raise OSError("no inotify here")

        monkeypatch.setattr(ino, "Inotify", no_inotify)
    return StateDirWatch(tmp_path / "state", settle_s=0.05, fallback_s=0.2)


def test_a_record_written_in_a_folder_that_did_not_exist_wakes_it(watch: StateDirWatch) -> None:
    root = watch.root
    counting = Counting(watch)
    try:
        assert watch.armed.wait(10)
        time.sleep(0.5)  # a while with nothing changed: no wake
        assert counting.wakes == 0
        atomic_write_text(root / "servers" / "8000.json", "{}", private=True)
        wait_for(lambda: counting.wakes >= 1, 10, "a wake for the new record")
        seen = counting.wakes
        atomic_write_text(root / "servers" / "8000.json", '{"status": "exited"}', private=True)
        wait_for(lambda: counting.wakes > seen, 10, "a wake for the replaced record")
        seen = counting.wakes
        (root / "cluster").mkdir()
        atomic_write_text(root / "cluster" / "8000.json", "[]", private=True)
        wait_for(lambda: counting.wakes > seen, 10, "a wake for a cluster's nodes file")
    finally:
        counting.close()


def test_close_ends_an_idle_wait_at_once(tmp_path: Path) -> None:
    (tmp_path / "servers").mkdir()
    # fallback_s is long: only the close's wake can end the wait quickly
    counting = Counting(StateDirWatch(tmp_path, fallback_s=60))
    assert counting.watch.armed.wait(10)
    assert counting.close() < 5
    assert counting.wakes == 0


def test_closed_before_it_ran_it_never_waits(tmp_path: Path) -> None:
    watch = StateDirWatch(tmp_path)
    watch.close()
    assert list(watch) == []


def test_a_change_beside_the_folders_wakes_it_once_not_for_ever(tmp_path: Path) -> None:
    """`cluster/` does not exist, so the state dir itself is watched for it: another folder made
    there (the first launch makes `logs/`, the post-mortem check `flight/`) is one wake at most.
    Re-arming the watch on it used to end the old watches, whose IN_IGNORED events re-armed it
    again: a wake (and a read of every record) every `settle_s`, for as long as the panel ran."""
    (tmp_path / "servers").mkdir()
    counting = Counting(StateDirWatch(tmp_path, settle_s=0.05, fallback_s=60))
    try:
        assert counting.watch.armed.wait(10)
        (tmp_path / "flight").mkdir()
        time.sleep(1.0)  # some 20 settle periods
        assert counting.wakes <= 1
    finally:
        counting.close()

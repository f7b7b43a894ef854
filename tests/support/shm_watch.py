"""Every test removes what it made in /dev/shm (on a Spark that is RAM): tests/conftest.py runs
this around each test that starts processes.

Only files this test's own processes held count, never another run's on the same machine (other
test runs, xdist workers, a real server): each test puts a token of its own in the environment
(OWNER_ENV), which every process it starts inherits, however detached (vLLM included); while the
test runs, a thread looks at the new /dev/shm files named like the product's (proc.SHM_PATTERNS)
and records those a process carrying the token (or this one) maps or holds open. At the end, one
of those that is still there and that no live process holds is a leftover: removed, and the test
fails naming it. A file made and let go between two looks is not seen: this misses some leaks,
never blames a test for another's file."""

from __future__ import annotations

import os
import threading
import time
import uuid

from sparktui.runtime.host import proc

OWNER_ENV = "SPARKTUI_TEST_SHM_OWNER"
LOOK_EVERY_S = 0.02  # a new file is looked at this soon (a scandir; /proc only when one appears)
RELOOK_EVERY_S = 1.0  # a file no process of ours held yet (another run's, most likely): again this often
SETTLE_S = 5.0  # at the end: how long a detached supervisor or reaper gets to finish its own cleanup


class ShmWatch:
    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{uuid.uuid4().hex}"
        self.before = proc._shm_snapshot()
        self.since = time.time()
        self.ours: dict[proc.ShmKey, str] = {}  # files a process of this test held: (dev, ino) -> name
        self._looked: set[proc.ShmKey] = set()
        self._relook_at = 0.0
        self._marked: dict[int, tuple[int, bool]] = {}  # pid -> (start time, carries the token)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shm-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(LOOK_EVERY_S):
            self.look()

    def _ours(self) -> list[int]:
        """This process and every live process that carries the token."""
        needle = f"\0{OWNER_ENV}={self.token}\0".encode()
        pids = [os.getpid()]
        for info in proc.scan_processes():
            known = self._marked.get(info.pid)
            if known is None or known[0] != info.start_time:
                try:
                    with open(f"/proc/{info.pid}/environ", "rb") as f:
                        carries = needle in b"\0" + f.read()
                except OSError:
                    continue
                known = self._marked[info.pid] = (info.start_time, carries)
            if known[1] and not info.dead:
                pids.append(info.pid)
        return pids

    def look(self) -> None:
        new = proc._shm_new_files(self.since, self.before)
        unexplained = new.keys() - self.ours.keys()
        now = time.monotonic()
        if not unexplained or (unexplained <= self._looked and now < self._relook_at):
            return
        self._looked = (self._looked & new.keys()) | unexplained
        self._relook_at = now + RELOOK_EVERY_S
        for pid in self._ours():
            for dev in {dev for dev, _ in unexplained}:
                held, _ = proc._shm_held(pid, dev)
                self.ours.update((key, new[key][0]) for key in held.keys() & unexplained)

    def stop(self) -> list[str]:
        """Stop watching; remove this test's leftovers and return their names."""
        self._stop.set()
        self._thread.join()
        self.look()
        deadline = time.monotonic() + SETTLE_S
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        removed = []
        for key, name in left.items():
            try:
                st = os.stat(proc.SHM_DIR / name, follow_symlinks=False)
                if (st.st_dev, st.st_ino) == key:
                    os.unlink(proc.SHM_DIR / name)
                    removed.append(name)
            except FileNotFoundError:
                pass
        return sorted(removed)

    def leftovers(self) -> dict[proc.ShmKey, str]:
        """This test's files still in /dev/shm that no live process holds."""
        there = {}
        for key, name in self.ours.items():
            try:
                st = os.stat(proc.SHM_DIR / name, follow_symlinks=False)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == key:
                there[key] = name
        used, _ = proc._shm_in_use(set(there)) if there else (set(), False)
        return {key: name for key, name in there.items() if key not in used}
